"""Team return against wall time for cooperative MPE games: `mappo` (centralized critic) against independent
`ppo`, the same wall budget each, several seeds, beside the random team.

    python benchmarks/team_learners.py --envs simple_spread,speaker_listener \\
        --learners "mappo;ppo,lr=1e-3,batch_size=256" --seeds 0,1,2 --seconds 180 --out /tmp/team_learners
    python benchmarks/team_learners.py --from-json /tmp/team_learners/runs.jsonl --out /tmp/team_learners

Each run is `AsyncRunner(env, learner, RunConfig(seed=S, agent_groups=...)).run(seconds=W)` (the learner's
defaults; agents with equal spaces share one policy, as `pzasync train` groups them), runs interleaved by seed
so that load drifts hit every learner alike. The *team return* of an episode is the sum of every agent's
return (what RLlib's and so MARLlib's `episode_reward_mean` reports), read from the run's episodes.jsonl
(training episodes, actions sampled). Per learner, the curve is the mean over seeds of each seed's mean team
return in each tenth of the budget, with a 95% interval (t over seeds). The random team plays the same env
with uniform actions (`--random-episodes` episodes). Writes runs.jsonl, summary.json and team_learners.png.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

ENVS = {
    "simple_spread": ("mpe2.simple_spread_v3", {"N": 3}, {"team": ["agent_*"]}),
    "speaker_listener": ("mpe2.simple_speaker_listener_v4", {}, {}),
}
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% t interval (0 for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def run_once(env_key: str, learner: str, seed: int, seconds: float, out: Path) -> dict:
    from pzasync import RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.runners import AsyncRunner
    from pzasync.specs import learner_spec_of

    env_id, kwargs, groups = ENVS[env_key]
    config = RunConfig(seed=seed, agent_groups=groups, out_dir=str(out))
    result = AsyncRunner(EnvSpec.of(env_id, **kwargs), learner_spec_of(learner), config).run(seconds=seconds)
    rows = [json.loads(line) for line in (Path(result.run_dir) / "episodes.jsonl").read_text().splitlines()]
    return {"env": env_key, "learner": learner, "seed": seed, "seconds": seconds, "agent_steps": result.agent_steps,
            "episodes": [(r["wall_s"], sum(r["returns"].values())) for r in rows]}


def random_team(env_key: str, episodes: int, seed: int = 12345) -> list[float]:
    from pzasync.core.environments import EnvSpec
    from pzasync.evaluation.evaluate import play, random_actor

    env_id, kwargs, _ = ENVS[env_key]
    spec = EnvSpec.of(env_id, **kwargs)
    probe = spec.make()
    actors = {a: random_actor(spec.make(), seed + 7 * i) for i, a in enumerate(probe.possible_agents)}
    probe.close()
    return [sum(s.returns.values()) for s in play(spec, actors, episodes, seed)]


def curves(runs: list[dict], bins: int = 10) -> dict:
    """env -> learner -> [(bin end s, mean, ci)] over seeds, and each seed's last-bin mean."""
    out: dict = {}
    for run in runs:
        width = run["seconds"] / bins
        per_bin = [[ret for wall, ret in run["episodes"] if b * width <= wall < (b + 1) * width] for b in range(bins)]
        run["bins"] = [statistics.fmean(x) if x else None for x in per_bin]
    for env in sorted({r["env"] for r in runs}):
        for learner in sorted({r["learner"] for r in runs if r["env"] == env}):
            mine = [r for r in runs if r["env"] == env and r["learner"] == learner]
            width = mine[0]["seconds"] / bins
            points = []
            for b in range(bins):
                values = [r["bins"][b] for r in mine if r["bins"][b] is not None]
                if values:
                    points.append(((b + 1) * width, *ci95(values)))
            out.setdefault(env, {})[learner] = {"curve": points, "final": [r["bins"][-1] for r in mine],
                                                "agent_steps": [r["agent_steps"] for r in mine]}
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted(summary)
    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for i, (learner, data) in enumerate(sorted(summary[env].items())):
            if learner == "random":
                continue
            t = [p[0] for p in data["curve"]]
            mean = [p[1] for p in data["curve"]]
            half = [p[2] for p in data["curve"]]
            ax.plot(t, mean, label=learner, color=f"C{i}")
            ax.fill_between(t, [m - h for m, h in zip(mean, half)], [m + h for m, h in zip(mean, half)],
                            color=f"C{i}", alpha=0.2)
        if "random" in summary[env]:
            mean, half = summary[env]["random"]
            ax.axhspan(mean - half, mean + half, color="grey", alpha=0.3, label="random team")
        ax.set_title(env)
        ax.set_xlabel("wall seconds")
        ax.set_ylabel("team return per episode (sum over agents)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="simple_spread,speaker_listener")
    parser.add_argument("--learners", default="mappo;ppo,lr=1e-3,batch_size=256",
                        help="learner specs separated by ';' (the default gives ppo mappo's shared defaults)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--random-episodes", type=int, default=400)
    parser.add_argument("--out", default=None)
    parser.add_argument("--from-json", default=None, help="re-read the runs of an earlier invocation")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="team_learners_"))
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        runs = [json.loads(line) for line in Path(args.from_json).read_text().splitlines()]
    else:
        runs = []
        with open(out / "runs.jsonl", "a") as log:
            for seed in (int(s) for s in args.seeds.split(",")):
                for env in args.envs.split(","):
                    for learner in args.learners.split(";"):
                        start = time.monotonic()
                        run = run_once(env, learner, seed, args.seconds, out / "runs")
                        runs.append(run)
                        log.write(json.dumps(run) + "\n")
                        log.flush()
                        print(f"{env} {learner} seed {seed}: {run['agent_steps']} agent steps, "
                              f"{time.monotonic() - start:.0f} s", flush=True)
    summary = curves(runs)
    for env in summary:
        summary[env]["random"] = list(ci95(random_team(env, args.random_episodes)))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(summary, out / "team_learners.png")
    for env, data in summary.items():
        rand = data["random"]
        print(f"{env}: random team {rand[0]:.1f} ± {rand[1]:.1f}")
        for learner, d in data.items():
            if learner != "random":
                mean, half = ci95([f for f in d["final"] if f is not None])
                print(f"  {learner}: last tenth {mean:.1f} ± {half:.1f} (seeds {d['final']}), "
                      f"agent steps {d['agent_steps']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
