"""Pistonball from pixels with SuperSuit preprocessing and one policy shared by every piston.

Run: python examples/pistonball_shared.py [--pistons N] [--steps N]

SuperSuit turns the 457x120 RGB frames into 64x64 greyscale and stacks the last 3; all pistons form one agent
group, so they feed one PPO learner (one buffer, one policy slot) and act with copies of its policy. The
factory below is what pzasync rebuilds the env from, so the preprocessing is the same in every process.
"""

from __future__ import annotations

import argparse
import functools


def make_env(n_pistons: int = 20, max_cycles: int = 125, **kwargs):
    """The preprocessed env; `kwargs` go to pistonball (e.g. continuous=False for Discrete(3) actions). Pistonball
    draws its frames only when it renders (docs/running.md, "Image observations"): without a render mode every
    observation would be the same frame."""
    import supersuit as ss
    from pettingzoo.butterfly import pistonball_v6

    kwargs.setdefault("render_mode", "rgb_array")
    env = pistonball_v6.env(n_pistons=n_pistons, max_cycles=max_cycles, **kwargs)
    env = ss.color_reduction_v0(env, mode="full")  # luminance
    env = ss.resize_v1(env, x_size=64, y_size=64)
    return ss.frame_stack_v1(env, 3)


def main() -> None:
    from pzasync import AsyncRunner, RunConfig

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pistons", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=512)
    args = parser.parse_args()
    factory = functools.partial(make_env, n_pistons=args.pistons)
    config = RunConfig(seed=0, agent_groups={"pistons": ["piston_*"]}, backpressure=True)
    learner = ("ppo", {"batch_size": args.batch_size, "minibatch_size": min(128, args.batch_size), "epochs": 3})
    runner = AsyncRunner(factory, learner, config)
    unit = runner.plan.units["pistons"]
    print(f"{len(unit.members)} pistons share one PPO learner; observations {unit.layout.obs_space.shape} "
          f"{unit.layout.obs_space.dtype}")
    result = runner.run(agent_steps=args.steps)
    returns = result.agents["piston_0"].episode_returns
    print(f"{result.agent_steps:,} agent steps in {result.acting_seconds:.0f}s, {result.episodes} episodes, "
          f"{result.agents['piston_0'].updates} PPO updates")
    if returns:
        half = max(1, len(returns) // 2)
        print(f"piston_0 mean episode return: first half {sum(returns[:half]) / half:+.2f}, "
              f"second half {sum(returns[half:]) / max(1, len(returns) - half):+.2f}")


if __name__ == "__main__":
    main()
