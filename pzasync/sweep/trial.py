"""One trial of a sweep: `pzasync train ENV --config TRIAL/config.toml` at the sweep's budget, in a process of its
own (`run_trial`, the job's body), scored by the evaluator's figure; and what its evaluation rounds say while it
runs (`rounds`), which the sweep feeds to its pruner.

A trial's folder holds `config.toml` (the trial's options: fixed and sampled, every one resolved, the file that
`pzasync train --config` reads), `trial.log` (what the run said) and its run directory (metrics.jsonl with the
evaluator's rows, checkpoints, plots).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from pzasync.bench.suite import curve_of
from pzasync.errors import PzasyncError
from pzasync.training.trainer import FINAL_SEED_OFFSET

CONFIG, LOG = "config.toml", "trial.log"


def metric_of(metric: str, outcomes: bool) -> str:
    """The figure a unit is scored by: `metric`, or for "score" its win rate where results are game outcomes
    (1/0/-1), else its mean return (the evaluator's figure, as `pzasync suite` scores)."""
    if metric != "score":
        return metric
    return "win_rate" if outcomes else "mean_return"


def run_dir_of(trial_dir: str | Path) -> Path | None:
    """A trial's run directory (under its folder), once the run has made it."""
    found = sorted(p.parent for p in Path(trial_dir).glob("*/run.json"))
    return found[-1] if found else None


def rounds(trial_dir: str | Path, metric: str, finished: bool = False) -> list[dict[str, Any]]:
    """The evaluator's complete rounds so far (metrics.jsonl, "kind": "eval"): each with its index, wall seconds,
    agent steps and score (the mean over the scored units). A round's rows are written one by one, so while the
    run goes on a round counts once a later one has begun or it has as many rows as the first complete round;
    once it has `finished`, every round written counts."""
    run_dir = run_dir_of(trial_dir)
    if run_dir is None or not (run_dir / "metrics.jsonl").exists():
        return []
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        if '"kind": "eval"' not in line:
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:  # the line being written
            continue
    if not rows:
        return []
    last = max(r["round"] for r in rows)
    per_round = {r["round"]: 0 for r in rows}
    for r in rows:
        per_round[r["round"]] += 1
    units = per_round[min(per_round)] if last > min(per_round) else None
    complete = [r for r in rows if finished or r["round"] < last or (units is not None and per_round[last] == units)]
    name = metric_of(metric, all(r.get("outcomes", False) for r in rows))
    return [{"round": p["round"], "wall_s": p["wall_s"], "agent_steps": p["agent_steps"], "score": p["score"]}
            for p in curve_of(complete, name)]


def run_trial(trial_dir: str, env: str, minutes: float | None, steps: int | None, final_episodes: int,
              metric: str) -> dict[str, Any]:
    """The body of a trial's process: train from the trial's config.toml (read as `pzasync train --config` reads
    it), then score the last checkpoint in the evaluator's way (its yardstick and scoring, trained policies only)
    for `final_episodes` games per scored unit. Its output goes to trial.log. KeyboardInterrupt where the run was
    stopped by a signal (the sweep's pruner, or Ctrl-C)."""
    from pzasync.evaluation.report import evaluate
    from pzasync.training import Trainer
    from pzasync.training.learner_file import read_config

    folder = Path(trial_dir)
    log = os.open(folder / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)  # the run's own processes (learner hosts, evaluator) write here too
    os.dup2(log, 2)
    os.close(log)
    options, learners = read_config(folder / CONFIG)

    def say(note: str) -> None:
        sys.stderr.write(note + "\n")

    trainer = Trainer(env, minutes=minutes, steps=steps, final_episodes=0, file_options=options,
                      file_learners=learners, say=say)
    trainer.build()
    for line in trainer.describe():
        say(line)
    result = trainer.train()
    if trainer.runner.stop_signal is not None:
        raise KeyboardInterrupt
    if result.run_dir is None:
        raise PzasyncError("a trial's run has a run directory (out_dir is set)")
    report = evaluate(result.run_dir, env=trainer.runner.plan.env_spec, vs=trainer.choices.yardstick,
                      episodes=final_episodes, seed=trainer.config.seed + FINAL_SEED_OFFSET,
                      scoring=trainer.config.eval_scoring, baselines=False)
    trained = [r for r in report.results if r.policy == "trained"]
    name = metric_of(metric, all(r.outcomes for r in trained))
    units = {r.agent: float(r.win_rate if name == "win_rate" else r.mean) for r in trained}
    return {"run_dir": str(result.run_dir), "agent_steps": result.agent_steps, "wall_seconds": result.wall_seconds,
            "stopped_because": result.stopped_because, "yardstick": trainer.choices.yardstick,
            "scoring": report.scoring, "metric": name, "episodes": final_episodes, "units": units,
            "score": statistics.fmean(units.values()) if units else None}
