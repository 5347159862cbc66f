"""Why DQN collapses at one update per agent step: its greedy win rate and its Q-values, snapshot by snapshot.

    python benchmarks/dqn_values.py [--learner dqn] [--seed 0] [--steps 20000] [--ratio 1]

connect_four, player_0 learns with `--learner`, player_1 plays at random; sequential runner at `--ratio`
updates per agent step of player_0. Every 2,000 agent steps a policy snapshot is kept; after the run each
plays 100 greedy games against random play, and its Q-values are read on 1,500 positions of random games:
the mean over positions of the best legal value (no return in connect four exceeds 1, so a mean best value
above 1 is overestimation) and the median gap between the two best legal values. Prints one JSON line.
The table in docs/bench/dqn_values.json (docs/benchmarks.md#connect_four) was made with it.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

ENV = "pettingzoo.classic.connect_four_v3"


def main() -> None:
    import torch

    from pzasync import RunConfig, SequentialRunner, rollout
    from pzasync.core.environments import EnvSpec
    from pzasync.evaluation.evaluate import evaluate_against
    from pzasync.learners import vector_to_policy
    from pzasync.specs import parse_learner_spec

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learner", default="dqn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--ratio", type=float, default=1.0, help="updates per agent step of player_0")
    args = parser.parse_args()

    learners = {"player_0": parse_learner_spec(args.learner), "player_1": "random"}
    config = RunConfig(seed=args.seed, sequential_replay_ratio=args.ratio, snapshot_every_steps=2000)
    run = SequentialRunner(ENV, learners, config)
    result = run.run(agent_steps=args.steps)
    plan = run.plan.agents["player_0"]
    rng = np.random.default_rng(0)
    positions = rollout(ENV, lambda agent, obs, mask: int(rng.choice(np.flatnonzero(mask))),
                        agent_steps=3000, seed=99)["player_0"]
    obs, mask = torch.as_tensor(positions["obs"]), torch.as_tensor(positions["action_mask"])
    several = mask.sum(dim=1) > 1
    rows = []
    for snap in result.snapshots:
        policy = plan.build_policy(0)
        vector_to_policy(snap.vectors["player_0"], policy)
        (score,) = evaluate_against(EnvSpec.of(ENV), {"player_0": (policy, plan.layout)}, "random", 100, seed=2026)
        with torch.no_grad():
            best = policy({"obs": obs}).masked_fill(~mask, -1e9).topk(2, dim=1).values
        rows.append({"agent_steps": snap.agent_steps, "win_vs_random": round(score.win_rate, 2),
                     "mean_best_q": round(float(best[:, 0].mean()), 3),
                     "median_gap": round(float((best[several, 0] - best[several, 1]).median()), 4)})
    print(json.dumps({"learner": args.learner, "seed": args.seed, "updates": result.agents["player_0"].updates,
                      "snapshots": rows}), flush=True)


if __name__ == "__main__":
    main()
