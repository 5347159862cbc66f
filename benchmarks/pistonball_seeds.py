"""Pistonball's recipe over seeds against Butterfly-Baselines' published curve (issue 56, item 1): every run's
greedy evaluation rounds and final evaluation per piston at their agent steps, the first agent steps where greedy
play reaches the bar (90 per piston), whether each seed did so by 400k agent steps, and the sampled training
return per two minutes; the reference curve is read from docs/bench/butterfly_baselines_pistonball_v4.json. The
plot (the report's name with .png) draws each seed's greedy curve per piston beside the reference.

    for S in 0 1 2; do pzasync train pettingzoo.butterfly.pistonball_v6 --minutes 17 --seed $S --no-progress \\
        --eval-every 180 --out OUT/s$S; done
    for S in 0 1 2; do python benchmarks/pistonball_blind.py --run OUT/s$S/*/ --episodes 1 --json OUT/sight$S.json; done
    python benchmarks/pistonball_seeds.py docs/bench/pistonball_recipe_seeds.json OUT/s*/*/ --sight OUT/sight*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from long_runs import as_given

from pzasync.runtime.rundir import RunDirectory

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "bench" / "butterfly_baselines_pistonball_v4.json"
#: Issue 56's bar: greedy mean return per piston, reached by BY_AGENT_STEPS.
BAR_PER_PISTON, BY_AGENT_STEPS = 90.0, 400_000
#: What makes the runs and the report (the docstring's commands, for the results page).
COMMANDS = ["for S in 0 1 2; do pzasync train pettingzoo.butterfly.pistonball_v6 --minutes 17 --seed $S --no-progress "
            "--eval-every 180 --out OUT/s$S; done",
            "for S in 0 1 2; do python benchmarks/pistonball_blind.py --run OUT/s$S/*/ --episodes 1 "
            "--json OUT/sight$S.json; done",
            "python benchmarks/pistonball_seeds.py {report} OUT/s*/*/"]
#: The windows the sampled training returns are averaged over.
WINDOW_S = 120.0


def scored(mean: float, ci95: float, pistons: int) -> dict[str, float]:
    """A team return with its 95% half-width, and the same per piston."""
    return {"team_return": mean, "ci95": ci95, "per_piston": mean / pistons}


def greedy_points(rounds: list[dict[str, Any]], final: list[dict[str, Any]], result: dict[str, Any],
                  pistons: int) -> list[dict[str, Any]]:
    """The evaluator's rounds while training, then the final evaluation's trained row when the run has one."""
    points = [{"source": f"round {r['round']}", "wall_s": r["wall_s"], "agent_steps": r["agent_steps"],
               "episodes": r["episodes"], **scored(r["mean_return"], r["mean_return_ci95"], pistons)}
              for r in rounds]
    points += [{"source": "final evaluation", "wall_s": result["wall_seconds"], "agent_steps": result["agent_steps"],
                "episodes": row["episodes"], **scored(row["mean_return"], row["mean_return_ci95"], pistons)}
               for row in final if row["policy"] == "trained"]
    return points


def sampled_windows(run_dir: Path) -> list[dict[str, Any]]:
    """Mean team return of the training episodes (sampled actions) per WINDOW_S of wall time; the episodes the
    run's stop cut short are left out."""
    windows: dict[int, list[float]] = {}
    for episode in RunDirectory(run_dir, create=False).read_jsonl("episodes.jsonl"):
        if episode.get("cut_by_actor"):
            continue
        windows.setdefault(int(episode["wall_s"] // WINDOW_S), []).append(sum(episode["returns"].values()))
    return [{"minutes": [k * WINDOW_S / 60, (k + 1) * WINDOW_S / 60], "episodes": len(v),
             "team_return": sum(v) / len(v)} for k, v in sorted(windows.items())]


def run_report(run_dir: Path) -> dict[str, Any]:
    """One run's figures; a run stopped before its final evaluation has only the evaluator's rounds."""
    files = RunDirectory(run_dir, create=False)
    run, result, rounds = files.read_json("run.json"), files.read_json("result.json"), files.evaluation_rows()
    final = files.read_json("final_evaluation.json")["results"] if (run_dir / "final_evaluation.json").exists() else []
    pistons = len(result["agents"])
    learner = next(iter(run["learners"].values()))
    points = greedy_points(rounds, final, result, pistons)
    reached = [p["agent_steps"] for p in points if p["per_piston"] >= BAR_PER_PISTON]
    return {"run_dir": str(run_dir), "seed": run["config"]["seed"], "learner": learner["name"],
            "learner_options": learner["options"], "env_wrappers": run["env_wrappers"], "pistons": pistons,
            "agent_steps": result["agent_steps"], "wall_seconds": result["wall_seconds"],
            "greedy": points,
            "baselines": {row["policy"]: scored(row["mean_return"], row["mean_return_ci95"], pistons)
                          for row in final if row["policy"] != "trained"},
            "bar_first_reached_at_agent_steps": min(reached) if reached else None,
            "bar_by_400k": any(s <= BY_AGENT_STEPS for s in reached),
            "training_return_sampled": sampled_windows(run_dir)}


def sight_figures(sight: dict[str, Any]) -> dict[str, Any]:
    """A sight check's figures for one piston (every piston shares the policy): how its mean action and encoder
    features spread over the states of its episodes, and its encoder's dead units."""
    piston = next(iter(sight["sensitivity"].values()))
    keep = ("states", "mean_action_std", "mean_action_min", "mean_action_max", "features_std_over_states",
            "encoder_dead_units")
    return {"episodes_seed": sight["seed"], **{k: piston[k] for k in keep if k in piston}}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in report["runs"]:
        points = run["greedy"]
        ax.errorbar([p["agent_steps"] for p in points], [p["per_piston"] for p in points],
                    [p["ci95"] / run["pistons"] for p in points], marker="o", capsize=3,
                    label=f"pzasync {report['label']}, seed {run['seed']} (greedy)")
    reference = report["reference"]
    ax.plot([p["agent_steps"] for p in reference["points"]], [p["per_piston"] for p in reference["points"]],
            "k--s", label=reference["label"])
    ax.fill_between([p["agent_steps"] for p in reference["points"]], [p["runs_min"] for p in reference["points"]],
                    [p["runs_max"] for p in reference["points"]], color="grey", alpha=0.15,
                    label="Butterfly-Baselines: lowest to highest run")
    ax.axhline(BAR_PER_PISTON, color="grey", linestyle=":", label=f"bar: {BAR_PER_PISTON:g} per piston")
    ax.axvline(BY_AGENT_STEPS, color="grey", linestyle="-.", linewidth=0.8)
    ax.set_xlim(0, max(BY_AGENT_STEPS * 1.15, max(r["agent_steps"] for r in report["runs"]) * 1.05))
    ax.set_xlabel("agent steps")
    ax.set_ylabel("mean return per piston")
    ax.set_title(f"pistonball_v6: pzasync, {report['label']} vs Butterfly-Baselines (v4)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def commands(report: Path, label: str, train_command: str, sight: bool) -> list[str]:
    """The commands that make the runs and this report (a variant's: its train command, its label)."""
    last = COMMANDS[2].format(report=as_given(report)) + (" --sight OUT/sight*.json" if sight else "")
    if train_command:
        last += f" --label '{label}' --train-command CMD"
    return [train_command or COMMANDS[0], *([COMMANDS[1]] if sight else []), last]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="the JSON report; its plot beside it (.png)")
    parser.add_argument("runs", type=Path, nargs="+", help="run directories of `pzasync train pistonball_v6`")
    parser.add_argument("--note", default="", help="how the runs were made, kept in the report")
    parser.add_argument("--label", default="recipe", help="what the runs are, in the plot: the recipe or a variant")
    parser.add_argument("--train-command", default="", help="the command that trained a variant's runs")
    parser.add_argument("--sight", type=Path, nargs="*", default=[],
                        help="sight checks of the runs (`pistonball_blind.py --run RUN --json FILE`), kept with each")
    args = parser.parse_args()
    runs = sorted((run_report(run) for run in args.runs), key=lambda r: r["seed"])
    sights = [json.loads(path.read_text()) for path in args.sight]
    for run in runs:
        here = Path(run["run_dir"]).resolve()
        run["sight"] = next((sight_figures(s) for s in sights if Path(s["run"]).resolve() == here), None)
    # the anchor's per-run curves stay in its own file; a variant's report keeps its summary points
    reference = {key: value for key, value in json.loads(REFERENCE.read_text()).items() if key != "runs"}
    report = {"what": __doc__.split("\n\n")[0].replace("\n", " "), "note": args.note, "label": args.label,
              "command": commands(args.report, args.label, args.train_command, bool(args.sight)),
              "bar": {"per_piston": BAR_PER_PISTON, "by_agent_steps": BY_AGENT_STEPS},
              "seeds_reaching_bar_by_400k": sum(r["bar_by_400k"] for r in runs), "seeds": len(runs),
              "reference": reference, "runs": runs}
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    plot(report, args.report.with_suffix(".png"))
    for run in runs:
        best = max(run["greedy"], key=lambda p: p["per_piston"])
        print(f"seed {run['seed']}: bar first at {run['bar_first_reached_at_agent_steps']} agent steps; best greedy "
              f"{best['per_piston']:.1f} per piston at {best['agent_steps']} ({best['source']})")


if __name__ == "__main__":
    main()
