"""A run directory: config, metrics (JSONL, and TensorBoard when installed), checkpoints, result and plot.

Layout:
    run.json            what was run: env spec, learner specs, RunConfig, pzasync version
    episodes.jsonl      one line per episode: wall time, agent steps, per-agent returns (and the league match)
    metrics.jsonl       one line per agent report: wall time, agent steps, updates, version, learner metrics;
                        and one per evaluation ("kind": "eval")
    tb/                 the same learner metrics and evaluation scores as TensorBoard scalars (the extra), the plots
    wandb/, mlruns/     with RunConfig.tracker: Weights & Biases' offline run, MLflow's file store (runtime/trackers)
    checkpoints/AGENT.pt learner + optimiser state (see learners.players.save_checkpoint)
    result.json         the RunResult
    returns.png         episode returns against wall time, per agent
    eval.png            evaluation while training (RunConfig.eval_vs): yardstick score, 95% intervals
    league.jsonl        league ratings every 20 rated games, at most once a second (RunConfig.league)
    league.png          league ratings of the snapshots and players, ± 2 RD
    league/UNIT-vN.npy  the league's snapshot pool (at most league_pool_size per unit)
    snapshots.jsonl     with RunConfig.snapshot_every_steps: one line per policy snapshot (agent steps, seconds,
                        each unit's version, updates and file); `pzasync eval RUN --snapshot STEPS` scores one
    snapshots/UNIT-STEPS.npy  a learning unit's acting policy at that snapshot, as a parameter vector
    snapshots.png       `pzasync eval RUN --snapshot all`: every snapshot's score against agent steps and seconds
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from pzasync.core.groups import members_label, resolve_groups, units_in_order
from pzasync.errors import ConfigError
from pzasync.runtime.trackers import FINISHED, TrackedRun, Trackers, open_trackers


def safe_name(agent: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(agent))


def check_out_dir(root: str | os.PathLike) -> None:
    """Create `root` if needed and write (then remove) a probe file in it: a ConfigError of one line, before
    anything starts, if run directories cannot be written there."""
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".pzasync-probe-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = f"{type(exc).__name__}: {exc.strerror or exc}"
        raise ConfigError(f"option out_dir={str(root)!r}: cannot write run directories there ({reason})") from None


class RunDirectory:
    """Writes one run's files; every write is appended or atomically replaced, so a killed run stays readable."""

    def __init__(self, path: str | os.PathLike, create: bool = True) -> None:
        self.path = Path(path)
        if create:
            (self.path / "checkpoints").mkdir(parents=True, exist_ok=True)
        elif not (self.path / "run.json").exists():
            raise ConfigError(f"{self.path} is not a pzasync run directory (no run.json)")
        #: The run's experiment trackers (`open_trackers`): the learner metrics, evaluation rows and plots mirrored
        #: there (none until they are opened).
        self.tracker = Trackers()

    @classmethod
    def new(cls, root: str | os.PathLike, env_name: str) -> RunDirectory:
        """A fresh directory ROOT/ENV-STAMP (ENV-STAMP-2, -3, ... where taken), claimed by an atomic mkdir: runs
        started in the same second, in other processes too (`pzasync suite --parallel`), never share one."""
        check_out_dir(root)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(root) / f"{safe_name(env_name.rsplit('.', 1)[-1])}-{stamp}"
        path, n = base, 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = Path(f"{base}-{n}")
        return cls(path)

    def checkpoint_path(self, agent: str) -> str:
        return str(self.path / "checkpoints" / f"{safe_name(agent)}.pt")

    def snapshot_path(self, unit: str, agent_steps: int) -> Path:
        """Where a learning unit's policy snapshot taken at `agent_steps` is kept (RunConfig.snapshot_every_steps)."""
        return self.path / "snapshots" / f"{safe_name(unit)}-{int(agent_steps)}.npy"

    def write_json(self, name: str, data: Any) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=2, default=str))
        os.replace(tmp, self.path / name)

    def read_json(self, name: str) -> Any:
        return json.loads((self.path / name).read_text())

    def append(self, name: str, row: dict[str, Any]) -> None:
        with open(self.path / name, "a") as f:
            f.write(json.dumps(row, default=float) + "\n")

    def read_jsonl(self, name: str) -> list[dict[str, Any]]:
        file = self.path / name
        if not file.exists():
            return []
        return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]

    def evaluation_rows(self) -> list[dict[str, Any]]:
        """The evaluator's rows while training (metrics.jsonl lines of "kind": "eval"), in the order written."""
        return [row for row in self.read_jsonl("metrics.jsonl") if row.get("kind") == "eval"]

    def open_trackers(self, names: Sequence[str]) -> None:
        """Open the run's experiment trackers (runtime/trackers: TensorBoard wherever it is installed, and those
        of RunConfig.tracker), the run named as this directory, run.json their parameters."""
        self.tracker.close()
        params = self.read_json("run.json") if (self.path / "run.json").exists() else {}
        self.tracker = open_trackers(names, TrackedRun(self.path, self.path.name, params))

    def close(self, status: str = FINISHED) -> None:
        """Close the trackers (`status`: how the run ended, runtime/trackers FINISHED, FAILED or KILLED)."""
        self.tracker.close(status)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None when the `plot` extra is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def returns_units(run_dir: RunDirectory, rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The lines the returns plots draw: each agent group of the run (run.json's agent_groups, resolved against the
    agents of episodes.jsonl `rows`) and each agent on its own, in the order the agents first appear there (the
    env's)."""
    agents = list(dict.fromkeys(a for r in rows for a in r["returns"]))
    try:
        groups = resolve_groups(run_dir.read_json("run.json")["config"].get("agent_groups") or {}, agents)
    except (OSError, ValueError, KeyError, ConfigError):  # no run.json (or not this run's agents): one line each
        groups = {}
    group_of = {a: g for g, members in groups.items() for a in members}
    return units_in_order({a: group_of.get(a, a) for a in agents})


def draw_returns(ax: Any, rows: list[dict[str, Any]], window: int | None = None, linewidth: float = 1.2,
                 units: dict[str, list[str]] | None = None) -> int:
    """Episode returns of episodes.jsonl rows, as moving averages against wall seconds, one line per agent, or
    with `units` (`returns_units`) one per learning unit: a group's line is its members' mean return in each
    episode, labelled with their short name (`red_0..red_80 (81 agents), group red`).

    The default window is 2% of the episodes (at least 10), so long runs show trends rather than noise.
    Returns the window used.
    """
    import numpy as np

    window = window or max(10, len(rows) // 50)
    if units is None:
        units = {a: [a] for a in sorted({a for r in rows for a in r["returns"]})}
    for i, (unit, members) in enumerate(units.items()):
        points = [(r["wall_s"], np.mean([r["returns"][m] for m in members if m in r["returns"]])) for r in rows
                  if any(m in r["returns"] for m in members)]
        t = np.array([p[0] for p in points])
        y = np.array([p[1] for p in points], dtype=float)
        w = max(1, min(window, len(y) // 5 or 1))
        ax.plot(t[w - 1:], np.convolve(y, np.ones(w) / w, mode="valid"), linewidth=linewidth, color=f"C{i}",
                label=unit if members == [unit] else f"{members_label(members)}, group {unit}")
    return window


def plot_returns(run_dir: RunDirectory, title: str, window: int | None = None) -> str | None:
    """Episode returns (moving average) against wall-clock seconds, one line per learning unit (an agent group's:
    its members' mean); returns the PNG path."""
    rows = run_dir.read_jsonl("episodes.jsonl")
    plt = pyplot()
    if not rows or plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    window = draw_returns(ax, rows, window, units=returns_units(run_dir, rows))
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel(f"episode return (moving average of {window})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    out = str(run_dir.path / "returns.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
