"""Long runs (issue 56, item 3): a `pzasync suite --minutes 60` report with every run's final checkpoints scored
again over more episodes than the suite's final round (greedy, through the AEC API, from the suite table's
seed), kept as docs/bench/suite_60min_ENV.json with its curve (ENV.png) beside it; the results page's "long_runs"
table reads every such report.

    pzasync suite --minutes 60 --seeds 1 --eval-every 240 --out OUT ENV
    python benchmarks/long_runs.py OUT docs/bench/suite_60min_SHORT.json --episodes 50
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


def rescore(run_dir: str, episodes: int, seed: int) -> dict[str, float]:
    """A run's final checkpoints scored greedily over `episodes` episodes from `seed` through the AEC API: the
    trained row's mean and the half-width of its 95% interval."""
    import pzasync

    report = pzasync.evaluate(run_dir, episodes=episodes, seed=seed, baselines=False, env_api="aec")
    (trained, *more) = [r for r in report.results if r.policy == "trained"]
    assert not more, "a long run's env is scored as one team or one metric"
    return {"mean": trained.mean, "ci95": trained.mean_ci95, "episodes": episodes, "seed": seed}


def as_given(report: Path) -> str:
    """The report's path as the command to rerun it names it: relative to the repository where it lies inside."""
    repository = Path(__file__).resolve().parents[1]
    try:
        return str(report.resolve().relative_to(repository))
    except ValueError:
        return str(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite_out", type=Path, help="the suite's --out (suite.json and ENV.png)")
    parser.add_argument("report", type=Path, help="docs/bench/suite_60min_SHORT.json; the plot goes beside it")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=10007, help="the first episode's seed (the suite table's)")
    parser.add_argument("--variant", default=None, help="what the results page calls the learner, where the run "
                        "took a recipe that has changed since (default: the --learner given, else \"the recipe's\")")
    args = parser.parse_args()
    suite: dict[str, Any] = json.loads((args.suite_out / "suite.json").read_text())
    for env in suite["envs"]:
        for run in env["runs"]:
            run["rescored"] = rescore(run["run_dir"], args.episodes, args.seed)
        plot = args.suite_out / Path(env["plot"]).name
        if plot.exists():
            shutil.copy(plot, args.report.with_suffix(".png"))
            env["plot"] = args.report.with_suffix(".png").name
    settings = suite["settings"]
    suite["command"] = (f"pzasync suite --minutes {settings['minutes']:g} --seeds {settings['seeds']} "
                        f"--eval-every {settings['eval_every_s']:g} --out OUT "
                        + (f"--learner {settings['learner']} " if settings.get("learner") else "")
                        + (f"--envs-per-actor {settings['envs_per_actor']} " if settings.get("envs_per_actor") else "")
                        + " ".join(settings["envs"])
                        + f"; python benchmarks/long_runs.py OUT {as_given(args.report)} --episodes {args.episodes}"
                        + (f" --variant {json.dumps(args.variant)}" if args.variant else ""))
    if args.variant:
        suite["variant"] = args.variant
    args.report.write_text(json.dumps(suite, indent=1) + "\n")
    for env in suite["envs"]:
        print(env["short"], [(run["seed"], run["agent_steps"], run["final"], run["rescored"]) for run in env["runs"]])


if __name__ == "__main__":
    main()
