"""pzasync's suite runs of one env beside the peers' runs of it, scored alike: a JSON table and a plot.

Runs in pzasync's environment (no peer library):

    python benchmarks/peers/side_by_side.py SUITE_DIR --peer "SB3 PPO=/tmp/pzpeers/sb3_spread_s*" \\
        --peer "AgileRL IPPO=/tmp/pzpeers/agilerl_spread_s*" --out docs/bench/side_by_side_spread_10min

SUITE_DIR is what `pzasync suite ENV --out SUITE_DIR` wrote (its suite.json; the first env, or `--env`). Each
`--peer NAME=GLOB` names a peer and its run folders (one per seed: run.json from the peer's training script,
score10.json and score50.json from score.py, as docs/benchmarks.md's peer sections give them). Per side and seed:

- **at the budget**: the score on the suite's last-point episodes: pzasync's last evaluation round
  (`--eval-episodes`, 10, on seed 9001 + seed), a peer's score10.json (made with the same episodes and seed);
- **50 episodes**: the same policies on the suite's baseline episodes (50 on seed 10007): pzasync's last
  checkpoint rescored here by `pzasync.evaluate`, a peer's score50.json.

Each column is the mean over seeds with its 95% t interval (`pzasync.bench.suite.over_seeds`). OUT.json holds the
table (and every seed's figures, agent steps and wall seconds); OUT.png draws pzasync's evaluation curves against
wall time, each peer's per-seed scores at the wall time its training stopped (the mean and interval beside
them), and the suite's random and untrained baselines.
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path
from typing import Any

import pzasync
from pzasync.bench.suite import over_seeds, score_label, seat_score


def trained_score(document: dict[str, Any], metric: str) -> float:
    """The trained policy's score in an evaluation report (`pzasync.evaluate`'s JSON): its win rate or mean
    return, averaged over the scored units (one, the team, on a cooperative env)."""
    rows = [seat_score(r, metric) for r in document["results"] if r["policy"] == "trained"]
    if not rows:
        raise ValueError(f"no trained policy's result in the report of {document.get('env')!r}")
    return sum(rows) / len(rows)


def pzasync_side(entry: dict[str, Any], episodes: int, seed: int) -> dict[str, Any]:
    """pzasync's runs of one suite env: the last point of each, and its last checkpoint on the baselines' episodes."""
    runs = []
    for run in entry["runs"]:
        rescored = pzasync.evaluate(run["run_dir"], episodes=episodes, seed=seed).to_json()
        runs.append({"seed": run["seed"], "at_budget": run["final"],
                     "episodes_50": trained_score(rescored, entry["metric"]), "agent_steps": run["agent_steps"],
                     "wall_s": run["wall_seconds"], "run_dir": Path(run["run_dir"]).name})
    return {"name": f"pzasync ({entry['recipe']['learner']})", "runs": runs}


def peer_side(name: str, pattern: str, metric: str) -> dict[str, Any]:
    """A peer's runs (folders matching `pattern`): their score10.json and score50.json, and run.json's figures."""
    runs = []
    for folder in sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_dir()):
        trained = json.loads((folder / "run.json").read_text())
        runs.append({"seed": trained["seed"],
                     "at_budget": trained_score(json.loads((folder / "score10.json").read_text()), metric),
                     "episodes_50": trained_score(json.loads((folder / "score50.json").read_text()), metric),
                     "agent_steps": trained["agent_steps"], "wall_s": trained["wall_s"], "run_dir": folder.name,
                     "peer": {k: trained.get(k) for k in ("peer", "versions", "settings", "budget_s")}})
    if not runs:
        raise SystemExit(f"--peer {name}: no run folder matches {pattern!r}")
    return {"name": name, "runs": runs}


def summarize(side: dict[str, Any]) -> dict[str, Any]:
    """Mean and 95% t interval over seeds of each column."""
    runs = side["runs"]
    side["at_budget"] = over_seeds([r["at_budget"] for r in runs])
    side["episodes_50"] = over_seeds([r["episodes_50"] for r in runs])
    side["agent_steps"] = over_seeds([float(r["agent_steps"]) for r in runs])
    return side


def interval_text(column: dict[str, Any]) -> str:
    """"-58.3 [-63.7, -53.0]": a column's mean over seeds and its 95% interval (none for one seed)."""
    ci = column["ci95"]
    return f"{column['mean']:.1f}" + ("" if ci is None else f" [{ci[0]:.1f}, {ci[1]:.1f}]")


def plot(entry: dict[str, Any], sides: list[dict[str, Any]], path: Path) -> None:
    """pzasync's curves, the peers' points at their stopping time, the baselines as bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.8))
    for i, run in enumerate(entry["runs"]):
        ax.plot([p["wall_s"] for p in run["curve"]], [p["score"] for p in run["curve"]], "-", color="C0",
                alpha=0.35 + 0.2 * i, linewidth=1, label=f"{sides[0]['name']}, seeds" if i == 0 else None)
    span = max(r["wall_s"] for side in sides for r in side["runs"])
    for k, side in enumerate(sides):
        colour = f"C{k}"
        xs = [r["wall_s"] for r in side["runs"]]
        ax.plot(xs, [r["at_budget"] for r in side["runs"]], "o", color=colour, markersize=4,
                label=None if k == 0 else f"{side['name']}, seeds")
        mean, ci = side["at_budget"]["mean"], side["at_budget"]["ci95"]
        x = max(xs) + span * 0.03 * (k + 1)  # the mean beside the seeds, each side a little further
        ax.errorbar([x], [mean], yerr=None if ci is None else [[mean - ci[0]], [ci[1] - mean]], fmt="D",
                    color=colour, capsize=4, label=f"{side['name']}: {mean:.1f} (mean, 95% over seeds)")
    for name, style in (("random", ":"), ("untrained", "--")):
        base = entry["baselines"].get(name)
        if base is not None:
            colour = "grey" if name == "random" else "black"
            ax.axhline(base["score"], color=colour, linestyle=style, label=f"{name} {base['score']:.1f}")
            ax.axhspan(*base["ci95"], color=colour, alpha=0.08)
    ax.set_xlabel("wall-clock seconds of training (2 cores)")
    ax.set_ylabel(score_label(entry))
    ax.set_title(f"{entry['short']}: the same wall budget, scored alike", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suite", type=Path, help="the folder `pzasync suite --out` wrote (suite.json)")
    parser.add_argument("--env", default=None, help="the suite env to take (default: the first)")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=GLOB", help="a peer's run folders")
    parser.add_argument("--episodes", type=int, default=50, help="episodes of the rescoring (the suite's baselines')")
    parser.add_argument("--seed", type=int, default=10007, help="seed of the rescoring (the suite's baselines')")
    parser.add_argument("--out", type=Path, required=True, help="OUT.json and OUT.png are written")
    args = parser.parse_args()
    report = json.loads((args.suite / "suite.json").read_text())
    entries = [e for e in report["envs"] if args.env in (None, e["env"], e["short"])]
    if not entries:
        raise SystemExit(f"{args.suite}/suite.json has no env {args.env!r}")
    entry = entries[0]
    sides = [summarize(pzasync_side(entry, args.episodes, args.seed))]
    for spec in args.peer:
        name, sep, pattern = spec.partition("=")
        if not sep:
            raise SystemExit(f"--peer takes NAME=GLOB, got {spec!r}")
        sides.append(summarize(peer_side(name, pattern, entry["metric"])))
    table = {"env": entry["env"], "metric": entry["metric"], "scoring": entry["scoring"],
             "budget_minutes": report["settings"]["minutes"], "machine": report["machine"],
             "baselines": entry["baselines"], "sides": sides}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(table, indent=1))
    plot(entry, sides, args.out.with_suffix(".png"))
    for side in sides:
        print(f"{side['name']:<28} at the budget {interval_text(side['at_budget']):<24} "
              f"50 episodes {interval_text(side['episodes_50']):<24} agent steps {side['agent_steps']['mean']:,.0f}  "
              f"seeds {[r['seed'] for r in side['runs']]}")


if __name__ == "__main__":
    main()
