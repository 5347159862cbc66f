"""What a pistonball policy's score says it learned: blind policies, and whether a trained one looks at its frames.

Two measurements (docs/benchmarks.md#pistonball):

- `--blind MEAN[,MEAN...] --stds STD[,STD...]`: every piston draws its action from one Gaussian N(MEAN, STD), clipped
  to [-1, 1], whatever it sees (STD 0: the constant action MEAN). The team return over `--episodes` episodes
  seeded from `--seed`, with a 95% interval. Such a policy cannot see the ball, so what it scores is the part of
  a score that needs no observation at all.
- `--run RUN_DIR`: plays `--episodes` episodes of the run's env (its wrappers) with its trained policy sampling,
  and reports how the policy's mean action and value spread over the states it met, the share of the heads'
  first hidden units past |3| before their tanh (saturated: no gradient through them), and per ReLU of the
  image encoder the share of units that are 0 on every state (dead).

    python benchmarks/pistonball_blind.py --blind 0,-0.3,-0.6,-1 --stds 0,0.67 --episodes 30
    python benchmarks/pistonball_blind.py --run runs/pistonball_v6-20261126-221447 --episodes 2
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np
import torch

from pzasync.evaluation.evaluate import load_run_policies, run_env
from pzasync.learners.networks import obs_tensors

ENV = "pettingzoo.butterfly.pistonball_v6"


def blind_returns(mean: float, std: float, episodes: int, seed: int) -> list[float]:
    """Team returns of every piston acting N(mean, std), clipped, on raw pistonball (a blind policy needs no
    preprocessing)."""
    from pettingzoo.butterfly import pistonball_v6

    env = pistonball_v6.parallel_env(render_mode="rgb_array")  # the frames are drawn only when it renders
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total = 0.0
        while env.agents:
            actions = {a: np.clip(np.array([mean + std * rng.standard_normal()], np.float32), -1, 1)
                       for a in env.agents}
            _, rewards, *_ = env.step(actions)
            total += sum(rewards.values())
        returns.append(total)
    env.close()
    return returns


def summary(returns: list[float]) -> dict[str, float]:
    r = np.asarray(returns)
    return {"mean": float(r.mean()), "ci95": float(1.96 * r.std(ddof=1) / math.sqrt(len(r))), "episodes": len(r)}


def sensitivity(run_dir: str, episodes: int, seed: int) -> dict[str, dict[str, Any]]:
    """Per trained policy: the spread of its mean action and value over the states of `episodes` sampled
    episodes, and the saturated share of its heads' first tanh layer."""
    spec = run_env(run_dir)
    policies = load_run_policies(run_dir)
    units: dict[int, tuple[str, Any, Any]] = {}  # one entry per policy module (a group's members share one)
    for agent, (policy, layout) in policies.items():
        if id(policy) not in units:
            policy.seed(seed)
            units[id(policy)] = (agent, policy, layout)
    states: dict[int, list[np.ndarray]] = {key: [] for key in units}
    env = spec.make()
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        for agent in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            policy, layout = policies[agent]
            states[id(policy)].append(obs)
            action, _ = policy.act({"obs": obs[None]}, None, True)
            env.step(np.clip(action[0], env.action_space(agent).low, env.action_space(agent).high))
    env.close()
    report = {}
    for key, (name, policy, layout) in units.items():
        batch = {"obs": np.stack(states[key])}
        report[name] = {"states": len(states[key]), "pixel_std_over_states": float(batch["obs"].std(0).mean()),
                        **policy_spread(policy, obs_tensors(batch, layout))}
    return report


def policy_spread(policy: Any, obs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """How an actor-critic policy's encoder features, mean action and value spread over the states `obs`, the share
    of its heads' first hidden units past |3| before their activation (saturated, under tanh), and its encoder's
    dead ReLU units (`dead_relu_units`)."""
    with torch.inference_mode():
        features = policy.encoder(obs)
        mean, value = policy.pi(features), policy.v(features).squeeze(-1)
        pre_pi, pre_v = policy.pi[0](features), policy.v[0](features)
        return {
            "mean_action_std": float(mean.std(0).mean()), "mean_action_min": float(mean.min()),
            "mean_action_max": float(mean.max()), "value_std": float(value.std()),
            "features_std_over_states": float(features.std(0).mean()),
            "features_mean_abs": float(features.abs().mean()),
            "pi_first_layer_saturated": float((pre_pi.abs() > 3).float().mean()),
            "v_first_layer_saturated": float((pre_v.abs() > 3).float().mean()),
            "action_std": float(policy.log_std.exp().mean()) if hasattr(policy, "log_std") else float("nan"),
            "encoder_dead_units": dead_relu_units(policy.encoder, obs),
        }


def dead_relu_units(encoder: torch.nn.Module, obs: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per ReLU of the encoder, the share of its units (a conv channel at any position, or a feature) that is 0 on
    every state: a dead unit passes no gradient and tells the heads nothing."""
    outputs: dict[str, torch.Tensor] = {}
    hooks = [module.register_forward_hook(lambda m, i, out, name=name: outputs.__setitem__(name, out))
             for name, module in encoder.named_modules() if isinstance(module, torch.nn.ReLU)]
    try:
        encoder(obs)
    finally:
        for hook in hooks:
            hook.remove()
    shares = {}
    for name, out in outputs.items():
        units = out.transpose(0, 1).reshape(out.shape[1], -1) if out.dim() == 4 else out.T  # unit x (state, position)
        shares[name] = float((units.abs().amax(dim=1) == 0).float().mean())
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blind", help="comma-separated means of the blind Gaussian policies")
    parser.add_argument("--stds", default="0.67", help="comma-separated standard deviations")
    parser.add_argument("--run", help="a pistonball run directory to check for sight")
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=10007)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    out: dict[str, object] = {"env": ENV, "seed": args.seed}
    if args.blind:
        rows = []
        for std in (float(s) for s in args.stds.split(",")):
            for mean in (float(m) for m in args.blind.split(",")):
                row = {"mean_action": mean, "std": std, **summary(blind_returns(mean, std, args.episodes, args.seed))}
                rows.append(row)
                print(f"N({mean:+.2f}, {std:.2f}): team return {row['mean']:.1f} ± {row['ci95']:.1f} "
                      f"({args.episodes} episodes)", flush=True)
        out["blind"] = rows
    if args.run:
        out["run"] = args.run
        out["sensitivity"] = sensitivity(args.run, args.episodes, args.seed)
        print(json.dumps(out["sensitivity"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
