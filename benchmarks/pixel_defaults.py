"""Defaults that learn on pixel envs without a recipe (issue 56, item 2): a bare `pzasync train ENV --minutes 10`
per env configuration and seed, each alone on the machine, then each run's final evaluation (the run's own,
trained beside its untrained network and random play, the same episodes) and its evaluation curve, gathered into
one report (docs/bench/pixel_defaults_10min.json) and one plot.

    python benchmarks/pixel_defaults.py OUT docs/bench/pixel_defaults_10min.json --seeds 0,1,2
    python benchmarks/pixel_defaults.py OUT docs/bench/pixel_defaults_10min.json --collect-only   # runs in OUT
    python benchmarks/pixel_defaults.py OUT docs/bench/kaz_vector_at_image_steps.json --configs kaz_vector \
        --steps 138000 --final-episodes 50 --seeds 0,1,2   # the yardstick: vector observations, as many samples

A configuration passes where the trained team's 95% interval lies above both baselines' intervals. With
--sampled, each run's trained and untrained policies are also scored drawing their actions from their own
distributions (`pzasync eval RUN --acting sampled --baselines`, the final evaluation's episodes and seed), for a
policy whose most likely action is one constant while its distribution has learned (`passes_sampled`). The yardstick
configuration (`kaz_vector`, not run unless named) trains knights_archers_zombies on its vector observations for
as many agent steps as its image configuration takes in 10 minutes: whether that many samples could be enough.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pzasync.runtime.rundir import RunDirectory
from pzasync.training.trainer import FINAL_SEED_OFFSET  # the final evaluation's episode seed: run seed + this

#: The configurations: (key, env id, env arguments). Neither has a recipe for what it shows: cooperative_pong
#: has none at all, knights_archers_zombies' recipe was measured on its vector observations.
CONFIGS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("cooperative_pong", "pettingzoo.butterfly.cooperative_pong_v6", {}),
    ("kaz_image", "pettingzoo.butterfly.knights_archers_zombies_v11", {"obs_method": "image"}),
)
#: Configurations run only when --configs names them: yardsticks for the ones above (module docstring).
YARDSTICKS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("kaz_vector", "pettingzoo.butterfly.knights_archers_zombies_v11", {}),
)
#: Every configuration --configs may name.
ALL_CONFIGS = CONFIGS + YARDSTICKS


def train(out: Path, key: str, env: str, env_args: dict[str, str], seed: int, minutes: float,
          steps: int | None = None, final_episodes: int | None = None) -> None:
    """One bare `pzasync train` into OUT/KEY-sSEED/: for `minutes`, or `steps` agent steps where given."""
    budget = ["--steps", str(steps)] if steps else ["--minutes", str(minutes)]
    command = ["pzasync", "train", env, *budget, "--seed", str(seed), "--no-progress",
               "--out-dir", str(out / f"{key}-s{seed}")]
    if final_episodes:
        command += ["--final-episodes", str(final_episodes)]
    for name, value in env_args.items():
        command += ["--env-arg", f"{name}={value}"]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)


#: Where --sampled leaves a run's sampled scoring (`pzasync eval --json`), in the run directory.
SAMPLED_FILE = "final_evaluation_sampled.json"


def score_sampled(run_dir: Path) -> None:
    """Score a run's trained and untrained policies sampling their actions, beside random play, over the final
    evaluation's episodes and seed, into RUN/SAMPLED_FILE (kept if there already)."""
    if (run_dir / SAMPLED_FILE).exists():
        return
    files = RunDirectory(run_dir, create=False)
    run, final = files.read_json("run.json"), files.read_json("final_evaluation.json")
    command = ["pzasync", "eval", str(run_dir), "--scoring", final["scoring"], "--acting", "sampled", "--baselines",
               "--episodes", str(final["episodes"]), "--seed", str(run["config"]["seed"] + FINAL_SEED_OFFSET),
               "--json", str(run_dir / SAMPLED_FILE)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def figures(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and 95% half-width per policy (trained, untrained, random) of an evaluation's results."""
    return {r["policy"]: {"mean": r["mean_return"], "ci95": r["mean_return_ci95"]} for r in results}


def run_figures(run_dir: Path) -> dict[str, Any]:
    """A run's seed, agent steps, final evaluation (mean and 95% half-width per policy; with a sampled scoring
    beside it, that too) and evaluation curve."""
    files = RunDirectory(run_dir, create=False)
    run, result, final = (files.read_json(name) for name in ("run.json", "result.json", "final_evaluation.json"))
    sampled = ({"final_sampled": figures(files.read_json(SAMPLED_FILE)["results"])}
               if (run_dir / SAMPLED_FILE).exists() else {})
    return {"run_dir": str(run_dir), "seed": run["config"]["seed"], "agent_steps": result["agent_steps"],
            "wall_seconds": result["wall_seconds"], "wrappers": run["env_wrappers"], "env_kwargs": run["env_kwargs"],
            "learners": sorted({a["learner"] for a in result["agents"].values()}),
            "final_episodes": final["episodes"], "scoring": final["scoring"],
            "final": figures(final["results"]), **sampled,
            "curve": [{"wall_s": r["wall_s"], "agent_steps": r["agent_steps"], "mean": r["mean_return"],
                       "episodes": r["episodes"]} for r in files.evaluation_rows()]}


def passes(final: dict[str, dict[str, float]]) -> bool:
    """The trained interval above both baselines' intervals."""
    low = final["trained"]["mean"] - final["trained"]["ci95"]
    return all(low > final[b]["mean"] + final[b]["ci95"] for b in ("untrained", "random"))


def finished_runs(out: Path, key: str) -> list[Path]:
    """A configuration's run directories under OUT (OUT/KEY-sSEED/RUN/) that reached their final evaluation."""
    return [run for run in sorted(out.glob(f"{key}-s*/*/")) if (run / "final_evaluation.json").exists()]


def collect(out: Path, command: str) -> dict[str, Any]:
    """Every configuration's runs under OUT (OUT/KEY-sSEED/RUN/); `command` reruns the report."""
    configs = []
    for key, env, env_args in ALL_CONFIGS:
        runs = [run_figures(run) for run in finished_runs(out, key)]
        for run in runs:
            run["passes"] = passes(run["final"])
            if "final_sampled" in run:
                run["passes_sampled"] = passes(run["final_sampled"])
        if runs:
            configs.append({"key": key, "env": env, "env_args": env_args, "runs": runs})
    return {"what": "a bare `pzasync train ENV` (the defaults chosen from the spaces: learner, groups, "
                    "frame preprocessing) on pixel env configurations without a recipe for them; each run's own final "
                    "evaluation, greedy, trained beside its untrained network and random play over the same episodes; "
                    "`final_sampled` where present: the same policies and episodes, sampling their actions",
            "command": command,
            "configs": configs}


def plot(report: dict[str, Any], path: Path, budget: str) -> None:
    """Each configuration's evaluation curves (one line a seed) with the untrained and random baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = report["configs"]
    fig, axes = plt.subplots(1, len(configs), figsize=(6 * len(configs), 4), squeeze=False)
    for ax, config in zip(axes[0], configs):
        for run in config["runs"]:
            line, = ax.plot([p["agent_steps"] for p in run["curve"]], [p["mean"] for p in run["curve"]],
                            marker=".", label=f"seed {run['seed']}")
            final = run["final"]["trained"]
            ax.errorbar([run["agent_steps"]], [final["mean"]], [final["ci95"]], color=line.get_color(), marker="s",
                        capsize=3)
        for name, style in (("untrained", ":"), ("random", "--")):
            mean = sum(r["final"][name]["mean"] for r in config["runs"]) / len(config["runs"])
            ax.axhline(mean, color="grey", linestyle=style, label=f"{name} (mean over runs)")
        ax.set_title(f"{config['key']}: bare pzasync train, {budget}")
        ax.set_xlabel("agent steps")
        ax.set_ylabel(f"{config['runs'][0]['scoring']} return (greedy)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where the runs go (OUT/KEY-sSEED/)")
    parser.add_argument("report", type=Path, help="the JSON report; its plot beside it (.png)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--configs", default=",".join(key for key, _, _ in CONFIGS),
                        help=f"of {[key for key, _, _ in ALL_CONFIGS]}")
    parser.add_argument("--steps", type=int, default=None, help="agent steps a run, instead of --minutes")
    parser.add_argument("--final-episodes", type=int, default=None, help="the final evaluation's episodes "
                        "(default: pzasync train's, bounded by a quarter of the run)")
    parser.add_argument("--collect-only", action="store_true", help="gather the runs already in OUT")
    parser.add_argument("--sampled", action="store_true", help="also score each run sampling its policies "
                        "(module docstring)")
    args = parser.parse_args()
    chosen = args.configs.split(",")
    known = [key for key, _, _ in ALL_CONFIGS]
    unknown = set(chosen) - set(known)
    if unknown:
        sys.exit(f"--configs: unknown {sorted(unknown)}; known: {known}")
    if not args.collect_only:
        for key, env, env_args in ALL_CONFIGS:
            if key in chosen:
                for seed in (int(s) for s in args.seeds.split(",")):
                    train(args.out, key, env, env_args, seed, args.minutes, args.steps, args.final_episodes)
    if args.sampled:
        for key in chosen:
            for run_dir in finished_runs(args.out, key):
                score_sampled(run_dir)
    budget = f"{args.steps:,} agent steps" if args.steps else f"{args.minutes:g} min"
    options = [f"--configs {args.configs}", f"--seeds {args.seeds}"]
    if args.steps:
        options.append(f"--steps {args.steps}")
    elif args.minutes != 10:
        options.append(f"--minutes {args.minutes:g}")
    options += [f"--final-episodes {args.final_episodes}"] if args.final_episodes else []
    options += ["--sampled"] if args.sampled else []
    report = collect(args.out, f"python benchmarks/pixel_defaults.py OUT {args.report} {' '.join(options)}")
    report["budget"] = budget
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    plot(report, args.report.with_suffix(".png"), budget)
    for config in report["configs"]:
        print(config["key"], [(r["seed"], round(r["final"]["trained"]["mean"], 2), r["passes"],
                               r.get("passes_sampled")) for r in config["runs"]])


if __name__ == "__main__":
    main()
