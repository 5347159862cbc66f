"""The SB3 + SuperSuit peer: PPO with one policy shared by every agent, for a wall budget, exported as TorchScript.

PettingZoo's Stable-Baselines3 tutorials' path: the env's parallel API, reset with the seed, turned into a
vector env by SuperSuit (`pettingzoo_env_to_vec_env_v1`: one vector slot per agent; `concat_vec_envs_v1`: K
copies side by side), and trained by SB3's `PPO` with its `MlpPolicy` (pi and vf 64-64 tanh; `CnnPolicy` for
images), with the PPO settings and vector env of the env's own tutorial (`TUTORIALS`: pistonball, KAZ,
multiwalker), else waterworld's (`learning_rate=1e-3, batch_size=256`, 8 copies), and SB3's defaults
otherwise. Every agent's observation goes through the same network, so its parameters are shared by all agents.
One vector slot step is one agent step, so SB3's `num_timesteps` counts agent steps.

Runs in its own virtualenv (benchmarks/peers/setup_sb3.sh) and imports nothing from pzasync:

    VENV/bin/python benchmarks/peers/sb3_ppo.py mpe2.simple_spread_v3 --env-arg N=3 --seconds 120 --seed 0 \\
        --out /tmp/pzpeers/spread_s0
    VENV/bin/python benchmarks/peers/sb3_ppo.py pettingzoo.butterfly.pistonball_v6 \\
        --wrapper color_reduction_v0,mode=full --wrapper resize_v1,x_size=64,y_size=64 \\
        --wrapper frame_stack_v1,stack_size=3 --seconds 600 --out /tmp/pzpeers/pistonball_s0

Image observations (what SB3's `is_image_space` calls one: uint8 in [0, 255], 3 dimensions) train SB3's
`CnnPolicy` (its NatureCNN, images scaled by 1/255), as the pistonball tutorial does; other observations,
pursuit's 7x7x3 float grid among them, `MlpPolicy` on the flattened array. `--wrapper` takes SuperSuit wrappers
written as pzasync writes them, so the tutorial's preprocessing (grey, resized, 3 frames stacked) can be the
pzasync recipe's (64x64; the tutorial's is 84x84) and the evaluation env applies the same (score.py reads them
from run.json). `--ppo KEY=VALUE` overrides a PPO setting.

Training stops at the first vector step past `--seconds` of `learn()` (a callback); what the unfinished rollout
has collected by then is not trained on. OUT gets `policy.pt` (TorchScript: a batch of observations as the env
gives them -> action logits, the greedy action their argmax, or for Box actions the mean, clipped to the bounds;
its extra file `peer.json` holds the observation shape, the action space it was made for and a Box action's
log_std), `model.zip` (SB3's own save of the trained model, to export again) and `run.json` (the
peer's versions and settings, agent steps, wall and CPU seconds, and how often the exported module's action
agreed with SB3's own `predict(deterministic=True)` on the observations of a short greedy rollout).
Score it in pzasync's environment with benchmarks/peers/score.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pettingzoo
import stable_baselines3
import supersuit as ss
import torch
from specs import parse_spec
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import set_random_seed


@dataclass(frozen=True)
class Tutorial:
    """One of PettingZoo's SB3 tutorials (tutorials/SB3/ENV/sb3_ENV_vector.py): its PPO settings over SB3's
    defaults (the rest recorded in run.json), `copies` env copies in `num_cpus` processes (`concat_vec_envs_v1`)."""

    source: str
    ppo: dict[str, Any]
    copies: int = 8
    num_cpus: int = 1


#: An env without a tutorial gets waterworld's, the tutorials' vector-observation example, with every copy in the
#: training process.
WATERWORLD = Tutorial("tutorials/SB3/waterworld/sb3_waterworld_vector.py", {"learning_rate": 1e-3, "batch_size": 256})
#: The envs with a tutorial of their own, by the last part of their id.
TUTORIALS = {
    "pistonball_v6": Tutorial("tutorials/SB3/pistonball/sb3_pistonball_vector.py",
                              {"gamma": 0.95, "n_steps": 256, "ent_coef": 0.0905168, "learning_rate": 0.00062211,
                               "vf_coef": 0.042202, "max_grad_norm": 0.9, "gae_lambda": 0.99, "n_epochs": 5,
                               "clip_range": 0.3, "batch_size": 256}, copies=4, num_cpus=2),
    "knights_archers_zombies_v11": Tutorial("tutorials/SB3/kaz/sb3_kaz_vector.py", {"batch_size": 256}),
    "multiwalker_v9": Tutorial("tutorials/SB3/multiwalker/sb3_multiwalker_vector.py",
                               {"learning_rate": 1e-3, "batch_size": 256}, num_cpus=2),
}


def tutorial_for(env_id: str) -> Tutorial:
    """The SB3 tutorial of an env id (matched by its last dotted part), else waterworld's."""
    return TUTORIALS.get(env_id.rsplit(".", 1)[-1], WATERWORLD)


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


class Actor(torch.nn.Module):
    """SB3's actor path of an `ActorCriticPolicy`: observation batch -> action logits, or the mean of a Box
    action's Gaussian (preprocessing included).

    `channels_last`: the env gives images height x width x channels, which SB3's `VecTransposeImage` turned
    channels-first for the network; the module does the same, so it takes observations as the env gives them."""

    def __init__(self, policy: Any, channels_last: bool) -> None:
        super().__init__()
        self.policy = policy
        self.channels_last = channels_last

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            obs = obs.permute(0, 3, 1, 2)
        features = self.policy.extract_features(obs, self.policy.pi_features_extractor)
        return self.policy.action_net(self.policy.mlp_extractor.forward_actor(features))


#: Envs that draw their image observations only when they render (PettingZoo 1.27; pzasync's
#: core/drawn_observations.py finds them): made with render_mode="rgb_array" unless a render mode is given.
DRAWN_ONLY_WHEN_RENDERING = ("pettingzoo.butterfly.pistonball_v6", "pettingzoo.butterfly.cooperative_pong_v6")


def parallel_env(env_id: str, kwargs: dict[str, Any], wrappers: list[str]) -> Any:
    """`module.parallel_env(**kwargs)` for an id like `mpe2.simple_spread_v3` or `pettingzoo.butterfly.pistonball_v6`,
    with SuperSuit's `wrappers` (pzasync's wrapper specs, e.g. "color_reduction_v0,mode=B") applied in order."""
    if env_id in DRAWN_ONLY_WHEN_RENDERING:
        kwargs = {"render_mode": "rgb_array", **kwargs}
    env = importlib.import_module(env_id).parallel_env(**kwargs)
    for text in wrappers:
        name, options = parse_spec(text)
        env = getattr(ss, name)(env, **options)
    return env


def export(model: PPO, env_id: str, kwargs: dict[str, Any], wrappers: list[str], seed: int,
           out: Path) -> dict[str, Any]:
    """Write the greedy actor as TorchScript and check it against SB3's `predict` on a short greedy rollout.

    Discrete actions: the module gives logits, the action their argmax. Box actions: it gives the Gaussian's
    mean, the action that clipped to the space's bounds (SB3's `predict(deterministic=True)` does the same);
    peer.json keeps the Gaussian's state-independent `log_std`, so the evaluator can also sample as SB3 trains."""
    env = parallel_env(env_id, kwargs, wrappers)
    shape = env.observation_space(env.possible_agents[0]).shape
    channels_last = len(shape) == 3 and tuple(model.observation_space.shape) == (shape[2], shape[0], shape[1])
    module = Actor(model.policy, channels_last).eval()
    discrete = isinstance(model.action_space, gymnasium.spaces.Discrete)
    observations, _ = env.reset(seed=seed + 777)
    rows = []
    for _ in range(50):
        if not env.agents:
            observations, _ = env.reset()
        batch = np.stack([observations[a] for a in env.agents])
        rows.append(batch)
        actions, _ = model.predict(batch, deterministic=True)
        observations, *_ = env.step({a: int(x) if discrete else x for a, x in zip(env.agents, actions)})
    env.close()
    sample = torch.as_tensor(np.concatenate(rows), dtype=torch.float32)
    with torch.no_grad():
        traced = torch.jit.trace(module, sample[:4])
    meta = {"obs_shape": list(sample.shape[1:]), "env": env_id, "env_kwargs": kwargs, "wrappers": wrappers}
    if discrete:
        meta.update(output="logits", actions=int(model.action_space.n))
    else:
        meta.update(output="mean", action_shape=list(model.action_space.shape),
                    low=model.action_space.low.tolist(), high=model.action_space.high.tolist(),
                    log_std=model.policy.log_std.detach().cpu().reshape(-1).tolist())
    torch.jit.save(traced, str(out / "policy.pt"), _extra_files={"peer.json": json.dumps(meta)})
    loaded = torch.jit.load(str(out / "policy.pt"))
    with torch.no_grad():
        output = loaded(sample).numpy()
    theirs, _ = model.predict(sample.numpy(), deterministic=True)
    if discrete:
        agree = output.argmax(axis=1) == theirs
    else:
        ours = np.clip(output, model.action_space.low, model.action_space.high)
        agree = np.isclose(ours, theirs, atol=1e-5).reshape(len(ours), -1).all(axis=1)
    return {"observations": len(sample), "agreement": float(np.mean(agree))}


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
    parser.add_argument("--wrapper", action="append", default=[], metavar="NAME[,KEY=VALUE...]",
                        help="SuperSuit wrapper as pzasync writes them (repeatable, applied in order)")
    parser.add_argument("--policy", default="auto", choices=("auto", "MlpPolicy", "CnnPolicy"),
                        help="SB3 policy; auto: CnnPolicy for image observations (uint8, 3 dimensions), "
                             "else MlpPolicy")
    parser.add_argument("--ppo", action="append", default=[], metavar="KEY=VALUE",
                        help="PPO keyword argument over the tutorials' (value read as a Python literal)")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall budget of learn()")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--copies", type=int, default=None,
                        help="env copies (concat_vec_envs_v1); default: the env's tutorial's (8; pistonball 4)")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="concat_vec_envs_v1's processes (1: every copy in this process); default: the "
                             "env's tutorial's")
    parser.add_argument("--out", required=True, type=Path, help="folder for policy.pt and run.json")
    args = parser.parse_args()
    kwargs = parse_spec(",".join(["env", *args.env_arg]))[1]
    tutorial = tutorial_for(args.env)
    ppo = {**tutorial.ppo, **parse_spec(",".join(["ppo", *args.ppo]))[1]}
    copies = tutorial.copies if args.copies is None else args.copies
    num_cpus = tutorial.num_cpus if args.num_cpus is None else args.num_cpus
    args.out.mkdir(parents=True, exist_ok=True)

    env = parallel_env(args.env, kwargs, args.wrapper)
    env.reset(seed=args.seed)
    policy = args.policy
    if policy == "auto":
        image = is_image_space(env.observation_space(env.possible_agents[0]), check_channels=False)
        policy = "CnnPolicy" if image else "MlpPolicy"
    agents = len(env.possible_agents)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    vec = ss.concat_vec_envs_v1(vec, copies, num_cpus=num_cpus, base_class="stable_baselines3")
    set_random_seed(args.seed)  # PPO(seed=...) would call ConcatVecEnv.seed, which SuperSuit does not have
    model = PPO(policy, vec, verbose=0, device="cpu", **ppo)
    figures = learn_within(model, args.seconds)
    vec.close()
    model.save(args.out / "model.zip")
    check = export(model, args.env, kwargs, args.wrapper, args.seed, args.out)
    write_run(args.out, {
        "peer": "stable-baselines3 PPO + SuperSuit, one policy shared by every agent",
        "env": args.env, "env_kwargs": kwargs, "wrappers": args.wrapper, "agents": agents, "seed": args.seed,
        "budget_s": args.seconds,
        "versions": versions(),
        "settings": {"policy": policy, "ppo_given": ppo, "copies": copies, "num_cpus": num_cpus,
                     "tutorial": tutorial.source, "vector_slots": model.n_envs, **model_settings(model)},
        **figures, "export_check": check,
    })


def learn_within(model: Any, seconds: float) -> dict[str, Any]:
    """Train `model` for `seconds` of wall time (`WallBudget`); its agent steps, rollouts trained, wall and CPU
    seconds."""
    cpu0, wall0 = time.process_time(), time.monotonic()
    model.learn(total_timesteps=10**12, callback=WallBudget(seconds))
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    return {"agent_steps": int(model.num_timesteps), "rollouts_trained": int(model._n_updates) // model.n_epochs,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def model_settings(model: Any) -> dict[str, Any]:
    """The settings a trained SB3 model holds (its network and the PPO settings in RECORDED), for run.json."""
    return {"net_arch": str(model.policy.net_arch), "activation": model.policy.activation_fn.__name__,
            "features_extractor": type(model.policy.features_extractor).__name__,
            "torch_threads": torch.get_num_threads(), **{k: _plain(getattr(model, k)) for k in RECORDED}}


def write_run(out: Path, report: dict[str, Any]) -> None:
    """OUT/run.json, and its main figures on one line of stdout."""
    (out / "run.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("env", "seed", "agent_steps", "rollouts_trained", "wall_s", "cpu_s",
                                              "export_check")}))


def _plain(value: Any) -> Any:
    """A setting as JSON: SB3 keeps clip_range and learning_rate as schedules."""
    if callable(value):
        value = value(1.0)
    return value if isinstance(value, (int, float, bool, str)) else str(value)


if __name__ == "__main__":
    main()
