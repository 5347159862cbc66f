"""Wrap an existing PettingZoo env and train it, without touching the env's code.

Run: python examples/wrap_env.py [--steps N]

Knights-Archers-Zombies runs through PettingZoo's AEC API (its `env()` already carries PettingZoo's standard
wrappers) and its agents die mid-episode. SuperSuit's `clip_reward_v0` is added on top, before pzasync sees
it. The factory is what other processes rebuild the env from, so the wrappers travel with it.
`pzasync.testing.check_env` checks the wrapped env against pzasync's transition rules first. Archers share
one DQN learner and knights another (agent groups).
"""

from __future__ import annotations

import argparse


def make_env():
    """Build the wrapped env. Top-level (or a lambda): pzasync sends it to other processes with cloudpickle."""
    import supersuit as ss
    from pettingzoo.butterfly import knights_archers_zombies_v11

    env = knights_archers_zombies_v11.env(max_cycles=300, num_archers=2, num_knights=2)
    return ss.clip_reward_v0(env, lower_bound=-1, upper_bound=1)


def main() -> None:
    from pzasync import AsyncRunner, RunConfig
    from pzasync.testing import check_env

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30_000)
    args = parser.parse_args()
    report = check_env(make_env, agent_steps=min(args.steps, 1000))  # transition checks on the wrapped env first
    print(f"check_env: {len(report['agents'])} agents, {report['transitions']} transitions, rewards conserved "
          f"over {report['episodes']} episode(s)")
    config = RunConfig(seed=0, agent_groups={"archers": ["archer_*"], "knights": ["knight_*"]})
    result = AsyncRunner(make_env, ("dqn", {"learning_starts": 200}), config).run(agent_steps=args.steps)
    for agent, r in result.agents.items():
        recent = r.episode_returns[-20:]
        mean = sum(recent) / len(recent) if recent else float("nan")
        print(f"{agent:10s} group={r.group:8s} updates={r.updates:6d} mean return (last 20 episodes) {mean:+.2f}")


if __name__ == "__main__":
    main()
