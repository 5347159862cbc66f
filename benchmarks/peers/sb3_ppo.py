"""The SB3 + SuperSuit peer: PPO with one policy shared by every agent, for a wall budget, exported as TorchScript.

PettingZoo's Stable-Baselines3 tutorials' path: the env's parallel API, reset with the seed, turned into a
vector env by SuperSuit (`pettingzoo_env_to_vec_env_v1`: one vector slot per agent; `concat_vec_envs_v1`: K
copies side by side), and trained by SB3's `PPO` with its `MlpPolicy` (pi and vf 64-64 tanh), the tutorials'
`learning_rate=1e-3, batch_size=256` and SB3's defaults otherwise. Every agent's observation goes through the
same network, so its parameters are shared by all agents. One vector slot step is one agent step, so SB3's
`num_timesteps` counts agent steps.

Runs in its own virtualenv (benchmarks/peers/setup_sb3.sh) and imports nothing from pzasync:

    VENV/bin/python benchmarks/peers/sb3_ppo.py mpe2.simple_spread_v3 --env-arg N=3 --seconds 120 --seed 0 \\
        --out /tmp/pzpeers/spread_s0

training stops at the first vector step past `--seconds` of `learn()` (a callback), whatever the rollout
has collected by then is not trained on. OUT gets `policy.pt` (TorchScript: a batch of observations as the
env gives them -> action logits, the greedy action their argmax; its extra file `peer.json` holds the observation
shape and action count it was made for) and `run.json` (the peer's versions and
settings, agent steps, wall and CPU seconds, and how often the exported module's argmax agreed with SB3's own
`predict(deterministic=True)` on the observations of a short greedy rollout).
Score it in pzasync's environment with benchmarks/peers/score.py.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pettingzoo
import stable_baselines3
import supersuit as ss
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed

#: PettingZoo's SB3 tutorials' PPO settings (the rest are SB3's defaults, recorded in run.json).
TUTORIAL_PPO = {"learning_rate": 1e-3, "batch_size": 256}
#: SB3 settings recorded beside the tutorial's, as the model holds them after construction.
RECORDED = ("learning_rate", "n_steps", "batch_size", "n_epochs", "gamma", "gae_lambda", "clip_range", "ent_coef",
            "vf_coef", "max_grad_norm", "normalize_advantage")


class WallBudget(BaseCallback):
    """Stops `learn()` at the first vector step after `seconds` of wall time."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.started = time.monotonic()

    def _on_training_start(self) -> None:
        self.started = time.monotonic()

    def _on_step(self) -> bool:
        return time.monotonic() - self.started < self.seconds


class Logits(torch.nn.Module):
    """SB3's actor path of an `ActorCriticPolicy`: observation batch -> action logits (preprocessing included)."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.policy.extract_features(obs, self.policy.pi_features_extractor)
        return self.policy.action_net(self.policy.mlp_extractor.forward_actor(features))


def parallel_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """`module.parallel_env(**kwargs)` for an id like `mpe2.simple_spread_v3` or `pettingzoo.sisl.pursuit_v5`."""
    return importlib.import_module(env_id).parallel_env(**kwargs)


def export(model: PPO, env_id: str, kwargs: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    """Write the greedy actor as TorchScript and check it against SB3's `predict` on a short greedy rollout."""
    module = Logits(model.policy).eval()
    env = parallel_env(env_id, kwargs)
    observations, _ = env.reset(seed=seed + 777)
    rows = []
    for _ in range(50):
        if not env.agents:
            observations, _ = env.reset()
        batch = np.stack([observations[a] for a in env.agents])
        rows.append(batch)
        actions, _ = model.predict(batch, deterministic=True)
        observations, *_ = env.step(dict(zip(env.agents, (int(a) for a in actions))))
    env.close()
    sample = torch.as_tensor(np.concatenate(rows), dtype=torch.float32)
    with torch.no_grad():
        traced = torch.jit.trace(module, sample[:4])
    meta = {"obs_shape": list(sample.shape[1:]), "actions": int(model.action_space.n), "env": env_id,
            "env_kwargs": kwargs, "output": "logits"}
    torch.jit.save(traced, str(out / "policy.pt"), _extra_files={"peer.json": json.dumps(meta)})
    loaded = torch.jit.load(str(out / "policy.pt"))
    with torch.no_grad():
        ours = loaded(sample).argmax(dim=1).numpy()
    theirs, _ = model.predict(sample.numpy(), deterministic=True)
    return {"observations": len(sample), "agreement": float(np.mean(ours == theirs))}


def versions() -> dict[str, str]:
    """The peer's package versions."""
    import mpe2

    return {"python": platform.python_version(), "torch": torch.__version__,
            "stable_baselines3": stable_baselines3.__version__, "supersuit": ss.__version__,
            "pettingzoo": pettingzoo.__version__, "mpe2": getattr(mpe2, "__version__", "?"),
            "gymnasium": gymnasium.__version__, "numpy": np.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env", help="module of a PettingZoo parallel env, e.g. mpe2.simple_spread_v3")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument of the env (value read as a Python literal)")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall budget of learn()")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--copies", type=int, default=8, help="env copies (concat_vec_envs_v1), the tutorials' 8")
    parser.add_argument("--num-cpus", type=int, default=1,
                        help="concat_vec_envs_v1's processes (1: every copy in this process)")
    parser.add_argument("--out", required=True, type=Path, help="folder for policy.pt and run.json")
    args = parser.parse_args()
    kwargs = {}
    for item in args.env_arg:
        key, _, value = item.partition("=")
        kwargs[key] = ast.literal_eval(value)
    args.out.mkdir(parents=True, exist_ok=True)

    env = parallel_env(args.env, kwargs)
    env.reset(seed=args.seed)
    agents = len(env.possible_agents)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    vec = ss.concat_vec_envs_v1(vec, args.copies, num_cpus=args.num_cpus, base_class="stable_baselines3")
    set_random_seed(args.seed)  # PPO(seed=...) would call ConcatVecEnv.seed, which SuperSuit does not have
    model = PPO("MlpPolicy", vec, verbose=0, device="cpu", **TUTORIAL_PPO)
    budget = WallBudget(args.seconds)
    cpu0, wall0 = time.process_time(), time.monotonic()
    model.learn(total_timesteps=10**12, callback=budget)
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    vec.close()
    check = export(model, args.env, kwargs, args.seed, args.out)
    report = {
        "peer": "stable-baselines3 PPO + SuperSuit, one policy shared by every agent",
        "env": args.env, "env_kwargs": kwargs, "agents": agents, "seed": args.seed, "budget_s": args.seconds,
        "versions": versions(),
        "settings": {"policy": "MlpPolicy", "net_arch": str(model.policy.net_arch),
                     "activation": model.policy.activation_fn.__name__, "copies": args.copies,
                     "num_cpus": args.num_cpus, "vector_slots": model.n_envs, "torch_threads": torch.get_num_threads(),
                     **{k: _plain(getattr(model, k)) for k in RECORDED}},
        "agent_steps": int(model.num_timesteps), "rollouts_trained": int(model._n_updates) // model.n_epochs,
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "export_check": check,
    }
    (args.out / "run.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("env", "seed", "agent_steps", "rollouts_trained", "wall_s", "cpu_s",
                                              "export_check")}))


def _plain(value: Any) -> Any:
    """A setting as JSON: SB3 keeps clip_range and learning_rate as schedules."""
    if callable(value):
        value = value(1.0)
    return value if isinstance(value, (int, float, bool, str)) else str(value)


if __name__ == "__main__":
    main()
