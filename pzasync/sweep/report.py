"""What a sweep writes to its folder: sweep.json (every trial: params, state, score, evaluation rounds), sweep.png
(score per trial and the best so far) and best.toml (the best trial's options, the file `pzasync train --config`
reads); and the rows of its table of trials."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

#: sweep.json's format (docs/sweeps.md, "sweep.json").
SCHEMA = "pzasync-sweep/1"
JSON, PLOT, BEST = "sweep.json", "sweep.png", "best.toml"


def to_json(report: Any) -> dict[str, Any]:
    """The report as sweep.json holds it."""
    from importlib.metadata import version

    from pzasync.bench.harness import jsonable, machine_info

    file, best = report.file, report.best
    minutes, steps = file.settings.budget()
    return {
        "schema": SCHEMA, "pzasync_version": version("pzasync"), "started": report.started,
        "seconds": round(report.seconds, 3), "file": file.path, "env": file.settings.env,
        "settings": asdict(file.settings), "budget": {"minutes": minutes, "steps": steps},
        "space": [{"key": p.key, "distribution": p.distribution, "values": list(p.values)} for p in file.space],
        "fixed": {"options": jsonable(file.options), "learners": jsonable(file.learners)},
        "parallel": report.parallel, "cores_per_trial": report.cores_per_trial, "machine": machine_info(),
        "interrupted": report.interrupted, "notes": list(file.notes),
        "trials": [{"number": t.number, "state": t.state, "params": t.params, "score": t.score, "rounds": t.rounds,
                    "seconds": t.seconds, "folder": t.folder, "run_dir": t.run_dir, "final": t.final,
                    "error": t.error, "baseline": t.baseline} for t in report.trials],
        "baseline": None if report.baseline is None else {"number": report.baseline.number,
                                                          "state": report.baseline.state,
                                                          "score": report.baseline.score},
        "baseline_skipped": report.baseline_skipped or None,
        "best": None if best is None else {"number": best.number, "score": best.score, "params": best.params,
                                           "config": str(Path(report.out) / BEST)},
    }


def write_json(report: Any) -> str:
    """OUT/sweep.json, replaced atomically (rewritten as each trial ends, so a killed sweep keeps the trials
    that ended)."""
    out = Path(report.out)
    path, tmp = out / JSON, out / f".{JSON}.tmp"
    tmp.write_text(json.dumps(to_json(report), indent=1, default=str))
    os.replace(tmp, path)
    return str(path)


def best_toml(report: Any) -> str | None:
    """The best trial's options as a `pzasync train --config` file (every run and learner option resolved, as
    `--print-config` writes them; run directories under runs/); None without a complete trial."""
    best = report.best
    if best is None:
        return None
    file, settings = report.file, report.file.settings
    minutes, steps = settings.budget()
    budget = " ".join(([f"--minutes {minutes:g}"] if minutes is not None else [])
                      + ([f"--steps {steps}"] if steps is not None else []))
    trainer = file.trainer(best.params, "runs")
    header = (f"pzasync sweep {file.path}: the best of {len(report.trials)} trials ({settings.direction} "
              f"{settings.metric}) is trial {best.number}, {settings.metric} {best.score:.4g} (trained with "
              f"{budget}), with:\n"
              + "\n".join(f"  {key} = {value!r}" for key, value in best.params.items())
              + f"\nTrain with it: pzasync train {settings.env} --config best.toml {budget}\n"
              "TOML has no null: \"none\" stands for None.")
    return trainer.to_toml(header, {"progress": "on in a terminal"})


def plot(report: Any, path: str) -> str | None:
    """sweep.png: each trial's score (complete trials; a pruned trial at its last evaluation round's score) and the
    best so far; None without matplotlib."""
    from pzasync.runtime.rundir import pyplot

    plt = pyplot()
    if plt is None:
        return None
    settings = report.settings
    fig, ax = plt.subplots(figsize=(8, 4.5))
    done = [t for t in report.trials if t.state == "complete"]
    pruned = [t for t in report.trials if t.state == "pruned" and t.rounds]
    ax.plot([t.number for t in done], [t.score for t in done], "o", color="C0", label="complete (final evaluation)")
    ax.plot([t.number for t in pruned], [t.last_round_score for t in pruned], "x", color="C3",
            label="pruned (last evaluation round)")
    best: list[tuple[int, float]] = []
    sign = 1.0 if settings.direction == "maximize" else -1.0
    for t in sorted(done, key=lambda t: t.number):
        if not best or sign * t.score > sign * best[-1][1]:
            best.append((t.number, t.score))
        else:
            best.append((t.number, best[-1][1]))
    if best:
        ax.step([n for n, _ in best], [s for _, s in best], where="post", color="C0", alpha=0.6, label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(settings.metric)
    ax.set_title(f"sweep of {settings.env.rsplit('.', 1)[-1]}: {len(report.trials)} trials, {report.parallel} at a "
                 f"time", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_all(report: Any) -> dict[str, str | None]:
    """sweep.json, best.toml (where a trial completed) and sweep.png (with matplotlib): their paths."""
    out = Path(report.out)
    text = best_toml(report)
    best = None
    if text is not None:
        (out / BEST).write_text(text)
        best = str(out / BEST)
    return {"json": write_json(report), "best": best, "plot": plot(report, str(out / PLOT))}


def table_rows(report: Any) -> tuple[list[str], list[list[str]]]:
    """The table of trials: number, state, the final score, the latest evaluation round's score, its time, and the
    searched options as `name=value` pairs (one cell, wrapped between pairs, so that the table fits 80 columns
    without cutting a value); the best trial's number marked with '*', the baseline's with '(base)'."""
    keys = [p.key for p in report.file.space]
    names = short_names(keys)
    best = report.best
    rows = []
    for t in report.trials:
        mark = ("*" if best is not None and t.number == best.number else "") + (" (base)" if t.baseline else "")
        rows.append([f"{t.number}{mark}", t.state, "-" if t.score is None else f"{t.score:.4g}",
                     "-" if t.last_round_score is None else f"{t.last_round_score:.4g} (r{t.rounds[-1]['round']})",
                     "-" if t.seconds is None else f"{t.seconds:.0f} s",
                     "  ".join(f"{name}={_value(t.params.get(key))}" for name, key in zip(names, keys))])
    return ["trial", "state", report.settings.metric, "last round", "time", "options"], rows


def short_names(keys: list[str]) -> list[str]:
    """Searched options by their option name (`learners.dqn.lr` -> `lr`), the whole key where two keys share one."""
    names = [key.rsplit(".", 1)[-1] for key in keys]
    return [name if names.count(name) == 1 else key for name, key in zip(names, keys)]


def _value(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else "-" if value is None else str(value)
