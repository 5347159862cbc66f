"""Butterfly-Baselines' pistonball curve (issue 56's anchor) from its raw evaluations: docs/bench/
butterfly_baselines_pistonball_v4.json, the reference benchmarks/pistonball_seeds.py draws and the results page
compares the recipe's seeds with.

    git clone https://github.com/jkterry1/Butterfly-Baselines BB   # 1439dc0
    python benchmarks/butterfly_baselines.py BB docs/bench/butterfly_baselines_pistonball_v4.json

Each of its 10 runs (data/pistonball_v4/run_K/evaluations.npz) is SB3's EvalCallback output: `timesteps` counts
every piston's step (SuperSuit's vec env makes each piston a sub-env), `results` holds 5 evaluation episodes a point,
each the return per piston, played deterministically (EvalCallback's default: the Gaussian's mean, our "greedy").
Written: the mean, lowest and highest run at each point, and every run's own curve, where it first reaches the
bar, and how many of its points from `steady_from` agent steps on are at the bar or more (what the results page's
variants table counts for our seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

CONFIG = {"gamma": 0.98, "learning_rate": 0.000597417, "n_epochs": 10, "clip_range": 0.1, "gae_lambda": 0.8,
          "ent_coef": 0.0993558, "vf_coef": 0.967044, "max_grad_norm": 0.9, "n_steps": 256, "batch_size": 256,
          "net_arch": "small", "activation_fn": "relu", "frames": "grey 96x96, 4 stacked"}


def run_curve(path: Path) -> list[dict[str, float]]:
    """One run's points: agent steps and the mean return per piston over the point's evaluation episodes."""
    data = np.load(path)
    return [{"agent_steps": int(t), "per_piston": round(float(r.mean()), 2)}
            for t, r in zip(data["timesteps"], data["results"])]


def reference(repo: Path, bar: float, by_agent_steps: int, steady_from: int) -> dict[str, Any]:
    """The reference report from a checkout's 10 runs: the mean, lowest and highest run at each point, and each
    run's curve with where it first reaches `bar` and how many of its points from `steady_from` on are at it."""
    runs = [run_curve(path) for path in sorted((repo / "data" / "pistonball_v4").glob("run_*/evaluations.npz"),
                                               key=lambda p: int(p.parent.name.split("_")[1]))]
    if not runs:
        raise SystemExit(f"{repo}: no data/pistonball_v4/run_*/evaluations.npz (a Butterfly-Baselines checkout?)")
    steps = [p["agent_steps"] for p in runs[0]]
    points = []
    for i, at in enumerate(steps):
        values = [run[i]["per_piston"] for run in runs]
        points.append({"agent_steps": at, "per_piston": round(statistics.fmean(values), 2),
                       "runs_min": min(values), "runs_max": max(values)})
    per_run = []
    for k, run in enumerate(runs):
        first = next((p["agent_steps"] for p in run if p["per_piston"] >= bar), None)
        steady = [p["per_piston"] for p in run if p["agent_steps"] >= steady_from]
        per_run.append({"run": k, "bar_first_reached_at_agent_steps": first,
                        "bar_by_agent_steps": first is not None and first <= by_agent_steps,
                        "steady_points": len(steady), "steady_points_at_bar": sum(v >= bar for v in steady),
                        "steady_lowest": min(steady), "curve": run})
    return {"label": f"Butterfly-Baselines, pistonball_v4, SB3 PPO (mean of {len(runs)} runs)",
            "source": "github.com/jkterry1/Butterfly-Baselines at 1439dc0: data/pistonball_v4/run_0..run_9/"
                      "evaluations.npz (SB3 EvalCallback: 'timesteps' counts every piston's step, as SuperSuit's "
                      "vec env makes each piston one sub-env; 'results' 5 evaluation episodes a point, the return "
                      "per piston, deterministic); config/pistonball_v4.json",
            "command": "python benchmarks/butterfly_baselines.py BB docs/bench/butterfly_baselines_pistonball_v4.json "
                       "(BB: a clone of github.com/jkterry1/Butterfly-Baselines)",
            "config": CONFIG,
            "per_point": f"mean over the {len(runs)} runs of each run's mean over its 5 evaluation episodes; "
                         "runs_min and runs_max the lowest and highest run",
            "bar": {"per_piston": bar, "by_agent_steps": by_agent_steps, "steady_from": steady_from},
            "runs_reaching_bar": sum(r["bar_by_agent_steps"] for r in per_run),
            "points": points, "runs": per_run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", type=Path, help="a checkout of jkterry1/Butterfly-Baselines")
    parser.add_argument("out", type=Path)
    parser.add_argument("--bar", type=float, default=90.0, help="issue 56's bar, return per piston")
    parser.add_argument("--by", type=int, default=400_000, help="agent steps by which a run should reach the bar")
    parser.add_argument("--steady-from", type=int, default=150_000,
                        help="agent steps from which points count as learned (the results page's STEADY_FROM)")
    args = parser.parse_args()
    data = reference(args.repo, args.bar, args.by, args.steady_from)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {data['runs_reaching_bar']} of {len(data['runs'])} runs at {args.bar:g} by {args.by:,}; "
          f"steady points at the bar: {sum(r['steady_points_at_bar'] for r in data['runs'])} of "
          f"{sum(r['steady_points'] for r in data['runs'])}")


if __name__ == "__main__":
    main()
