"""Why a pursuit policy scored greedy through the parallel API plays like random play: the pursuers fall into lockstep.

One run's trained pursuer policy, greedy, 3 episodes through pursuit's AEC API (each pursuer moves in turn and the
next sees it) and through its parallel API (all move at once on the same observations): the team return and how many
distinct cells the 8 pursuers occupy. Pursuers on one cell see the same and, greedy, move alike from then on.

    python benchmarks/pursuit_lockstep.py RUN_DIR      (docs/bench/suite_env_api_10min.json, "lockstep")
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from pettingzoo.sisl import pursuit_v5

from pzasync.evaluation.evaluate import load_run_policies


def distinct_cells(env: Any) -> int:
    """Cells the pursuers occupy (several may share one)."""
    return len({tuple(p.current_position()) for p in env.unwrapped.env.pursuers})


def main(run_dir: str, episodes: int = 3) -> None:
    policy, layout = load_run_policies(run_dir)["pursuer_0"]  # the pursuers' shared policy

    def act(observations: list[Any]) -> list[int]:
        out, _ = policy.act(layout.batch(observations), None, False)
        return [int(a) for a in out]

    for api in ("aec", "parallel"):
        distinct, returns = [], []
        for episode in range(episodes):
            total = 0.0
            if api == "parallel":
                env = pursuit_v5.parallel_env()
                obs, _ = env.reset(seed=100 + episode)
                while env.agents:
                    names = list(obs)
                    obs, rewards, *_ = env.step(dict(zip(names, act([obs[a] for a in names]))))
                    total += sum(rewards.values())
                    distinct.append(distinct_cells(env))
            else:
                env = pursuit_v5.env()
                env.reset(seed=100 + episode)
                for agent in env.agent_iter():
                    observation, reward, terminated, truncated, _ = env.last()
                    total += reward
                    env.step(None if terminated or truncated else act([observation])[0])
                    if env.agents and agent == env.possible_agents[-1]:
                        distinct.append(distinct_cells(env))
            returns.append(round(float(total), 1))
            env.close()
        print(f"{api}: team return per episode {returns}; distinct pursuer cells: mean "
              f"{np.mean(distinct):.2f}, last 100 cycles {np.mean(distinct[-100:]):.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
