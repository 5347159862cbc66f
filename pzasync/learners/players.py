"""Players that never learn (uniform random over legal actions, a frozen checkpoint) and the checkpoint format.

A checkpoint is one file written by `save_checkpoint`: `{"learner": "module:Class", "config": the checked
options as a dict, "agent": name, "state": learner.state_dict()}`. A `fixed` player rebuilds that learner's policy for
its own layout, loads `state["policy"]`, and always acts greedily.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np
import torch
from gymnasium import spaces

from pzasync.config.declare import option
from pzasync.core.spaces import AgentLayout, uniform_legal
from pzasync.errors import ConfigError
from pzasync.learners.base import Batch, Learner, LearnerContext, Policy
from pzasync.learners.options import LearnerOptions, Option


def save_checkpoint(path: str, learner: Learner) -> None:
    """Write a learner's full state (networks, optimiser) with what is needed to rebuild its policy."""
    cls = type(learner)
    torch.save({"learner": f"{cls.__module__}:{cls.__qualname__}", "config": dict(learner.config.items()),
                "agent": learner.ctx.agent, "state": learner.state_dict()}, path)


def load_checkpoint_policy(path: str, layout: AgentLayout) -> Policy:
    """The policy stored in a checkpoint, rebuilt for `layout` (in eval mode, gradients off)."""
    from pzasync.learners import resolve_learner

    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    cls, _ = resolve_learner(checkpoint["learner"], layout.agent)
    policy = cls.build_policy(layout, cls.Options.saved(checkpoint["config"]))
    try:
        policy.load_state_dict(checkpoint["state"]["policy"])
    except RuntimeError as exc:
        raise ConfigError(
            f"agent {layout.agent!r}: checkpoint {path!r} (saved for agent {checkpoint.get('agent')!r}) does not "
            f"fit this agent's spaces: {exc}"
        ) from exc
    policy.requires_grad_(False)
    policy.eval()
    return policy


def _sample_legal(rng: np.random.Generator, mask_row: np.ndarray, n: int) -> int:
    return uniform_legal(rng, mask_row) if mask_row.any() else int(rng.integers(n))


class RandomPolicy(Policy):
    """Uniform over legal actions; without a mask, uniform over the action space (Box within its bounds)."""

    def __init__(self, action_space: spaces.Space) -> None:
        super().__init__()
        self.action_space = action_space
        self.rng = np.random.default_rng(torch.initial_seed())

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def action_probabilities(self, obs: dict[str, np.ndarray], mask: np.ndarray | None) -> np.ndarray:
        """Uniform over the legal actions (a Discrete space's)."""
        if not isinstance(self.action_space, spaces.Discrete):
            raise NotImplementedError(f"random play over {self.action_space!r} has no probabilities per action")
        n = len(next(iter(obs.values())))
        legal = np.ones((n, int(self.action_space.n))) if mask is None else np.asarray(mask, np.float64)
        return legal / legal.sum(axis=1, keepdims=True)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        n, space, rng = len(next(iter(obs.values()))), self.action_space, self.rng
        if isinstance(space, spaces.Discrete):
            if mask is None:
                return space.start + rng.integers(space.n, size=n), {}
            return space.start + np.array([_sample_legal(rng, m, space.n) for m in mask], np.int64), {}
        if isinstance(space, spaces.MultiDiscrete):
            nvec = space.nvec.reshape(-1)
            if mask is None:
                index = rng.integers(nvec, size=(n, nvec.size))
            else:  # the mask concatenates one mask per component
                cuts = np.cumsum(nvec)[:-1]
                index = np.array([[_sample_legal(rng, part, k) for part, k in zip(np.split(m, cuts), nvec)]
                                  for m in mask], np.int64)
            return np.asarray(space.start).reshape(-1) + index.reshape(n, *space.shape), {}
        if isinstance(space, spaces.Box):
            return self._box(space, n), {}
        if isinstance(space, spaces.MultiBinary):
            return rng.integers(2, size=(n, *np.atleast_1d(space.n))).astype(np.int8), {}
        raise TypeError(f"cannot sample {space!r}")

    def _box(self, space: spaces.Box, n: int) -> np.ndarray:
        rng = self.rng
        low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        bounded = np.isfinite(low) & np.isfinite(high)
        uniform = rng.uniform(np.where(bounded, low, 0.0), np.where(bounded, high, 1.0), size=(n, *space.shape))
        out = np.where(bounded, uniform, np.clip(rng.normal(size=(n, *space.shape)), low, high))
        return out.astype(space.dtype)


class _NoUpdates(Learner):
    """A player: builds its policy, never learns (the runtime starts no learner process for it)."""

    learns = False

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        self._policy = self.build_policy(ctx.layout, self.config)

    @property
    def policy(self) -> Policy:
        return self._policy

    def update(self, batch: Batch) -> dict[str, float]:
        raise RuntimeError(f"{type(self).__name__} does not learn; the runtime never feeds it batches")


class RandomPlayer(_NoUpdates):
    """`"random"`: uniform over legal actions, seeded by the runner (`Policy.seed`) for reproducible games."""

    defaults: ClassVar[dict[str, Any]] = {}

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
        return RandomPolicy(layout.action_space)


class GreedyPolicy(Policy):
    """A frozen policy that always acts greedily (explore is ignored) and stores no extras."""

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner = inner

    def seed(self, seed: int) -> None:
        if hasattr(self.inner, "seed"):
            self.inner.seed(seed)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        actions, _ = self.inner.act(obs, mask, False)
        return actions, {}


@dataclass(kw_only=True, eq=False)
class FixedOptions(LearnerOptions):
    """The `fixed` player's one option."""

    checkpoint: str | os.PathLike | None = option(None, "The checkpoint file whose policy plays (required).",
                                                  Option((str, os.PathLike), optional=True, what="a file path"))

    def check_together(self, agent: str, learner: str) -> None:
        if not self.checkpoint:
            raise ConfigError(f"agent {agent!r}: the 'fixed' player needs {{'checkpoint': path}}")
        if not os.path.isfile(self.checkpoint):
            raise ConfigError(f"agent {agent!r}: checkpoint {str(self.checkpoint)!r} does not exist")


class FixedPlayer(_NoUpdates):
    """`("fixed", {"checkpoint": path})`: the greedy policy of a saved checkpoint, never updated."""

    Options = FixedOptions

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
        return GreedyPolicy(load_checkpoint_policy(str(cls.checked(layout.agent, config).checkpoint), layout))
