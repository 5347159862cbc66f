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


def head_to_head(root: Path, view: str, view_seed: int, other_seed: int, acting: str, episodes: int,
                 first_episode_seed: int, env_api: str) -> dict[str, Any]:
    """The sides of the `view` path's run ("aec" or "parallel") of `view_seed` against the other path's run of
    `other_seed` (each side against the other run's other side), the scored sides acting by `acting` and their
    opponents greedy (pzasync evaluates a yardstick greedy); computed once and kept as
    OUT/h2h-VIEW-ACTING-SEED.json (OUT/h2h-VIEW-ACTING-SEED-vs-OTHER.json where the seeds differ)."""
    import pzasync

    other = APIS[1 - APIS.index(view)]
    name = f"h2h-{view}-{acting}-{view_seed}" + ("" if other_seed == view_seed else f"-vs-{other_seed}")
    return kept(root / f"{name}.json", episodes, first_episode_seed,
                lambda: pzasync.evaluate(str(run_of(root, view, view_seed)), vs=str(run_of(root, other, other_seed)),
                                         episodes=episodes, seed=first_episode_seed, baselines=False, env_api=env_api,
                                         acting=acting))


def pairing_games(root: Path, aec_seed: int, parallel_seed: int, acting: str, episodes: int,
                  first_episode_seed: int, env_api: str) -> list[dict[str, Any]]:
    """The two games of one pairing of runs (the AEC run's red against the parallel run's blue, and its blue
    against their red), each side's return read from its own run's view."""
    seed_of = {"aec": aec_seed, "parallel": parallel_seed}
    views = {view: {r["unit"]: r for r in head_to_head(root, view, seed_of[view], seed_of[APIS[1 - APIS.index(view)]],
                                                        acting, episodes, first_episode_seed, env_api)["results"]
                    if r["policy"] == "trained"}
             for view in APIS}
    return [{"aec_seed": aec_seed, "parallel_seed": parallel_seed, "acting": acting, "episodes": episodes,
             "aec_side": aec_side, "parallel_side": parallel_side,
             "aec_return": views["aec"][aec_side]["mean_return"],
             "parallel_return": views["parallel"][parallel_side]["mean_return"]}
            for aec_side, parallel_side in (("red", "blue"), ("blue", "red"))]


def head_to_head_games(root: Path, seeds: list[int], episodes: int, first_episode_seed: int,
                       env_api: str) -> list[dict[str, Any]]:
    """Each seed's two pairings, scored from both sides' view: greedy, one game (greedy sides replay it in every
    episode: the map starts alike); and sampling, `episodes` a side, each side sampling against the other's
    greedy policy (a handicap each path's sides take in turn)."""
    games = []
    for seed in seeds:
        for acting, count in (("greedy", 1), ("sampled", episodes)):
            games += [{"seed": seed, **game}
                      for game in pairing_games(root, seed, seed, acting, count, first_episode_seed, env_api)]
    return games


def cross_seed_games(root: Path, seeds: list[int], first_episode_seed: int, env_api: str) -> list[dict[str, Any]]:
    """Every AEC-trained run against every parallel-trained run of another seed, greedy, one game a pairing: a
    measure that does not saturate as the score against random play does. The games share runs, so they are
    not independent samples; the same-seed pairings are `head_to_head_games`'."""
    return [game for aec_seed in seeds for parallel_seed in seeds if aec_seed != parallel_seed
            for game in pairing_games(root, aec_seed, parallel_seed, "greedy", 1, first_episode_seed, env_api)]


def sign_test(higher: int, games: int) -> float:
    """One-sided sign test: the chance of at least `higher` of `games` fair coin flips coming up heads."""
    from math import comb

    return sum(comb(games, k) for k in range(higher, games + 1)) / 2 ** games


def greedy_summary(games: list[dict[str, Any]], rounds: int = 10000, seed: int = 0) -> dict[str, Any]:
    """What the greedy games say: how many the parallel-trained side had the higher return in (same-seed pairings,
    with a sign test; those across seeds), each run's mean margin (its side's return minus the opposing side's)
    over its games, and the mean margin (parallel - AEC) over every game with a 95% interval from resampling the
    runs of each path (games share runs, so runs, not games, are the samples). Every pairing plays two games."""
    import numpy as np

    same = [g for g in games if g["aec_seed"] == g["parallel_seed"]]
    cross = [g for g in games if g["aec_seed"] != g["parallel_seed"]]
    higher = sum(g["parallel_return"] > g["aec_return"] for g in same)
    aec_seeds = sorted({g["aec_seed"] for g in games})
    parallel_seeds = sorted({g["parallel_seed"] for g in games})
    margin = np.full((len(aec_seeds), len(parallel_seeds)), np.nan)
    for (i, a), (j, b) in ((ia, jb) for ia in enumerate(aec_seeds) for jb in enumerate(parallel_seeds)):
        pair = [g["parallel_return"] - g["aec_return"] for g in games if (g["aec_seed"], g["parallel_seed"]) == (a, b)]
        if pair:
            margin[i, j] = sum(pair) / len(pair)
    rng = np.random.default_rng(seed)
    means = [np.nanmean(margin[np.ix_(rng.integers(0, len(aec_seeds), len(aec_seeds)),
                                      rng.integers(0, len(parallel_seeds), len(parallel_seeds)))])
             for _ in range(rounds)]
    by_run = {"aec": {seed: round(-float(np.nanmean(margin[i])), 2) for i, seed in enumerate(aec_seeds)},
              "parallel": {seed: round(float(np.nanmean(margin[:, j])), 2) for j, seed in enumerate(parallel_seeds)}}
    return {"same_seed_parallel_higher": higher, "same_seed_games": len(same), "margins_by_run": by_run,
            "same_seed_sign_test_p": round(sign_test(higher, len(same)), 4),
            "cross_seed_parallel_higher": sum(g["parallel_return"] > g["aec_return"] for g in cross),
            "cross_seed_games": len(cross), "mean_margin": round(float(np.nanmean(margin)), 2),
            "mean_margin_ci95": [round(float(np.nanpercentile(means, q)), 2) for q in (2.5, 97.5)]}


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
          out: Path, h2h_episodes: int = 0, cross_seeds: bool = False) -> dict[str, Any]:
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
    cross = cross_seed_games(root, seeds, first_episode_seed, env_api) if cross_seeds else []
    greedy = [g for g in games + cross if g["acting"] == "greedy"]
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
                        + (f" --seeds {','.join(map(str, seeds))}" if seeds != [0, 1, 2] else "")
                        + (f" --head-to-head {h2h_episodes}" if h2h_episodes else "")
                        + (" --cross-seeds" if cross_seeds else "")),
            "head_to_head": games or None,
            "cross_seed_greedy": cross or None,
            "greedy_summary": greedy_summary(greedy) if greedy else None,
            "envs": [{"env": env_id, "short": env_id.rsplit(".", 1)[-1],
                      "score": SCORE_LABELS[first["scoring"]],
                      "settings": {"minutes": minutes, "seeds": len(seeds), "first_seed": seeds[0]},
                      "random": mean_of(first, "random"), "untrained": mean_of(first, "untrained"), **paths}]}


def binned_mean(curves: list[dict[str, list[float]]], edges: Any) -> Any:
    """The mean over runs of each run's mean side return within each wall-time bin (NaN where a run has no
    episode in the bin, and where no run has)."""
    import numpy as np

    per_run = []
    for curve in curves:
        wall, returns = np.asarray(curve["wall_s"], dtype=float), np.asarray(curve["side_return"], dtype=float)
        bins = np.digitize(wall, edges) - 1
        per_run.append([returns[bins == i].mean() if (bins == i).any() else np.nan for i in range(len(edges) - 1)])
    runs = np.asarray(per_run)
    counts = (~np.isnan(runs)).sum(axis=0)
    return np.where(counts > 0, np.nansum(runs, axis=0) / np.maximum(counts, 1), np.nan)


def plot(report: dict[str, Any], out: Path, bin_seconds: float = 30.0) -> None:
    """Training returns against wall-clock seconds: each run thin (a moving average over 5 episodes), each path's
    mean over its seeds thick (the runs' means in `bin_seconds` bins)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    (env,) = report["envs"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    edges = np.arange(0.0, env["settings"]["minutes"] * 60 + bin_seconds, bin_seconds)
    for color, api in zip(("C0", "C1"), APIS):
        for curve in env[api]["curves"]:
            y = np.asarray(curve["side_return"], dtype=float)
            w = max(1, min(5, len(y)))
            ax.plot(np.asarray(curve["wall_s"])[w - 1:], np.convolve(y, np.ones(w) / w, mode="valid"), "-",
                    color=color, alpha=0.3, linewidth=0.8)
        steps = env[api]["agent_steps"]
        seeds = env[api]["seeds"]
        ax.plot((edges[:-1] + edges[1:]) / 2, binned_mean(env[api]["curves"], edges), "-", color=color, linewidth=2.2,
                label=f"{api} path: mean of seeds {', '.join(map(str, seeds))} (thin: each seed), "
                      f"{min(steps) / 1e6:.2f}-{max(steps) / 1e6:.2f}M agent steps")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("a side's training return\n(mean of the sides)")
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
    parser.add_argument("--cross-seeds", action="store_true",
                        help="also play every AEC-trained run against every parallel-trained run of the other seeds, "
                             "greedy, one game a pairing")
    parser.add_argument("--plot", type=Path, help="also draw the training curves to this PNG")
    parser.add_argument("--note", default="", help="what a reader should know about these runs (the report's note)")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    report = merge(args.root, seeds, args.episodes, args.seed, args.env_api, args.out, args.head_to_head,
                   args.cross_seeds)
    if args.note:
        report["note"] = args.note
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.plot:
        plot(report, args.plot)
    print(f"{args.out}: {report['envs'][0]['short']}, seeds {args.seeds}")


if __name__ == "__main__":
    main()
