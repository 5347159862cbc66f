"""The SB3 peer for turn-based games with action masks: MaskablePPO, one policy for every seat, as TorchScript.

PettingZoo's "SB3: Action Masked PPO for Connect Four" tutorial's path (tutorials/SB3/connect_four): the AEC env
becomes a Gymnasium-like env whose every step is the turn of whichever agent acts, with the observation of the
agent to act next and the reward, termination and truncation of the agent that just acted; sb3-contrib's
`ActionMasker` hands SB3 the acting agent's legal actions, and `MaskablePPO` with its `MaskableActorCriticPolicy`
(pi and vf 64-64 tanh over the flattened observation, SB3's defaults otherwise: the tutorial sets none) learns one
policy for both seats. One env step is one agent step, so SB3's `num_timesteps` counts agent steps.

The tutorial's wrapper subclasses PettingZoo's `BaseWrapper` alone and so refuses Gymnasium above 0.29.1, whose
wrappers take only a `gymnasium.Env`; here it is a `gymnasium.Env` as well, and nothing else is changed.

Runs in the SB3 peer's virtualenv (benchmarks/peers/setup_sb3.sh, which installs sb3-contrib) and imports nothing
from pzasync:

    VENV/bin/python benchmarks/peers/sb3_maskable.py pettingzoo.classic.connect_four_v3 --seconds 600 --seed 0 \\
        --out /tmp/pzpeers/c4_s0

OUT gets `policy.pt` (TorchScript: a batch of observations, without the action mask, -> action logits; pzasync's
evaluator masks the illegal ones and takes the argmax, as `predict(..., action_masks=..., deterministic=True)` does)
and `run.json` (versions, settings, agent steps, wall and CPU seconds, and how often the exported module's masked
argmax agreed with MaskablePPO's own greedy action on a short rollout). Score it with benchmarks/peers/score.py,
which plays it against the env's recipe yardstick (one_ply on connect_four, random on leduc) seat by seat.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pettingzoo.utils
import sb3_contrib
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.wrappers import ActionMasker
from sb3_ppo import Actor, learn_within, model_settings, versions, write_run
from specs import parse_spec
from stable_baselines3.common.utils import set_random_seed


class TurnTakingEnv(pettingzoo.utils.BaseWrapper, gymnasium.Env):
    """The tutorial's `SB3ActionMaskWrapper`: an AEC env as one Gymnasium env whose steps are the agents' turns."""

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """Reset, and give the spaces as attributes (SB3 expects one space, not one per agent)."""
        super().reset(seed, options)
        self.observation_space = super().observation_space(self.possible_agents[0])["observation"]
        self.action_space = super().action_space(self.possible_agents[0])
        return self.observe(self.agent_selection), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        """The next agent's observation; the reward, termination, truncation and info of the agent that acted."""
        acting = self.agent_selection
        super().step(action)
        return (self.observe(self.agent_selection), self._cumulative_rewards[acting], self.terminations[acting],
                self.truncations[acting], self.infos[acting])

    def observe(self, agent: str) -> np.ndarray:
        """The observation alone, without its action mask."""
        return super().observe(agent)["observation"]

    def action_mask(self) -> np.ndarray:
        """The legal actions of the agent to act."""
        return super().observe(self.agent_selection)["action_mask"]


def make_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """`module.env(**kwargs)` (the AEC env) for an id like `pettingzoo.classic.connect_four_v3`."""
    return importlib.import_module(env_id).env(**kwargs)


def export(model: MaskablePPO, env_id: str, kwargs: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    """Write the greedy actor as TorchScript and check its masked argmax against `model.predict` on a rollout."""
    env = make_env(env_id, kwargs)
    env.reset(seed=seed + 777)
    rows, masks = [], []
    for _agent in env.agent_iter(max_iter=200):
        observation, _reward, termination, truncation, _info = env.last()
        if termination or truncation:
            env.reset()
            continue
        rows.append(observation["observation"])
        masks.append(observation["action_mask"].astype(bool))
        action, _ = model.predict(observation["observation"], action_masks=observation["action_mask"],
                                  deterministic=True)
        env.step(int(action))
    env.close()
    sample = torch.as_tensor(np.stack(rows), dtype=torch.float32)
    module = Actor(model.policy, channels_last=False).eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, sample[:4])
    meta = {"obs_shape": list(sample.shape[1:]), "env": env_id, "env_kwargs": kwargs, "wrappers": [],
            "output": "logits", "actions": int(model.action_space.n)}
    torch.jit.save(traced, str(out / "policy.pt"), _extra_files={"peer.json": json.dumps(meta)})
    loaded = torch.jit.load(str(out / "policy.pt"))
    legal = torch.as_tensor(np.stack(masks))
    with torch.no_grad():
        ours = loaded(sample).masked_fill(~legal, float("-inf")).argmax(dim=1).numpy()
    theirs, _ = model.predict(sample.numpy(), action_masks=legal.numpy(), deterministic=True)
    return {"observations": len(sample), "agreement": float(np.mean(ours == theirs))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env", help="module of a PettingZoo AEC env with action masks, e.g. "
                                    "pettingzoo.classic.connect_four_v3")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument of the env (value read as a Python literal)")
    parser.add_argument("--ppo", action="append", default=[], metavar="KEY=VALUE",
                        help="MaskablePPO keyword argument over SB3's defaults (value read as a Python literal)")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall budget of learn()")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=Path, help="folder for policy.pt and run.json")
    args = parser.parse_args()
    kwargs = parse_spec(",".join(["env", *args.env_arg]))[1]
    ppo = parse_spec(",".join(["ppo", *args.ppo]))[1]
    args.out.mkdir(parents=True, exist_ok=True)

    env = TurnTakingEnv(make_env(args.env, kwargs))
    env.reset(seed=args.seed)  # gives the wrapper its spaces
    agents = len(env.possible_agents)
    env = ActionMasker(env, lambda wrapped: wrapped.action_mask())
    set_random_seed(args.seed)
    model = MaskablePPO(MaskableActorCriticPolicy, env, verbose=0, device="cpu", seed=args.seed, **ppo)
    figures = learn_within(model, args.seconds)
    env.close()
    check = export(model, args.env, kwargs, args.seed, args.out)
    write_run(args.out, {
        "peer": "sb3-contrib MaskablePPO, one policy playing every seat (PettingZoo's SB3 connect-four tutorial)",
        "env": args.env, "env_kwargs": kwargs, "wrappers": [], "agents": agents, "seed": args.seed,
        "budget_s": args.seconds,
        "versions": {**versions(), "sb3_contrib": sb3_contrib.__version__},
        "settings": {"policy": "MaskableActorCriticPolicy", "ppo_given": ppo, "copies": 1, **model_settings(model)},
        **figures, "export_check": check,
    })

if __name__ == "__main__":
    main()
