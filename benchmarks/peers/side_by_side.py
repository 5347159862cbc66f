"""pzasync's suite runs of one env beside the peers' runs of it, scored alike: a JSON table and a plot.

Runs in pzasync's environment (no peer library):

    python benchmarks/peers/side_by_side.py SUITE_DIR --peer "SB3 PPO=/tmp/pzpeers/sb3_spread_s*" \\
        --peer "AgileRL IPPO=/tmp/pzpeers/agilerl_spread_s*" --out docs/bench/side_by_side_spread_10min

SUITE_DIR is what `pzasync suite ENV --out SUITE_DIR` wrote (its suite.json; the first env, or `--env`). Each
`--peer NAME=GLOB` names a peer and its run folders (one per seed: run.json from the peer's training script,
score10.json and score50.json from score.py, as docs/benchmarks.md's peer sections give them). Per side and seed:

- **at the budget**: the score on the suite's last-point episodes: pzasync's last evaluation round
  (`--eval-episodes`, 10, on seed 9001 + seed), a peer's score10.json (made with the same episodes and seed);
- **50 episodes**: the same policies on the suite's baseline episodes (`--baseline-episodes`, 50, on seed 10007):
  pzasync's last checkpoint rescored here by `pzasync.evaluate`, a peer's score50.json. The files and the JSON
  key `episodes_50` keep the default's name where a row plays fewer (pursuit: 20); OUT.json's `baseline_episodes`
  and `budget_episodes` say how many were played.

Both columns play every seat not scored against the suite's yardstick (one_ply on connect_four).

`--acting sampled` scores every side's policies sampling their own distributions (`pzasync.evaluate(...,
acting="sampled")`): pzasync's last checkpoints rescored on both columns' episodes, a peer's
score10_sampled.json and score50_sampled.json (score.py --acting sampled), the untrained baseline sampled too.
For Gaussian policies on Box actions, whose clipped samples are what they do in training and whose mean may not be.

Each column is the mean over seeds with its 95% t interval (`pzasync.bench.suite.over_seeds`). OUT.json holds the
table (and every seed's figures, agent steps and wall seconds); OUT.png draws pzasync's evaluation curves against
wall time (greedy scoring only: the curves are the evaluator's greedy rounds), each side's per-seed scores at the
wall time its training stopped (the mean and interval beside them), and the random and untrained baselines.
"""

from __future__ import annotations

import argparse
import glob
import json
import textwrap
from pathlib import Path
from typing import Any

import pzasync
from pzasync.bench.suite import baseline_json, over_seeds, score_bounds, score_label, seat_score
from pzasync.evaluation.episodes import ACTING_MODES
from pzasync.runners import EVAL_SEED_OFFSET


def trained_score(document: dict[str, Any], metric: str) -> float:
    """The trained policy's score in an evaluation report (`pzasync.evaluate`'s JSON): its win rate or mean
    return against the report's yardstick, averaged over the scored units (one, the team, on a cooperative env).
    A seat's baseline row against random play (`--baselines` beside another yardstick) is not its score."""
    rows = [seat_score(r, metric) for r in document["results"]
            if r["policy"] == "trained" and r.get("against") in (document.get("vs"), "none")]
    if not rows:
        raise ValueError(f"no trained policy's result in the report of {document.get('env')!r}")
    return sum(rows) / len(rows)


def pzasync_side(entry: dict[str, Any], episodes: int, seed: int, acting: str = "greedy",
                 budget_episodes: int = 10) -> dict[str, Any]:
    """pzasync's runs of one suite env: the last point of each (greedy: the suite's final round; sampled: the last
    checkpoint rescored on the same `budget_episodes` episodes), and its last checkpoint on the baselines'
    episodes."""
    runs = []
    for run in entry["runs"]:
        def score(episodes: int, seed: int, run: dict[str, Any] = run) -> float:
            return trained_score(pzasync.evaluate(run["run_dir"], vs=entry["yardstick"], episodes=episodes, seed=seed,
                                                  baselines=False, acting=acting).to_json(), entry["metric"])
        at_budget = run["final"] if acting == "greedy" else score(budget_episodes, EVAL_SEED_OFFSET + run["seed"])
        runs.append({"seed": run["seed"], "at_budget": at_budget, "episodes_50": score(episodes, seed),
                     "agent_steps": run["agent_steps"], "wall_s": run["wall_seconds"],
                     "run_dir": Path(run["run_dir"]).name})
    return {"name": f"pzasync ({entry['recipe']['learner']})", "runs": runs}


def sampled_untrained(entry: dict[str, Any], episodes: int, seed: int) -> dict[str, Any]:
    """The untrained baseline with sampled actions: fresh networks of the first run's learners, on the baselines'
    episodes (the suite's own baseline is greedy)."""
    report = pzasync.evaluate(entry["runs"][0]["run_dir"], vs=entry["yardstick"], episodes=episodes, seed=seed,
                              acting="sampled")
    return baseline_json([r for r in report.results if r.policy == "untrained"], entry["metric"])


def peer_side(name: str, pattern: str, metric: str, acting: str = "greedy") -> dict[str, Any]:
    """A peer's runs (folders matching `pattern`): their score10.json and score50.json (score10_sampled.json and
    score50_sampled.json with `acting` "sampled"), and run.json's figures."""
    suffix = "" if acting == "greedy" else f"_{acting}"
    runs = []
    for folder in sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_dir()):
        trained = json.loads((folder / "run.json").read_text())
        runs.append({"seed": trained["seed"],
                     "at_budget": trained_score(json.loads((folder / f"score10{suffix}.json").read_text()), metric),
                     "episodes_50": trained_score(json.loads((folder / f"score50{suffix}.json").read_text()), metric),
                     "agent_steps": trained["agent_steps"], "wall_s": trained["wall_s"], "run_dir": folder.name,
                     "peer": {k: trained.get(k) for k in ("peer", "versions", "settings", "budget_s")}})
    if not runs:
        raise SystemExit(f"--peer {name}: no run folder matches {pattern!r}")
    return {"name": name, "runs": runs}


def summarize(side: dict[str, Any], metric: str = "mean_return") -> dict[str, Any]:
    """Mean and 95% t interval over seeds of each column (a win rate's cut to [0, 1])."""
    runs = side["runs"]
    side["at_budget"] = over_seeds([r["at_budget"] for r in runs], score_bounds(metric))
    side["episodes_50"] = over_seeds([r["episodes_50"] for r in runs], score_bounds(metric))
    side["agent_steps"] = over_seeds([float(r["agent_steps"]) for r in runs])
    return side


def interval_text(column: dict[str, Any]) -> str:
    """"-58.3 [-63.7, -53.0]": a column's mean over seeds and its 95% interval (none for one seed)."""
    ci = column["ci95"]
    return f"{column['mean']:.1f}" + ("" if ci is None else f" [{ci[0]:.1f}, {ci[1]:.1f}]")


def plot(entry: dict[str, Any], sides: list[dict[str, Any]], base: dict[str, Any], path: Path,
         acting: str = "greedy") -> None:
    """pzasync's curves (greedy only), every side's points at its stopping time, the baselines as bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.8))
    for i, run in enumerate(entry["runs"] if acting == "greedy" else []):
        ax.plot([p["wall_s"] for p in run["curve"]], [p["score"] for p in run["curve"]], "-", color="C0",
                alpha=min(0.95, 0.35 + 0.2 * i), linewidth=1, label=f"{sides[0]['name']}, seeds" if i == 0 else None)
    span = max(r["wall_s"] for side in sides for r in side["runs"])
    for k, side in enumerate(sides):
        colour = f"C{k}"
        xs = [r["wall_s"] for r in side["runs"]]
        ax.plot(xs, [r["at_budget"] for r in side["runs"]], "o", color=colour, markersize=4,
                label=None if k == 0 and acting == "greedy" else f"{side['name']}, seeds")
        mean, ci = side["at_budget"]["mean"], side["at_budget"]["ci95"]
        x = max(xs) + span * 0.03 * (k + 1)  # the mean beside the seeds, each side a little further
        ax.errorbar([x], [mean], yerr=None if ci is None else [[mean - ci[0]], [ci[1] - mean]], fmt="D",
                    color=colour, capsize=4, label=f"{side['name']}: {mean:.1f} (mean, 95% over seeds)")
    for name, style in (("random", ":"), ("untrained", "--")):
        base_line = base.get(name)
        if base_line is not None:
            colour = "grey" if name == "random" else "black"
            ax.axhline(base_line["score"], color=colour, linestyle=style, label=f"{name} {base_line['score']:.1f}")
            ax.axhspan(*base_line["ci95"], color=colour, alpha=0.08)
    ax.set_xlabel("wall-clock seconds of training (2 cores)")
    ax.set_ylabel(score_label(entry))
    ax.set_title(f"{entry['short']}: the same wall budget, scored alike ({acting} actions)", fontsize="medium")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()  # a recipe's learner spec is long: wrap, not cut
    ax.legend(handles, [textwrap.fill(label, 48) for label in labels], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suite", type=Path, help="the folder `pzasync suite --out` wrote (suite.json)")
    parser.add_argument("--env", default=None, help="the suite env to take (default: the first)")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=GLOB", help="a peer's run folders")
    parser.add_argument("--episodes", type=int, default=None,
                        help="episodes of the rescoring [default: the suite's baseline episodes]")
    parser.add_argument("--seed", type=int, default=10007, help="seed of the rescoring (the suite's baselines')")
    parser.add_argument("--acting", choices=ACTING_MODES, default="greedy",
                        help="how every side's policies act when scored (module docstring)")
    parser.add_argument("--out", type=Path, required=True, help="OUT.json and OUT.png are written")
    args = parser.parse_args()
    report = json.loads((args.suite / "suite.json").read_text())
    entries = [e for e in report["envs"] if args.env in (None, e["env"], e["short"])]
    if not entries:
        raise SystemExit(f"{args.suite}/suite.json has no env {args.env!r}")
    entry = entries[0]
    episodes = args.episodes or report["settings"]["baseline_episodes"]
    sides = [summarize(pzasync_side(entry, episodes, args.seed, args.acting,
                                    report["settings"]["eval_episodes"]), entry["metric"])]
    for spec in args.peer:
        name, sep, pattern = spec.partition("=")
        if not sep:
            raise SystemExit(f"--peer takes NAME=GLOB, got {spec!r}")
        sides.append(summarize(peer_side(name, pattern, entry["metric"], args.acting), entry["metric"]))
    base = dict(entry["baselines"])
    if args.acting == "sampled":
        base["untrained"] = sampled_untrained(entry, episodes, args.seed)
    table = {"env": entry["env"], "metric": entry["metric"], "scoring": entry["scoring"],
             "budget_minutes": report["settings"]["minutes"], "machine": report["machine"],
             "acting": args.acting, "budget_episodes": report["settings"]["eval_episodes"],
             "baseline_episodes": episodes, "baselines": base, "sides": sides}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(table, indent=1))
    plot(entry, sides, base, args.out.with_suffix(".png"), args.acting)
    for side in sides:
        print(f"{side['name']:<28} at the budget {interval_text(side['at_budget']):<24} "
              f"{episodes} episodes {interval_text(side['episodes_50']):<24} "
              f"agent steps {side['agent_steps']['mean']:,.0f}  seeds {[r['seed'] for r in side['runs']]}")


if __name__ == "__main__":
    main()
