"""Is a pistonball policy's image encoder alive? Dead ReLU units and the spread of its features over states.

A policy that does not look at its frames (docs/benchmarks.md#pistonball) can fail in its encoder (features that
do not change with the state: nothing for the heads to read) or in its heads (saturated tanh units). This plays
`--states` decisions of the run's env (its wrappers) with uniform random actions, every agent's observation a
state, then reports, for the run's
trained encoder and for the same network freshly initialised (PyTorch's default init, seed 0):

- per ReLU of the encoder, the share of its units (a conv channel at any position, or a feature) that are 0 on
  every state;
- the features' standard deviation over the states (mean over features) and their mean |value|;
- the spread of the mean action and value over the states, and the share of the heads' first layers past |3|
  before the activation (`pistonball_blind.policy_spread`, which the sight check reports too).

    python benchmarks/pistonball_encoder.py --run runs/pistonball_v6-20261128-092612 --json OUT.json
"""

from __future__ import annotations

import argparse
import copy
import json

import numpy as np
import torch
from pistonball_blind import policy_spread

from pzasync.evaluation.evaluate import load_run_policies, run_env
from pzasync.learners.networks import obs_tensors


def random_play_states(run_dir: str, states: int, seed: int) -> list[np.ndarray]:
    """Every agent's observations over `states` decisions of all agents acting uniformly at random (the pistons
    share one policy)."""
    spec = run_env(run_dir)
    env = spec.make()
    rng = np.random.default_rng(seed)
    seen = []
    try:
        env.reset(seed=seed)
        for acting in env.agent_iter(max_iter=states):
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            seen.append(obs)
            space = env.action_space(acting)
            env.step(rng.uniform(space.low, space.high).astype(space.dtype))
    finally:
        env.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a pistonball run directory")
    parser.add_argument("--agent", default="piston_0", help="whose policy (a group's members share one)")
    parser.add_argument("--states", type=int, default=1000, help="decisions of random play (all agents')")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    policy, layout = load_run_policies(args.run)[args.agent]
    states = random_play_states(args.run, args.states, args.seed)
    obs = obs_tensors({"obs": np.stack(states)}, layout)
    fresh = copy.deepcopy(policy)
    torch.manual_seed(0)
    for module in fresh.modules():
        if module is not fresh and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    out = {"command": "python benchmarks/pistonball_encoder.py --run RUN_DIR", "run": args.run, "agent": args.agent,
           "states": len(states), "seed": args.seed, "trained": policy_spread(policy, obs),
           # the copy keeps the trained log std (a parameter, not a module): no action_std for it
           "untrained": {k: v for k, v in policy_spread(fresh, obs).items() if k != "action_std"}}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
