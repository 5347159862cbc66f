"""Where a pistonball run's greedy play stalls (docs/benchmarks.md#pistonball): plays `--episodes` greedy episodes
of the run's env (its wrappers) with its trained policy, each piston acting its mean action clipped to [-1, 1],
and reports for each episode the team return, the ball's first and last x, the last cycle the ball moved, and for
an episode that ends with a negative team return (a stall) the ball's column, every piston's height and its mean
action in the last cycle.

    python benchmarks/pistonball_stalls.py RUN_DIR --episodes 4 --json docs/bench/pistonball_stalls.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from pzasync.evaluation.evaluate import load_run_policies, run_env

#: The ball counts as moving in a cycle where its x changes by more than this many pixels.
MOVING_PX = 0.5


def greedy_episode(env: Any, policies: dict[str, Any], seed: int) -> dict[str, Any]:
    """One greedy episode through the AEC API: its team return, the ball's x per cycle, and the last cycle's state."""
    env.reset(seed=seed)
    raw = env.unwrapped
    ball_x: list[float] = []
    cycle_means: list[float] = []
    last_means: list[float] = []
    team = 0.0
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        team += float(reward)
        if terminated or truncated:
            env.step(None)
            continue
        policy, _layout = policies[agent]
        action, _ = policy.act({"obs": obs[None]}, None, False)
        cycle_means.append(float(action[0].reshape(-1)[0]))
        if agent == env.agents[-1]:  # the cycle's last piston: the physics has stepped for every piston
            ball_x.append(float(raw.ball.position[0]))
            last_means, cycle_means = cycle_means, []
        env.step(np.clip(action[0], -1, 1).astype(np.float32))
    moves = np.flatnonzero(np.abs(np.diff(ball_x)) > MOVING_PX)
    episode = {"seed": seed, "team_return": team, "cycles": len(ball_x), "ball_x_first": ball_x[0],
               "ball_x_last": ball_x[-1], "ball_last_moved_at_cycle": int(moves[-1]) + 1 if len(moves) else 0}
    if team < 0:
        episode["stall"] = {
            "ball_column": int((ball_x[-1] - raw.wall_width) // raw.piston_width),
            "piston_heights_px": [round(float(p.position[1]), 1) for p in raw.pistonList],
            "mean_actions": [round(m, 3) for m in last_means]}
    return episode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a `pzasync train pistonball_v6` run directory")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=10007, help="the first episode's seed (the suite's)")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args()
    spec = run_env(args.run)
    policies = load_run_policies(args.run)
    env = spec.make()
    try:
        episodes = [greedy_episode(env, policies, args.seed + i) for i in range(args.episodes)]
    finally:
        env.close()
    report = {"what": __doc__.split("\n\n")[0].replace("\n", " "), "run": str(args.run),
              "command": f"python benchmarks/pistonball_stalls.py RUN_DIR --episodes {args.episodes} "
                         f"--seed {args.seed}",
              "episodes": episodes}
    for e in episodes:
        stall = e.get("stall")
        where = "" if stall is None else (f"; stalled: ball over piston {stall['ball_column']}, heights "
                                          f"{min(stall['piston_heights_px'])}-{max(stall['piston_heights_px'])} px, "
                                          f"mean actions {min(stall['mean_actions'])}..{max(stall['mean_actions'])}")
        print(f"seed {e['seed']}: team {e['team_return']:.0f}, ball x {e['ball_x_first']:.0f} -> "
              f"{e['ball_x_last']:.0f}, last moved at cycle {e['ball_last_moved_at_cycle']} of {e['cycles']}{where}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
