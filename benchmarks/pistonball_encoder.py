"""Is a pistonball policy's image encoder alive? Dead ReLU units and the spread of its features over states.

A policy that does not look at its frames (docs/benchmarks.md#pistonball) can fail in its encoder (features that
do not change with the state: nothing for the heads to read) or in its heads (saturated tanh units). This plays
`--states` decisions of the run's env (its wrappers) with uniform random actions, every agent's observation a
state, then reports, for the run's
trained encoder and for the same network freshly initialised (PyTorch's default init, seed 0):

- per ReLU of the encoder, the share of its units (a conv channel at any position, or a feature) that are 0 on
  every state (`pistonball_blind.dead_relu_units`);
- the features' standard deviation over the states (mean over features) and their mean |value|;
- for the trained policy, the spread of its mean action and value over the states, and the share of its policy
  head's first layer past |3| before the activation.

    python benchmarks/pistonball_encoder.py --run runs/pistonball_v6-20261128-092612 --json OUT.json
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Any

import numpy as np
import torch
from pistonball_blind import dead_relu_units

from pzasync.core.environments import EnvSpec
from pzasync.evaluation.evaluate import load_run_policies
from pzasync.learners.networks import obs_tensors
from pzasync.runtime.rundir import RunDirectory


def random_play_states(run_dir: str, states: int, seed: int) -> list[np.ndarray]:
    """Every agent's observations over `states` decisions of all agents acting uniformly at random (the pistons
    share one policy)."""
    spec = EnvSpec.of_run(RunDirectory(run_dir, create=False).read_json("run.json"))
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


def encoder_report(policy: Any, obs: dict[str, torch.Tensor]) -> dict[str, Any]:
    with torch.inference_mode():
        features = policy.encoder(obs)
        return {"dead_units": dead_relu_units(policy.encoder, obs),
                "features_std_over_states": float(features.std(0).mean()),
                "features_mean_abs": float(features.abs().mean())}


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
    trained = encoder_report(policy, obs)
    with torch.inference_mode():
        features = policy.encoder(obs)
        mean, value = policy.pi(features), policy.v(features)
        trained.update({"mean_action_std": float(mean.std(0).mean()), "mean_action_min": float(mean.min()),
                        "mean_action_max": float(mean.max()), "value_std": float(value.std()),
                        "pi_first_layer_past_3": float((policy.pi[0](features).abs() > 3).float().mean())})
    out = {"command": "python benchmarks/pistonball_encoder.py --run RUN_DIR", "run": args.run, "agent": args.agent,
           "states": len(states), "seed": args.seed, "trained": trained,
           "untrained": encoder_report(fresh, obs)}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
