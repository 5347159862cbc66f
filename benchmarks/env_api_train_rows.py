"""Learning at equal wall time through the AEC path and the parallel path on an env the suite does not hold
(issue 55, "gets better where more samples help"): `pzasync train` each seed through both paths, one run at a time,
with no evaluation while training (an evaluator shares the cores, and through the AEC API it plays far slower);
then each run's final checkpoints scored greedy against random play, and the training returns drawn against
wall-clock time. The report has the shape of `benchmarks/env_api_rows.py`'s, so the results page's "env_api" table
takes it as one more env.

    for s in 0 1 2; do for api in aec parallel; do pzasync train ENV --minutes 10 --seed $s --env-api $api \\
        --eval-every 0 --final-episodes 0 --out OUT/$api-$s; done; done
    python benchmarks/env_api_train_rows.py OUT docs/bench/NAME.json --episodes 10 [--head-to-head 10] \\
        [--plot docs/bench/NAME.png]

Each run is scored once: its figures go to OUT/eval-API-SEED.json (`pzasync eval --json`'s document), which a
later call reuses when its episodes and seed match.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

APIS = ("aec", "parallel")
#: What the table's score column says, by the evaluation's scoring mode.
SCORE_LABELS = {"sides": "side return against random, mean of the sides",
                "seats": "seat return against random, mean of the seats", "team": "team return"}


def run_of(root: Path, api: str, seed: int) -> Path:
    """The one run directory `pzasync train --out OUT/API-SEED` made."""
    runs = sorted(path.parent for path in (root / f"{api}-{seed}").glob("*/result.json"))
    if len(runs) != 1:
        raise SystemExit(f"{root / f'{api}-{seed}'}: expected one finished run, found {len(runs)}")
    return runs[0]


def kept(cache: Path, episodes: int, first_episode_seed: int, evaluate: Callable[[], Any],
         enough: Callable[[dict[str, Any]], bool] = lambda document: True) -> dict[str, Any]:
    """An evaluation document (`pzasync eval --json`'s) kept in `cache`: read back where it played `episodes`
    episodes from `first_episode_seed` and is `enough`, else computed by `evaluate` (a `pzasync.Evaluation`) and
    kept."""
    if cache.exists():
        document = json.loads(cache.read_text())
        if document["episodes"] == episodes and document["seed"] == first_episode_seed and enough(document):
            return document
    document = evaluate().to_json()
    cache.write_text(json.dumps(document, indent=1) + "\n")
    return document


def scored(root: Path, api: str, seed: int, episodes: int, first_episode_seed: int, env_api: str,
           baselines: bool) -> dict[str, Any]:
    """The run's evaluation against random, computed once and kept as OUT/eval-API-SEED.json."""
    import pzasync

    return kept(root / f"eval-{api}-{seed}.json", episodes, first_episode_seed,
                lambda: pzasync.evaluate(str(run_of(root, api, seed)), episodes=episodes, seed=first_episode_seed,
                                         baselines=baselines, env_api=env_api),
                lambda document: not baselines or any(r["policy"] != "trained" for r in document["results"]))


def mean_of(document: dict[str, Any], policy: str) -> float:
    """The mean over scored units (sides, seats or the team) of one policy's mean return."""
    means = [r["mean_return"] for r in document["results"] if r["policy"] == policy]
    if not means:
        raise SystemExit(f"{document['run_dir']}: no {policy!r} results in its evaluation")
    return sum(means) / len(means)


def head_to_head(root: Path, seed: int, view: str, acting: str, episodes: int, first_episode_seed: int,
                 env_api: str) -> dict[str, Any]:
    """One seed's sides of the `view` path's run ("aec" or "parallel") against the other path's run (each side
    against the other run's other side), the scored sides acting by `acting` and their opponents greedy (pzasync
    evaluates a yardstick greedy); computed once and kept as OUT/h2h-VIEW-ACTING-SEED.json."""
    import pzasync

    other = APIS[1 - APIS.index(view)]
    return kept(root / f"h2h-{view}-{acting}-{seed}.json", episodes, first_episode_seed,
                lambda: pzasync.evaluate(str(run_of(root, view, seed)), vs=str(run_of(root, other, seed)),
                                         episodes=episodes, seed=first_episode_seed, baselines=False, env_api=env_api,
                                         acting=acting))


def head_to_head_games(root: Path, seeds: list[int], episodes: int, first_episode_seed: int,
                       env_api: str) -> list[dict[str, Any]]:
    """Each seed's two pairings (the AEC run's red against the parallel run's blue, and its blue against their
    red), scored from both sides' view: greedy, one game (greedy sides replay it in every episode: the map starts
    alike), each side's return read from its own run's view; and sampling, `episodes` a side, each side sampling
    against the other's greedy policy (a handicap each path's sides take in turn)."""
    games = []
    for seed in seeds:
        for acting, count in (("greedy", 1), ("sampled", episodes)):
            views = {view: {r["unit"]: r for r in head_to_head(root, seed, view, acting, count, first_episode_seed,
                                                                env_api)["results"] if r["policy"] == "trained"}
                     for view in APIS}
            for aec_side, parallel_side in (("red", "blue"), ("blue", "red")):
                games.append({"seed": seed, "acting": acting, "episodes": count, "aec_side": aec_side,
                              "parallel_side": parallel_side,
                              "aec_return": views["aec"][aec_side]["mean_return"],
                              "parallel_return": views["parallel"][parallel_side]["mean_return"]})
    return games


def training_curve(run_dir: Path) -> dict[str, list[float]]:
    """Each finished training episode's wall time and its sides' summed returns, averaged over the sides (the
    evaluator's sides: `side_name`, an agent named SIDE_N belongs to side SIDE)."""
    from pzasync.evaluation.scoring import side_name

    wall, returns = [], []
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        row = json.loads(line)
        sides: dict[str, float] = {}
        for agent, value in row["returns"].items():
            sides[side_name(agent)] = sides.get(side_name(agent), 0.0) + value
        wall.append(round(row["wall_s"], 2))
        returns.append(round(sum(sides.values()) / len(sides), 3))
    return {"wall_s": wall, "side_return": returns}


def minutes_of(run_dir: Path) -> float:
    """A run's budget, as its wall time gives it (the run directory does not record --minutes)."""
    return round(json.loads((run_dir / "result.json").read_text())["wall_seconds"] / 60, 1)


def curve_figures(curves: list[dict[str, list[float]]], minutes: float, window: int = 5) -> dict[str, list]:
    """What the training curves say in figures: each run's mean side return over the episodes that ended in its
    last fifth of the budget, and when the moving average over `window` episodes first rose above 0 (None:
    never)."""
    last, first_positive = [], []
    for curve in curves:
        wall, returns = curve["wall_s"], curve["side_return"]
        late = [r for t, r in zip(wall, returns) if t >= 0.8 * minutes * 60]
        last.append(round(sum(late) / len(late), 1) if late else None)
        averages = [sum(returns[i - window + 1:i + 1]) / window for i in range(window - 1, len(returns))]
        first_positive.append(next((wall[i + window - 1] for i, a in enumerate(averages) if a > 0), None))
    return {"training_return_last_fifth": last, "first_positive_s": first_positive}


def merge(root: Path, seeds: list[int], episodes: int, first_episode_seed: int, env_api: str,
          out: Path, h2h_episodes: int = 0) -> dict[str, Any]:
    """Every seed's two runs under `root`, scored, with their agent steps and training curves."""
    paths: dict[str, dict[str, Any]] = {}
    documents = {}
    minutes = minutes_of(run_of(root, "aec", seeds[0]))
    for api in APIS:
        runs = [run_of(root, api, seed) for seed in seeds]
        results = [json.loads((run / "result.json").read_text()) for run in runs]
        documents[api] = [scored(root, api, seed, episodes, first_episode_seed, env_api,
                                 baselines=(api, seed) == ("aec", seeds[0])) for seed in seeds]
        paths[api] = {"scores": [mean_of(document, "trained") for document in documents[api]],
                      "agent_steps": [result["agent_steps"] for result in results], "seeds": seeds,
                      "run_dirs": [str(run.relative_to(root)) for run in runs],
                      "eval_seconds": [document["seconds"] for document in documents[api]],
                      "curves": [training_curve(run) for run in runs]}
        paths[api].update(curve_figures(paths[api]["curves"], minutes))
    first = documents["aec"][0]
    games = head_to_head_games(root, seeds, h2h_episodes, first_episode_seed, env_api) if h2h_episodes else []
    env_id = first["env"]
    return {"what": "pzasync train through the AEC path (--env-api aec) and the parallel path (--env-api parallel), "
                    "the same seeds, one run at a time, no evaluation while training; scores: each run's final "
                    "checkpoints, greedy, against random play, the mean of its scored units' returns over "
                    "`episodes` episodes each from `seed`",
            "episodes": episodes, "seed": first_episode_seed, "scored_through": env_api,
            "command": (f"for s in {' '.join(map(str, seeds))}; do for api in aec parallel; do pzasync train {env_id} "
                        f"--minutes {minutes:g} --seed $s --env-api $api --eval-every 0 --final-episodes 0 "
                        f"--out OUT/$api-$s; done; done; python benchmarks/env_api_train_rows.py OUT {out} "
                        f"--episodes {episodes} --env-api {env_api}"
                        + (f" --head-to-head {h2h_episodes}" if h2h_episodes else "")),
            "head_to_head": games or None,
            "envs": [{"env": env_id, "short": env_id.rsplit(".", 1)[-1],
                      "score": SCORE_LABELS[first["scoring"]],
                      "settings": {"minutes": minutes, "seeds": len(seeds), "first_seed": seeds[0]},
                      "random": mean_of(first, "random"), "untrained": mean_of(first, "untrained"), **paths}]}


def plot(report: dict[str, Any], out: Path) -> None:
    """Training returns against wall-clock seconds, each seed's two runs (a moving average over 5 episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    (env,) = report["envs"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for color, api in zip(("C0", "C1"), APIS):
        for style, seed, curve, steps in zip(("-", "--", ":", "-."), env[api]["seeds"], env[api]["curves"],
                                             env[api]["agent_steps"]):
            y = np.asarray(curve["side_return"], dtype=float)
            w = max(1, min(5, len(y)))
            ax.plot(np.asarray(curve["wall_s"])[w - 1:], np.convolve(y, np.ones(w) / w, mode="valid"), style,
                    color=color, label=f"{api} path, seed {seed} ({steps / 1e6:.2f}M agent steps)")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("a side's training return\n(mean of the sides, 5-episode average)")
    ax.set_title(f"{env['short']}: training through each path, {env['settings']['minutes']:g} minutes a run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the directory holding aec-SEED/ and parallel-SEED/ train outputs")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", default="0,1,2", help="the seeds trained, comma-separated")
    parser.add_argument("--episodes", type=int, default=10, help="episodes each scored unit plays per run")
    parser.add_argument("--seed", type=int, default=10007, help="the first episode's seed (the suite table's)")
    parser.add_argument("--env-api", default="parallel", choices=("aec", "parallel"),
                        help="the API every run is scored through, whichever trained it")
    parser.add_argument("--head-to-head", type=int, default=0, metavar="EPISODES",
                        help="also play each seed's AEC-trained sides against its parallel-trained ones, greedy "
                             "and sampling this many episodes a side (0: not)")
    parser.add_argument("--plot", type=Path, help="also draw the training curves to this PNG")
    parser.add_argument("--note", default="", help="what a reader should know about these runs (the report's note)")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    report = merge(args.root, seeds, args.episodes, args.seed, args.env_api, args.out, args.head_to_head)
    if args.note:
        report["note"] = args.note
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.plot:
        plot(report, args.plot)
    print(f"{args.out}: {report['envs'][0]['short']}, seeds {args.seeds}")


if __name__ == "__main__":
    main()
