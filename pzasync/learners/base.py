"""The learner plug-in API (SPEC section 4): `Learner` trains, `Policy` acts, one flat vector links them.

A learner runs in its own process (async) or inline (sequential). It builds the policy module with
`build_policy`, which the actor also calls to get an identical module that it refreshes from the agent's
policy slot. Batches arrive as dicts of numpy arrays with the keys of `SharedRingBuffer` rows:
`obs` (or `obs/<leaf>` for nested observations), `action`, `reward`, `next_obs` (`next_obs/<leaf>`),
`terminated`, `truncated`, `action_mask` and `next_action_mask` where the env has masks, `policy_version`,
and the extras the learner declared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ..spaces import AgentLayout

Batch = dict[str, np.ndarray]


class Policy(torch.nn.Module):
    """What the actor runs: `act(obs, mask, explore) -> (actions, extras)`, batched over the first dimension.

    `obs` is a dict of arrays keyed like the buffer's `obs` fields (`{"obs": array}` for flat observations),
    `mask` a boolean array or None. `extras` (e.g. `log_prob`, `value`) are stored with each transition.
    Everything in `state_dict()` that is a floating tensor travels through the policy slot.
    """

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        raise NotImplementedError

    def on_actor_steps(self, agent_steps: int) -> None:
        """Told by the actor how many decisions this agent has taken (e.g. for an epsilon schedule)."""

    def seed(self, seed: int) -> None:
        """Seed the policy's own sampling so that two policies seeded alike act alike."""


@dataclass
class LearnerContext:
    """What a learner is built with: whose it is, its storage layout, options, device and seed."""

    agent: str
    layout: AgentLayout
    config: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    seed: int = 0
    #: For an agent group (parameter sharing): the member agents, in the order of the batch's `member` field.
    members: list[str] = field(default_factory=list)


class Learner(ABC):
    """Base class of every learner. Subclasses set `on_policy`, may declare `extras`, and implement the rest.

    Class attributes the runtime reads:
      - `on_policy`: fed every transition once, in order, in chunks (True), or random samples (False).
      - `extras`: per-transition fields the policy's `act` returns, name -> numpy dtype string.
      - `learns`: False for players that never update (no learner process is started).
    Instance attributes the runtime reads (set them in `__init__`, from the config):
      - `batch_size`: rows per `update` (off-policy samples, or on-policy chunk length).
      - `learning_starts`: transitions in the buffer before the first off-policy update.
    """

    on_policy: ClassVar[bool] = False
    learns: ClassVar[bool] = True
    extras: ClassVar[dict[str, str]] = {}
    #: Config keys this learner accepts, with defaults; anything else is refused by `validate_config`.
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, ctx: LearnerContext) -> None:
        self.ctx = ctx
        self.config = self.validate_config(ctx.agent, ctx.config)
        self.batch_size: int = int(self.config.get("batch_size", 64))
        self.learning_starts: int = int(self.config.get("learning_starts", self.batch_size))

    @classmethod
    def validate_config(cls, agent: str, config: dict[str, Any]) -> dict[str, Any]:
        """Merge `config` over `defaults`, refusing unknown keys (named with the agent) before anything starts."""
        from ..errors import ConfigError

        unknown = sorted(set(config) - set(cls.defaults))
        if unknown:
            raise ConfigError(
                f"agent {agent!r}: learner {cls.__name__} has no option(s) {unknown}; "
                f"known options: {sorted(cls.defaults)}"
            )
        return {**cls.defaults, **config}

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        """Raise UnsupportedSpaceError naming the agent if this learner cannot handle its spaces."""

    @classmethod
    @abstractmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> Policy:
        """The acting module, built identically in the learner and in the actor (config already validated)."""

    @property
    @abstractmethod
    def policy(self) -> Policy:
        """The module whose state is published to the actor."""

    @abstractmethod
    def update(self, batch: Batch) -> dict[str, float]:
        """One learning step on `batch`; returns metrics (floats) for logs and the progress display."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks and optimiser state."""
        return {"policy": self.policy.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`'s output. Copy optimiser state (torch shares its tensors otherwise)."""
        self.policy.load_state_dict(state["policy"])


# ------------------------------------------------------------------------------------------ flat vectors
def policy_tensors(policy: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The floating tensors of a policy's state, in a fixed order: what a policy slot carries."""
    return [(k, v) for k, v in policy.state_dict().items() if torch.is_floating_point(v)]


def policy_size(policy: torch.nn.Module) -> int:
    """Floats in the policy's flat vector (at least 1, so parameterless players still get a slot)."""
    return max(1, sum(v.numel() for _k, v in policy_tensors(policy)))


def policy_to_vector(policy: torch.nn.Module, out: np.ndarray | None = None) -> np.ndarray:
    """Flatten the policy's floating state into one float32 vector."""
    tensors = [v.detach().reshape(-1).to("cpu", torch.float32) for _k, v in policy_tensors(policy)]
    flat = torch.cat(tensors).numpy() if tensors else np.zeros(1, np.float32)
    if out is None:
        return flat.copy() if tensors else flat
    out[:] = flat
    return out


def vector_to_policy(vector: np.ndarray, policy: torch.nn.Module) -> None:
    """Load a flat vector produced by `policy_to_vector` into a policy of the same architecture."""
    offset = 0
    source = torch.from_numpy(vector)
    with torch.no_grad():
        for _k, tensor in policy_tensors(policy):
            n = tensor.numel()
            tensor.copy_(source[offset:offset + n].view_as(tensor))
            offset += n
