"""Evaluation while training: a separate, low-priority process scores the newest published policies.

The evaluator is an evaluation actor apart from the exploration actor. Every `RunConfig.eval_every_s` it
reads each learning unit's policy slot (a plain read of the published vector: the actor and the learners
never wait for it), loads it into its own copy of the policy, and scores the policies greedily for
`eval_episodes` games per scored unit (fewer where they would take longer than `eval_every_s`: long games of many
agents still give a row each round) in the mode that fits the game (`RunConfig.eval_scoring`: each learning
seat, the team or each side; evaluation/scoring.py) against the yardstick (`RunConfig.eval_vs`: a scripted
player, random, or another run's checkpoints) on a fixed seed, over env copies with batched forwards
(evaluation/episodes.py). Each unit's score goes back to the runner as one row,
written to metrics.jsonl (`"kind": "eval"`) and plotted to eval.png: win rate (or mean return) with a 95%
interval against wall-clock seconds and against agent steps, the training returns as a secondary panel.

The process runs at a lower CPU priority (nice 10), so on a busy machine it yields to the actor and the
learners; it exits when the run asks it to, or by itself when the runner's process is gone.

It talks to the runner over two one-way pipes, never a lock or an event that a dead process could leave
held: rows come back on one; the other is the stop, which the runner closes (closing never waits, whatever
state the evaluator is in, alive or dead) and the evaluator sees as end-of-file while it sleeps between rounds.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import AgentLayout, env_layouts, probe_info_masks
from pzasync.errors import ConfigError, report_unclean_exit
from pzasync.evaluation.evaluate import acting_env, load_run_policies, score_units
from pzasync.evaluation.exploitability import applies_to, leduc_exploitability
from pzasync.evaluation.scoring import choose_scoring, units_for
from pzasync.learners import Learner, resolve_learner, vector_to_policy
from pzasync.logs import logger
from pzasync.runtime.processes import process_context, runner_is_gone
from pzasync.runtime.rundir import draw_returns, pyplot, returns_units
from pzasync.runtime.stop_signals import ignore_stop_signals, shielded


@dataclass
class EvaluatorSetup:
    """Everything the evaluator process needs, picklable."""

    env_spec: Any
    #: Env agent -> (learner unit, "module:Class", validated options, layout, policy slot).
    seats: dict[str, tuple[str, str, dict, Any, Any]]
    yardstick: str
    every_s: float
    episodes: int
    seed: int
    stats: Any
    #: time.monotonic() when the run started (CLOCK_MONOTONIC is system-wide on Linux and macOS).
    run_start: float
    parent_pid: int
    max_episode_steps: int | None = None
    niceness: int = 10
    #: RunConfig.eval_scoring: "seats", "team", "sides", or None (the env's recipe's, else read from the env).
    scoring: str | None = None
    #: The env API the run's actor steps ("aec" or "parallel"): evaluation games are played the same way.
    env_api: str = "auto"


def acting_layouts(setup: EvaluatorSetup, classes: dict[str, type[Learner]]) -> tuple[EnvSpec, dict[str, AgentLayout]]:
    """The env the seats' policies are scored in and each seat's layout in it: the run's, less the global state
    beside the observations of agents whose policy acts on their own (`acting_env`: mappo's)."""
    layouts = {agent: seat[3] for agent, seat in setup.seats.items()}
    spec = acting_env(setup.env_spec, classes)
    if spec.state == setup.env_spec.state:
        return spec, layouts
    probe = spec.make()
    try:
        own = env_layouts(probe, probe_info_masks(probe, seed=setup.seed))
    finally:
        probe.close()
    kept = set(spec.state.agents) if spec.state is not None else set()
    return spec, {agent: layout if agent in kept else own[agent] for agent, layout in layouts.items()}


def evaluator_main(setup: EvaluatorSetup, rows: Any, stop: Any) -> None:
    """Body of the evaluator process: score the newest policies every `every_s` until told to stop.

    `rows`: the sending end of the runner's row pipe; `stop`: the receiving end of the stop pipe, readable
    (end-of-file) once the runner closes its end or dies."""
    ignore_stop_signals()
    try:
        os.nice(setup.niceness)
    except OSError:
        pass
    import numpy as np
    import torch

    torch.set_num_threads(1)
    try:
        policies: dict[str, tuple[Any, Any]] = {}
        vectors: dict[str, Any] = {}
        built: dict[str, tuple[Any, Any]] = {}  # per learning unit: members with the same spaces share a policy
        classes = {agent: resolve_learner(path, agent)[0] for agent, (_u, path, _o, _l, _s) in setup.seats.items()}
        spec, layouts = acting_layouts(setup, classes)
        for agent, (unit, _path, options, _layout, slot) in setup.seats.items():
            layout = layouts[agent]
            first = built.get(unit)
            if first is not None and replace(first[1], agent=agent) == layout:
                policies[agent] = (first[0], layout)
            else:
                policy = classes[agent].build_policy(layout, options)
                policy.eval()
                policies[agent] = built[unit] = (policy, layout)
            if unit not in vectors:
                vectors[unit] = np.zeros(slot.size, np.float32)
        opponents: Any = setup.yardstick
        if os.path.isdir(setup.yardstick):
            opponents = load_run_policies(setup.yardstick)
        scoring, _why = choose_scoring(spec, setup.scoring)
        probe = spec.make()
        agents = list(probe.possible_agents)
        probe.close()
        units = units_for(scoring, agents, list(policies))
        # leduc: each round also computes the policies' exact exploitability, while they give it
        exact = applies_to(setup.env_spec.base_name)
        round_index = 0
        while not _should_stop(setup, stop):
            started = time.monotonic()
            versions: dict[str, int] = {}
            loaded: set[int] = set()
            for agent, (unit, _path, _options, _layout, slot) in setup.seats.items():
                if unit not in versions:
                    versions[unit] = slot.read(vectors[unit]) if slot.version > 0 else 0
                if id(policies[agent][0]) not in loaded:
                    vector_to_policy(vectors[unit], policies[agent][0])
                    loaded.add(id(policies[agent][0]))
            if not all(v > 0 for v in versions.values()):
                stop.poll(0.1)  # a learner has not published its first policy yet: look again soon
                continue
            agent_steps = setup.stats.total_steps
            wall = started - setup.run_start
            # On an env set, a round plays the curriculum step the run is at when it starts, and its rows say which.
            spec, on_set = setup.env_spec, {}
            if spec.env_set is not None:
                stage = setup.stats.curriculum_stage
                spec, on_set = spec.with_stage(stage), {"split": "train", "stage": stage}
            # Within `every_s`: a round of long games (a battle of 162 agents) writes rows with fewer games.
            results = score_units(spec, policies, units, opponents, setup.episodes, seed=setup.seed,
                                  max_episode_steps=setup.max_episode_steps, env_api=setup.env_api,
                                  seconds=setup.every_s)
            extra = {}
            if exact:
                try:
                    extra["exploitability"] = leduc_exploitability(policies, "sampled").exploitability
                except (ConfigError, NotImplementedError):  # a seat not learning, or a policy without probabilities
                    exact = False
            for r in results:
                learning = list(dict.fromkeys(setup.seats[a][0] for a in r.members if a in setup.seats))
                rows.send({"kind": "eval", "round": round_index, "wall_s": round(wall, 3),
                          "agent_steps": agent_steps, "agent": r.agent, "members": list(r.members),
                          "scoring": scoring, "unit": ",".join(learning),
                          "version": min(versions[u] for u in learning), "opponent": r.opponent,
                          **r.summary(), **extra, **on_set, "round_rows": len(results),
                          "eval_seconds": round(time.monotonic() - started, 3)})
            round_index += 1
            deadline = started + setup.every_s
            while time.monotonic() < deadline and not _should_stop(setup, stop):
                stop.poll(0.25)
    except Exception as exc:  # noqa: BLE001 - reported to the runner, which warns and goes on without it
        try:
            rows.send({"kind": "eval_error", "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()})
        except OSError:
            pass  # the runner is gone or has stopped listening
    finally:
        rows.close()
        stop.close()


def _should_stop(setup: EvaluatorSetup, stop: Any) -> bool:
    return stop.poll() or runner_is_gone(setup.parent_pid) or setup.stats.stop_requested


class Evaluator:
    """The runner's handle on the evaluator process: start, collect rows, stop (never blocks the actor)."""

    def __init__(self, setup: EvaluatorSetup) -> None:
        ctx = process_context()
        rows, self._rows_sender = ctx.Pipe(duplex=False)
        #: The rows' receiving end; None once `stop` has closed it.
        self.rows: Connection | None = rows
        self._stop_receiver, self._stop = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=evaluator_main, args=(setup, self._rows_sender, self._stop_receiver),
                                   name="pzasync-evaluator", daemon=True)
        self.results: list[dict[str, Any]] = []
        self.error: str | None = None

    def start(self) -> None:
        with shielded():
            self.process.start()
        # The child's ends: closed here, so that the child's death reads as end-of-file on `rows`.
        self._rows_sender.close()
        self._stop_receiver.close()

    def collect(self) -> list[dict[str, Any]]:
        """Rows that arrived since the last call (non-blocking)."""
        new = []
        while self.rows is not None:
            try:
                if not self.rows.poll():
                    break
                row = self.rows.recv()
            except (EOFError, OSError):
                break  # the evaluator has exited (a row cut short by its death is dropped)
            if row.get("kind") == "eval_error":
                self.error = row["error"]
                logger.error(f"the evaluator failed ({row['error']}); training goes on without it.\n"
                      f"{row['traceback']}")
                continue
            new.append(row)
        self.results += new
        return new

    def stop(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Ask the process to finish its round and exit; kill it past `timeout`. Returns the last rows.

        Never waits without a deadline: closing the stop pipe returns at once whether the evaluator is alive,
        busy or dead."""
        self._stop.close()
        deadline = time.monotonic() + timeout
        new: list[dict[str, Any]] = []
        while self.process.is_alive() and time.monotonic() < deadline:
            new += self.collect()
            self.process.join(0.1)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        elif self.error is None:
            report_unclean_exit("the evaluator process", self.process)
        new += self.collect()
        assert self.rows is not None, "stop() is called once"
        self.rows.close()
        self.rows = None
        self.process.close()
        return new


def score_band(rows: list[dict[str, Any]], signed: bool) -> tuple[Any, Any, Any]:
    """Evaluation rows (an evaluator's, or `pzasync eval`'s per snapshot) -> arrays of the score and its 95%
    interval's ends: the win rate where the game has outcomes (`signed`), else the mean return."""
    import numpy as np

    if signed:
        return (np.array([r["win_rate"] for r in rows]), np.array([r["win_rate_ci95"][0] for r in rows]),
                np.array([r["win_rate_ci95"][1] for r in rows]))
    y = np.array([r["mean_return"] for r in rows])
    half = np.nan_to_num(np.array([r["mean_return_ci95"] for r in rows], dtype=float))
    return y, y - half, y + half


def plot_evaluations(run_dir: Any, rows: list[dict[str, Any]], title: str) -> str | None:
    """eval.png: yardstick score with 95% intervals against wall-clock seconds and agent steps, per agent;
    a secondary panel with the training episode returns (mirrored in self-play, so not a learning curve)."""
    import numpy as np

    plt = pyplot()
    if not rows or plt is None:
        return None
    signed = all(r.get("outcomes", True) for r in rows)  # game results (1/0/-1): win rates; else mean returns
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), gridspec_kw={"width_ratios": [2, 2, 1.3]})
    agents = sorted({r["agent"] for r in rows})
    opponent = rows[0]["opponent"]
    for i, agent in enumerate(agents):
        mine = sorted((r for r in rows if r["agent"] == agent), key=lambda r: r["wall_s"])
        y, lo, hi = score_band(mine, signed)
        for ax, key in ((axes[0], "wall_s"), (axes[1], "agent_steps")):
            x = np.array([r[key] for r in mine])
            ax.plot(x, y, "o-", markersize=3, color=f"C{i}", label=agent)
            ax.fill_between(x, lo, hi, color=f"C{i}", alpha=0.2)
    ylabel = f"win rate vs {opponent} (95% CI)" if signed else f"mean return vs {opponent} (95% CI)"
    for ax, xlabel in ((axes[0], "wall-clock seconds"), (axes[1], "agent steps")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if signed:
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    ax = axes[2]
    episodes = run_dir.read_jsonl("episodes.jsonl")
    draw_returns(ax, episodes, linewidth=1.0, units=returns_units(run_dir, episodes))
    ax.set_title("training returns (secondary:\nself-play returns mirror each other)", fontsize="small")
    ax.set_xlabel("wall-clock seconds")
    ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    out = str(run_dir.path / "eval.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
