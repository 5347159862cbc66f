"""A peer's exported policy as a pzasync player: one TorchScript module acting greedily for every agent.

The peers (benchmarks/peers/sb3_ppo.py, agilerl_train.py) export their trained actor as TorchScript: a batch of
observations, as the env gives them, -> action logits, with an extra file `peer.json` naming the observation shape
and action count it was made for. Here it becomes a `pzasync.Policy`, so pzasync's evaluator scores the peer exactly
as it scores pzasync's own trained policies (greedy, batched over env copies, the same seeds and scoring mode):

    policies = peer_policies("policy.pt", "mpe2.simple_spread_v3")   # agent -> (one shared policy, layout)
    report = pzasync.evaluate(policies, env="mpe2.simple_spread_v3", episodes=50, seed=10_007)

`PeerPolicy` is the same as a `module:callable` player spec, built per agent from its layout, the file named by
the environment variable PZASYNC_PEER_POLICY (`PYTHONPATH=benchmarks/peers pzasync eval RUN --vs
player:PeerPolicy`). Observations are taken as the env (with its wrappers) gives them: whatever preprocessing
the peer trained with must be in the env spec's wrappers or in the exported module.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pzasync import AgentLayout, EnvSpec, Policy, env_layouts
from pzasync.core.spaces import probe_info_masks
from pzasync.errors import ConfigError

#: The environment variable that names the TorchScript file of `PeerPolicy`.
POLICY_VARIABLE = "PZASYNC_PEER_POLICY"


class TorchScriptPolicy(Policy):
    """A TorchScript module acting for any number of agents at once: observation batch -> action logits
    (peer.json's `"output": "logits"`, the default), or the mean of a Box action (`"output": "mean"`).

    Logits: `explore=False` takes the argmax of the legal actions' logits, `explore=True` samples from them.
    Mean: `explore=False` takes the mean, `explore=True` draws from the Gaussian of peer.json's `log_std` (the
    peer's state-independent spread, as SB3's PPO samples in training); either is clipped to the bounds
    (peer.json's `low`/`high`)."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        extra = {"peer.json": ""}
        try:
            with warnings.catch_warnings():  # torch 2.13 marks TorchScript deprecated; the peers export it
                warnings.simplefilter("ignore", DeprecationWarning)
                self.module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
        except (RuntimeError, ValueError, OSError) as exc:
            raise ConfigError(f"peer policy {str(path)!r}: cannot load it as TorchScript ({exc})") from exc
        self.module.eval()
        self.path = str(path)
        self.meta: dict[str, Any] = json.loads(extra["peer.json"]) if extra["peer.json"] else {}
        self.generator = torch.Generator().manual_seed(0)
        self.continuous = self.meta.get("output", "logits") == "mean"
        if self.continuous:
            self.low = np.asarray(self.meta["low"], np.float32)
            self.high = np.asarray(self.meta["high"], np.float32)
            spread = self.meta.get("log_std")
            self.std = None if spread is None else torch.as_tensor(spread, dtype=torch.float32).exp()

    def check_layout(self, layout: AgentLayout) -> None:
        """Refuse an agent whose spaces differ from those the module was exported for (as far as peer.json says)."""
        if layout.nested_obs:
            raise ConfigError(f"agent {layout.agent!r}: nested observation space {layout.obs_space}; the peer "
                              f"policy {self.path!r} takes one array")
        shape, actions = self.meta.get("obs_shape"), self.meta.get("actions")
        if shape is not None and tuple(shape) != tuple(layout.obs_space.shape):
            raise ConfigError(f"agent {layout.agent!r}: observation shape {tuple(layout.obs_space.shape)}, but the "
                              f"peer policy {self.path!r} was exported for {tuple(shape)}")
        if self.continuous:
            if tuple(self.meta.get("action_shape", ())) != tuple(getattr(layout.action_space, "shape", None) or ()):
                raise ConfigError(f"agent {layout.agent!r}: action space {layout.action_space}, but the peer policy "
                                  f"{self.path!r} gives actions of shape {tuple(self.meta.get('action_shape', ()))}")
            return
        n = getattr(layout.action_space, "n", None)
        if n is None or (actions is not None and int(actions) != int(n)):
            raise ConfigError(f"agent {layout.agent!r}: action space {layout.action_space}, but the peer policy "
                              f"{self.path!r} picks one of {actions} discrete actions")

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        """Actions of a batch of observations (`{"obs": array[B, ...]}`), illegal ones masked out (discrete)."""
        return self._act(obs, mask, explore, None), {}

    def act_seeded(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, seeds: Sequence[int],
                   memory: np.ndarray | None = None) -> tuple[np.ndarray, None]:
        """`Policy.act_seeded` with one forward: each row drawn from its own generator seeded `seeds[i]`."""
        return self._act(obs, mask, True, [torch.Generator().manual_seed(int(s)) for s in seeds]), None

    def action_probabilities(self, obs: dict[str, np.ndarray], mask: np.ndarray | None) -> np.ndarray:
        """The softmax of the legal actions' logits, what `explore=True` samples from (a logits module's)."""
        if self.continuous:
            raise NotImplementedError(f"peer policy {self.path!r} gives Box actions, not probabilities")
        with torch.inference_mode():
            return torch.softmax(self._masked(self._forward(obs), mask), dim=1).numpy()

    def _forward(self, obs: dict[str, np.ndarray]) -> torch.Tensor:
        """The module's output for a batch: logits, or a Box action's mean."""
        return self.module(torch.as_tensor(np.asarray(obs["obs"]), dtype=torch.float32))

    @staticmethod
    def _masked(logits: torch.Tensor, mask: np.ndarray | None) -> torch.Tensor:
        """Illegal actions' logits set to -inf."""
        if mask is None:
            return logits
        return logits.masked_fill(~torch.as_tensor(np.asarray(mask, bool)), float("-inf"))

    def _act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool,
             generators: list[torch.Generator] | None) -> np.ndarray:
        """`act`'s actions; `generators`, one per row, draw each row apart (else `self.generator` draws all)."""
        with torch.inference_mode():
            output = self._forward(obs)
            if self.continuous:
                if explore:
                    if self.std is None:
                        raise ConfigError(f"peer policy {self.path!r} was exported without its log_std (peer.json), "
                                          f"so it cannot sample its actions; export it again")
                    if generators is None:
                        noise = torch.randn(output.shape, generator=self.generator)
                    else:
                        noise = torch.cat([torch.randn((1, *output.shape[1:]), generator=g) for g in generators])
                    output = output + noise * self.std.reshape(output.shape[1:])
                return np.clip(output.numpy(), self.low, self.high).astype(np.float32)
            logits = self._masked(output, mask)
            if explore:
                probs = torch.softmax(logits, dim=1)
                if generators is None:
                    actions = torch.multinomial(probs, 1, generator=self.generator)[:, 0]
                else:
                    actions = torch.cat([torch.multinomial(probs[i:i + 1], 1, generator=g)[:, 0]
                                         for i, g in enumerate(generators)])
            else:
                actions = logits.argmax(dim=1)
        return actions.numpy().astype(np.int64)

    def seed(self, seed: int) -> None:
        """Seed the sampling of `explore=True`."""
        self.generator.manual_seed(seed)


class PeerPolicy(TorchScriptPolicy):
    """`module:callable` form of `TorchScriptPolicy` for one agent: the file from $PZASYNC_PEER_POLICY."""

    def __init__(self, layout: AgentLayout) -> None:
        path = os.environ.get(POLICY_VARIABLE)
        if not path:
            raise ConfigError(f"player:PeerPolicy needs the environment variable {POLICY_VARIABLE} set to a "
                              f"TorchScript file")
        super().__init__(path)
        self.check_layout(layout)


def peer_policies(path: str | os.PathLike, env: Any) -> dict[str, tuple[TorchScriptPolicy, AgentLayout]]:
    """Every agent of `env` (an env id or `EnvSpec`) -> (one shared `TorchScriptPolicy` of `path`, its layout),
    the dict `pzasync.evaluate(..., env=env)` takes: shared parameters, one batched forward for all agents."""
    spec = env if isinstance(env, EnvSpec) else EnvSpec.of(env)
    probe = spec.make()
    try:
        layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    finally:
        probe.close()
    policy = TorchScriptPolicy(path)
    for layout in layouts.values():
        policy.check_layout(layout)
    return {agent: (policy, layout) for agent, layout in layouts.items()}
