"""A run's learning curve scored after the run: every policy snapshot it kept, evaluated the same way.

A run with `snapshot_every_steps` (`pzasync train --snapshot-every-steps N`) keeps each learning unit's acting policy
every N agent steps in its run directory (runtime/rundir.py, `snapshots/`). `evaluate_snapshots` scores each with
`evaluate` (same yardstick, episodes and seeds for every snapshot, so two points differ only by the policy), and
`plot_snapshots` draws the scores against agent steps and seconds into the run directory's `snapshots.png`.
`pzasync eval RUN --snapshot all` does both. Unlike the evaluator's rows while training (eval.png), this costs the
run nothing and every point gets as many episodes as asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pzasync.errors import ConfigError
from pzasync.evaluation.evaluator import score_band
from pzasync.evaluation.report import Evaluation, evaluate
from pzasync.runtime.rundir import RunDirectory, pyplot


def evaluate_snapshots(run_dir: str | Path, progress: Callable[[int, int], None] | None = None,
                       **options: Any) -> list[tuple[dict[str, Any], Evaluation]]:
    """Each policy snapshot of `run_dir`, in order, scored by `evaluate(run_dir, snapshot=..., **options)` (without
    baselines unless asked for): a list of (its snapshots.jsonl row, its Evaluation). `progress(done, total)` after
    each. A ConfigError if the run kept none."""
    rows = RunDirectory(run_dir, create=False).read_jsonl("snapshots.jsonl")
    if not rows:
        raise ConfigError(f"{run_dir} kept no policy snapshots (train with --snapshot-every-steps N to keep them)")
    options.setdefault("baselines", False)
    scored = []
    for i, row in enumerate(rows):
        scored.append((row, evaluate(run_dir, snapshot=int(row["agent_steps"]), **options)))
        if progress is not None:
            progress(i + 1, len(rows))
    return scored


def snapshot_rows(scored: list[tuple[dict[str, Any], Evaluation]]) -> list[dict[str, Any]]:
    """One plain row per snapshot and scored unit (trained policy): agent steps, seconds, the score and its
    interval (win rate where the game has outcomes, else mean return)."""
    out = []
    for row, report in scored:
        for result in report.results:
            if result.policy != "trained":
                continue
            out.append({"agent_steps": int(row["agent_steps"]), "seconds": float(row["seconds"]), "unit": result.agent,
                        "against": result.opponent, "outcomes": result.outcomes, "episodes": result.episodes,
                        "mean_return": result.mean, "mean_return_ci95": result.mean_ci95,
                        "win_rate": result.win_rate, "win_rate_ci95": list(result.win_rate_ci95)})
    return out


def plot_snapshots(run_dir: str | Path, rows: list[dict[str, Any]], title: str) -> str | None:
    """snapshots.png in the run directory: each unit's score (95% interval) at every snapshot, against agent steps
    and against seconds of acting; None without matplotlib (the `plot` extra) or rows."""
    import numpy as np

    plt = pyplot()
    if plt is None or not rows:
        return None
    signed = all(r["outcomes"] for r in rows)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (unit, against) in enumerate(sorted({(r["unit"], r["against"]) for r in rows})):
        mine = sorted((r for r in rows if (r["unit"], r["against"]) == (unit, against)), key=lambda r: r["agent_steps"])
        y, lo, hi = score_band(mine, signed)
        label = unit if against == "none" else f"{unit} vs {against}"
        for ax, key in ((axes[0], "agent_steps"), (axes[1], "seconds")):
            x = np.array([r[key] for r in mine])
            ax.plot(x, y, "o-", markersize=3, color=f"C{i}", label=label)
            ax.fill_between(x, lo, hi, color=f"C{i}", alpha=0.2)
    for ax, xlabel in ((axes[0], "agent steps"), (axes[1], "seconds of acting")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("win rate (95% CI)" if signed else "mean return (95% CI)")
        if signed:
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    out = str(Path(run_dir) / "snapshots.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
