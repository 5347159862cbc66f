"""`pzasync.evaluate`: a run's (or your own) policies scored in the mode that fits the game, beside baselines.

One function builds the figures that `pzasync eval` prints and writes with `--json` (schema:
docs/eval-schema.json), that `pzasync train` prints at its end, and that Python gets back as an `Evaluation`:

- the scoring mode and why (evaluation/scoring.py: "seats", "team" or "sides");
- how the policies act: "greedy" (the default) or "sampled" from their own distributions (`acting`; a Gaussian
  policy whose wide spread acts through the clipping of a Box action does not do what its mean does);
- the trained policies' score per unit (seat, side or team) against the yardstick `vs`;
- baselines: fresh (untrained) networks of the same learners scored the same way, and random play: in "team"
  and "sides" the unit's seats played at random, in "seats" the trained seat against random opponents (a
  scripted yardstick's own baseline is the untrained network).
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pzasync.core.environments import EnvSpec, choose_env_api
from pzasync.core.groups import resolve_groups
from pzasync.errors import ConfigError
from pzasync.evaluation.episodes import ACTING_MODES, eval_copies
from pzasync.evaluation.evaluate import (
    EvalResult,
    fresh_policies,
    load_run_policies,
    player_name,
    run_env,
    score_units,
)
from pzasync.evaluation.scoring import choose_scoring, units_for
from pzasync.recipes import env_api_for
from pzasync.runtime.rundir import RunDirectory

#: The `schema_version` of `Evaluation.to_json` (docs/eval-schema.json).
SCHEMA_VERSION = 1


@dataclass
class Evaluation:
    """What `evaluate` found: the scoring mode and why, the units scored, and one `EvalResult` per (unit,
    policy, opponent); `to_json()` is `pzasync eval --json`'s document."""

    env: str
    scoring: str
    #: Why this mode: asked for, the env's recipe's, or read from the env (`choose_scoring`).
    scoring_reason: str
    vs: str
    episodes: int
    seed: int
    copies: int
    #: Each scored unit (a seat, a side, or "team") and its member agents.
    units: dict[str, list[str]]
    results: list[EvalResult] = field(default_factory=list)
    run_dir: str | None = None
    seconds: float = 0.0
    #: How the trained and untrained policies picked their actions (`ACTING_MODES`).
    acting: str = "greedy"
    #: On an env set: which of its splits was played ("train" or "test"); else None.
    split: str | None = None
    #: The agent steps of the run's policy snapshot that was scored (`pzasync eval --snapshot`); None: its checkpoints.
    snapshot: int | None = None

    def result(self, unit: str, policy: str = "trained", against: str | None = None) -> EvalResult | None:
        """The result of `unit` played by `policy` ("trained", "untrained", "random") against `against`
        (default: the first evaluated, the yardstick's), None if it was not evaluated."""
        return next((r for r in self.results if r.agent == unit and r.policy == policy
                     and (against is None or r.opponent == against)), None)

    def to_json(self) -> dict[str, Any]:
        """The evaluation as plain JSON values (docs/eval-schema.json); intervals that need two episodes and
        have one are null."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            pzasync_version = version("pzasync")
        except PackageNotFoundError:
            pzasync_version = "unknown"

        def number(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        rows = []
        for r in self.results:
            lo, hi = r.win_rate_ci95
            rows.append({"unit": r.agent, "members": list(r.members or (r.agent,)), "policy": r.policy,
                         "against": r.opponent, "episodes": r.episodes, "mean_return": number(r.mean),
                         "mean_return_ci95": number(r.mean_ci95), "outcomes": r.outcomes, "wins": r.wins,
                         "draws": r.draws, "losses": r.episodes - r.wins - r.draws, "win_rate": r.win_rate,
                         "win_rate_ci95": [lo, hi], "returns": [float(x) for x in r.returns],
                         **({"envs": dict(r.envs)} if r.envs else {})})
        return {"schema_version": SCHEMA_VERSION, "pzasync_version": pzasync_version, "env": self.env,
                "run_dir": self.run_dir, "scoring": self.scoring, "scoring_reason": self.scoring_reason,
                "vs": self.vs, "acting": self.acting, "episodes": self.episodes, "seed": self.seed,
                "copies": self.copies, "seconds": round(self.seconds, 3),
                "units": {u: list(m) for u, m in self.units.items()}, "results": rows,
                **({"split": self.split} if self.split is not None else {}),
                **({"snapshot": self.snapshot} if self.snapshot is not None else {})}


def _split_of(info: dict[str, Any], split: str | None) -> str | None:
    """The split `evaluate` plays of a run's env set: `split`, else its test split where it has one."""
    table = info.get("env_set")
    if split is not None or table is None:
        return split
    return "test" if table.get("test") else "train"


def _stage_reached(run_dir: str) -> int | None:
    """The curriculum stage a finished run reached (its result.json), or None."""
    path = Path(run_dir) / "result.json"
    if not path.exists():
        return None
    import json

    summary = json.loads(path.read_text()).get("env_set") or {}
    return summary.get("stage")


def _opponents(vs: Any) -> tuple[Any, str]:
    """The yardstick as `score_units` takes it, and its name: a run directory's policies, or a player spec."""
    if isinstance(vs, dict):
        return vs, "opponent run"
    if isinstance(vs, (str, Path)) and os.path.isdir(vs):
        return load_run_policies(vs), str(vs)
    return vs, player_name(vs)


def evaluate(run_dir_or_policies: str | Path | dict[str, tuple[Any, Any]], env: Any = None, vs: Any = "random",
             episodes: int = 400, seed: int = 12345, scoring: str | None = None, *, learners: Any = None,
             baselines: bool = True, copies: int | None = None, max_episode_steps: int | None = None,
             progress: Callable[[str], None] | None = None, acting: str = "greedy",
             env_api: str | None = None, split: str | None = None, snapshot: int | None = None,
             seconds: float | None = None) -> Evaluation:
    """Score trained policies in the mode that fits the game, with baselines (module docstring).

    `run_dir_or_policies`: a run directory (its checkpoints; its env, learners and episode limit
    unless given) or a dict agent -> (policy, layout), which needs `env`. `vs`: the yardstick ("random",
    "one_ply", "negamax,depth=2", "perfect", "module:callable", or another run's directory). `scoring`: "seats",
    "team" or "sides"; None: the env's recipe's, else read from the env (`choose_scoring`). `learners`: the
    learner specs of the untrained baseline (a run directory's own by default; without any, no untrained
    baseline). `baselines`: False scores the trained policies only. `episodes` per unit and evaluation, over
    `copies` env copies with batched forwards (None: `eval_copies`, by the env's agents); the same `seed` gives the
    same figures whatever the copies. `env_api`: "auto", "aec" or "parallel" (`choose_env_api`; a run directory's
    own by default, else "auto"): on the parallel path a round answers a whole cycle. `acting`: "greedy" or
    "sampled" (the trained and the untrained policies draw from their own distributions, seeded per episode and
    turn; yardsticks and random play are unchanged). `progress(label)` is called after each evaluation. `split`:
    for a run on an env set (docs/running.md, "Env sets"), which of its splits to play, "train" or "test" (None:
    its test split where it has one, else its train split at the curriculum stage the run reached). `snapshot`: the
    agent steps of one of the run directory's policy snapshots (RunConfig.snapshot_every_steps) to score instead of
    its checkpoints: a point of the learning curve, scored after the run. `seconds`: a time budget for the whole
    (None: none): each of its evaluations (the trained policies, the untrained ones, random play) gets an equal
    share of what is left when it starts, its units share that (`score_units`), and a unit plays fewer than
    `episodes` games where its share is spent (a game begun is finished; at least one round each).
    """
    started = time.monotonic()
    if seconds is not None and seconds < 0:
        raise ConfigError(f"pzasync.evaluate: seconds={seconds}: must be >= 0")
    run_dir = None
    if isinstance(run_dir_or_policies, (str, Path)):
        run_dir = str(run_dir_or_policies)
        info = RunDirectory(run_dir, create=False).read_json("run.json")
        policies = load_run_policies(run_dir, snapshot)
        if env is None:
            env = run_env(run_dir, _split_of(info, split), _stage_reached(run_dir))  # mappo acts without the state
        if learners is None:
            learners = info.get("learners")
        config = info.get("config", {})
        max_episode_steps = config.get("max_episode_steps") if max_episode_steps is None else max_episode_steps
        env_api = config.get("env_api", "auto") if env_api is None else env_api
        groups = config.get("agent_groups") or None
    elif snapshot is not None:
        raise ConfigError("pzasync.evaluate: snapshot=... needs a run directory, not a dict of policies")
    elif isinstance(run_dir_or_policies, dict):
        policies, groups = run_dir_or_policies, None
        if env is None:
            raise ConfigError("pzasync.evaluate: policies given as a dict need env=... (an env id or EnvSpec)")
    else:
        raise ConfigError(f"pzasync.evaluate: expected a run directory or a dict agent -> (policy, layout), got "
                          f"{type(run_dir_or_policies).__name__}")
    if episodes < 1:
        raise ConfigError(f"pzasync.evaluate: episodes={episodes}: must be >= 1")
    if copies is not None and copies < 1:
        raise ConfigError(f"pzasync.evaluate: copies={copies}: must be >= 1")
    if acting not in ACTING_MODES:
        raise ConfigError(f"pzasync.evaluate: acting={acting!r}: expected one of {', '.join(ACTING_MODES)}")
    spec = env if isinstance(env, EnvSpec) else EnvSpec.of(env)
    mode, why = choose_scoring(spec, scoring)
    probe = spec.make()
    try:
        agents = list(probe.possible_agents)
        api, _why = choose_env_api(spec, env_api or "auto", probe, env_api_for(spec.base_name))
    finally:
        probe.close()
    copies = eval_copies(len(agents), api) if copies is None else copies
    units = units_for(mode, agents, list(policies))
    opponents, name = _opponents(vs)
    if split is not None and spec.env_set is None:
        raise ConfigError(f"split {split!r}: the env evaluated is not an env set (pzasync train --env-set FILE)")
    played: str | None = getattr(spec.source, "split", None) if spec.env_set is not None else None
    report = Evaluation(spec.name, mode, why, name, episodes, seed, copies, units, run_dir=run_dir, acting=acting,
                        split=played, snapshot=snapshot)

    # `explore` reaches the seated policies only: random play and the yardsticks are never asked to sample.
    score = functools.partial(score_units, max_episode_steps=max_episode_steps, copies=copies,
                              explore=acting == "sampled", env_api=api)

    def untrained(budget: float | None) -> list[EvalResult]:
        fresh_spec, fresh = fresh_policies(spec, learners, seed, resolve_groups(groups, agents) if groups else None)
        return score(fresh_spec, fresh, units_for(mode, agents, list(fresh)), opponents, episodes, seed,
                     opponent_name=name, policy="untrained", seconds=budget)

    # The evaluations in the order they play: (label for `progress`, play it within a budget of seconds or None).
    evaluations: list[tuple[str, Callable[[float | None], list[EvalResult]]]] = [
        ("trained", lambda budget: score(spec, policies, units, opponents, episodes, seed, opponent_name=name,
                                         seconds=budget))]
    if baselines and learners is not None:
        evaluations.append(("untrained", untrained))
    if baselines and mode == "seats" and name != "random":
        evaluations.append(("trained against random", lambda budget: score(
            spec, policies, units, "random", episodes, seed, opponent_name="random", seconds=budget)))
    elif baselines and mode != "seats":
        evaluations.append(("random", lambda budget: score(spec, "random", units, opponents, episodes, seed,
                                                           opponent_name=name, policy="random", seconds=budget)))
    for number, (label, play) in enumerate(evaluations):
        # an equal part of what the budget has left for this evaluation and those after it
        budget = None if seconds is None else max(0.0, started + seconds - time.monotonic()) / (
            len(evaluations) - number)
        report.results += play(budget)
        if progress is not None:
            progress(label)
    report.seconds = time.monotonic() - started
    return report

