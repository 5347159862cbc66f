"""The learner plug-in API (docs/learners.md): `Learner` trains, `Policy` acts, one flat vector links them.

A learner runs in its own process (async) or inline (sequential). It builds the policy module with
`build_policy`, which the actor also calls to get an identical module that it refreshes from the agent's
policy slot. Batches arrive as dicts of numpy arrays with the keys of `SharedRingBuffer` rows:
`obs` (or `obs/<leaf>` for nested observations), `action`, `reward`, `next_obs` (`next_obs/<leaf>`),
`terminated`, `truncated`, `action_mask` and `next_action_mask` where the env has masks, `policy_version`,
and the extras the learner declared.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from pzasync.core.spaces import AgentLayout
from pzasync.errors import ConfigError

Batch = dict[str, np.ndarray]


class Policy(torch.nn.Module):
    """What the actor runs: `act(obs, mask, explore) -> (actions, extras)`, batched over the first dimension.

    `obs` is a dict of arrays keyed like the buffer's `obs` fields (`{"obs": array}` for flat observations),
    `mask` a boolean array or None. `extras` (e.g. `log_prob`, `value`) are stored with each transition.
    Everything in `state_dict()` that is a floating tensor travels through the policy slot.
    """

    #: Floats of memory a recurrent policy carries for each acting agent from one decision to the next (0: a
    #: feed-forward policy). The actor keeps it per (env copy, agent), starts it at zeros when that agent's
    #: episode starts, and calls `act_with_memory` instead of `act`.
    memory_size: int = 0

    #: What a policy derives from its parameters and keeps in its `__dict__` (made again when next asked for):
    #: `.to()` and friends drop it, and pickled or deep-copied policies leave it out.
    derived_caches: tuple[str, ...] = ("_pzasync_device",)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        raise NotImplementedError

    def act_with_memory(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool,
                        memory: np.ndarray) -> tuple[np.ndarray, dict, np.ndarray]:
        """A recurrent policy's `act`: `memory` is (rows, memory_size) float32, what each row's agent carried
        out of its previous decision (zeros at its episode's start); returns the actions, the extras to store
        and the memory each row carries to its agent's next decision."""
        raise NotImplementedError(f"{type(self).__name__} has memory_size {self.memory_size} but no act_with_memory")

    def action_probabilities(self, obs: dict[str, np.ndarray], mask: np.ndarray | None) -> np.ndarray:
        """A discrete policy's distribution over its actions, (rows, n) float: what `act(..., explore=True)` draws
        from (column j is action `space.start + j`; illegal actions 0). For exact figures over every decision a
        policy can face, such as leduc's exploitability (`pzasync.evaluation.exploitability`)."""
        raise NotImplementedError(f"{type(self).__name__} does not give its action probabilities")

    def parameter_device(self) -> torch.device:
        """Where the parameters live (the CPU without any). Cached: `act` asks at every forward, and walking the
        parameters costs microseconds; `.to()` and friends clear the cache."""
        device = self.__dict__.get("_pzasync_device")
        if device is None:
            device = next((t.device for t in self.parameters()), torch.device("cpu"))
            self.__dict__["_pzasync_device"] = device
        return device

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Policy:
        for key in self.derived_caches:
            self.__dict__.pop(key, None)
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in self.derived_caches:
            state.pop(key, None)
        return state

    def on_actor_steps(self, agent_steps: int) -> None:
        """Told by the actor how many decisions this agent has taken (e.g. for an epsilon schedule)."""

    def seed(self, seed: int) -> None:
        """Seed the policy's own sampling so that two policies seeded alike act alike."""

    def act_seeded(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, seeds: Sequence[int],
                   memory: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Sampled actions, row i drawn as `seed(seeds[i])` then `act` on that row alone would draw it: a batch
        whose draws do not depend on the rows beside it (the evaluator's sampled scoring, deterministic whatever
        the number of env copies). With `memory` (a recurrent policy's, as `act_with_memory` takes it), also the
        memory each row carries on, else None.

        This default asks one row at a time; PPO and DQN override it with one batched forward and a generator
        per row."""
        actions, carried = [], []
        for i, row_seed in enumerate(seeds):
            self.seed(int(row_seed))
            row_obs = {key: value[i:i + 1] for key, value in obs.items()}
            row_mask = None if mask is None else mask[i:i + 1]
            if memory is None:
                action, _ = self.act(row_obs, row_mask, True)
            else:
                action, _, after = self.act_with_memory(row_obs, row_mask, True, memory[i:i + 1])
                carried.append(after)
            actions.append(action)
        return np.concatenate(actions), None if memory is None else np.concatenate(carried)


_TYPE_NAMES = {float: "a number", int: "an integer", bool: "True or False", str: "a string", list: "a list"}


def _is_kind(value: Any, kind: Any) -> bool:
    """isinstance, except that bools are not numbers, ints pass as floats, and tuples pass as lists."""
    is_bool = isinstance(value, (bool, np.bool_))
    if kind is bool:
        return is_bool
    if kind is int:
        return isinstance(value, (int, np.integer)) and not is_bool
    if kind is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not is_bool
    if kind is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, kind)


@dataclass(frozen=True)
class Option:
    """The rule for one learner option, checked by `Learner.validate_config` before any process starts.

    `type`: `float` (any finite real number; ints are accepted), `int` (bools are not), `bool`, `str`, `list`
    (a list or tuple; `item` is then the rule of every element), or any class or tuple of classes for
    isinstance. `ge`/`gt`/`le`/`lt`: inclusive/exclusive bounds for numbers. `choices`: the allowed values.
    `optional`: None is allowed too. `what`: the noun used in the error message instead of the type's.
    """

    type: Any = object
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    optional: bool = False
    item: Option | None = None
    what: str | None = None

    def type_ok(self, value: Any) -> bool:
        return (value is None and self.optional) or _is_kind(value, self.type)

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if not _is_kind(value, self.type):
            return False
        if self.choices is not None and not any(type(value) is type(c) and value == c for c in self.choices):
            return False
        if self.type in (int, float):
            if not math.isfinite(value):
                return False
            if ((self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
                    or (self.le is not None and value > self.le) or (self.lt is not None and value >= self.lt)):
                return False
        if self.item is not None:
            return all(self.item.accepts(v) for v in value)
        return True

    def describe(self, plural: bool = False) -> str:
        """What is accepted, in words: 'a number in (0, 1]', 'an integer >= 1', "one of 'relu', 'tanh'"."""
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = self.what or _TYPE_NAMES.get(self.type, getattr(self.type, "__name__", str(self.type)))
            if plural:
                text = {"a number": "numbers", "an integer": "integers", "a string": "strings"}.get(text, text)
            low = ("[", self.ge) if self.ge is not None else ("(", self.gt) if self.gt is not None else None
            high = ("]", self.le) if self.le is not None else (")", self.lt) if self.lt is not None else None
            if low and high:
                text += f" in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
            elif low:
                text += f" {'>=' if low[0] == '[' else '>'} {low[1]:g}"
            elif high:
                text += f" {'<=' if high[0] == ']' else '<'} {high[1]:g}"
            if self.item is not None:
                text += " of " + self.item.describe(plural=True)
        return text + (" or None" if self.optional else "")


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
    #: Trajectories interleaved in the buffer (env copies x group members). Above 1, rows of different
    #: trajectories interleave and a batch's `track` field (or, with one env copy, `member`) says which
    #: trajectory each row continues.
    tracks: int = 1

    def __post_init__(self) -> None:
        self.tracks = max(int(self.tracks), len(self.members), 1)


def trajectory_ids(batch: dict[str, np.ndarray]) -> np.ndarray | None:
    """Which trajectory each row continues, where several interleave in one buffer (LearnerContext.tracks):
    the `track` field (env copies x group members), else a group's `member` field, else None (one trajectory)."""
    track = batch.get("track")
    return batch.get("member") if track is None else track


class Learner(ABC):
    """Base class of every learner. Subclasses set `on_policy`, may declare `extras`, and implement the rest.

    Class attributes the runtime reads:
      - `on_policy`: fed every transition once, in order, in chunks (True), or random samples (False).
      - `extras`: per-transition fields the policy's `act` returns, name -> numpy dtype string.
      - `learns`: False for players that never update (no learner process is started).
      - `defaults`: the options it accepts, with their defaults; `schema`: `Option` rules for their values.
    Instance attributes the runtime reads (set them in `__init__`, from the config):
      - `batch_size`: rows per `update` (off-policy samples, or on-policy chunk length).
      - `learning_starts`: transitions in the buffer before the first off-policy update.
    """

    on_policy: ClassVar[bool] = False
    learns: ClassVar[bool] = True
    extras: ClassVar[dict[str, str]] = {}
    #: Config keys this learner accepts, with defaults; anything else is refused by `validate_config`.
    defaults: ClassVar[dict[str, Any]] = {}
    #: Rules for option values (name -> `Option`), checked by `validate_config` on the merged config. A class's
    #: schema adds to its parents' (see `option_rules`); a rule for a key that is not in `defaults` is skipped.
    schema: ClassVar[dict[str, Option]] = {
        "batch_size": Option(int, ge=1),
        "learning_starts": Option(int, ge=0),
    }

    def __init__(self, ctx: LearnerContext) -> None:
        self.ctx = ctx
        self.config = self.validate_config(ctx.agent, ctx.config)
        self.batch_size: int = int(self.config.get("batch_size", 64))
        self.learning_starts: int = int(self.config.get("learning_starts", self.batch_size))

    @classmethod
    def option_rules(cls) -> dict[str, Option]:
        """The `schema` of this class and of its bases, subclasses overriding a base's rule for the same key."""
        rules: dict[str, Option] = {}
        for klass in reversed(cls.__mro__):
            rules.update(vars(klass).get("schema", {}))
        return rules

    @classmethod
    def validate_config(cls, agent: str, config: dict[str, Any]) -> dict[str, Any]:
        """Merge `config` over `defaults`, refusing unknown keys and values that break the `schema` (one line,
        naming the agent, the option, the value and what is accepted) before anything starts."""

        unknown = sorted(set(config) - set(cls.defaults))
        if unknown:
            raise ConfigError(
                f"agent {agent!r}: learner {cls.__name__} has no option(s) {unknown}; "
                f"known options: {sorted(cls.defaults)}"
            )
        merged = {**cls.defaults, **config}
        for key, rule in cls.option_rules().items():
            if key in merged and not rule.accepts(value := merged[key]):
                got = "" if rule.type_ok(value) else f" (got {type(value).__name__})"
                raise ConfigError(
                    f"agent {agent!r}: {cls.__name__} option {key}={value!r}: must be {rule.describe()}{got}"
                )
        return merged

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        """Raise UnsupportedSpaceError naming the agent if this learner cannot handle its spaces."""

    @classmethod
    def extra_fields(cls, config: dict[str, Any]) -> dict[str, str]:
        """The extras stored with each transition for this config: `extras`, unless they depend on the options
        (a recurrent policy's memory, 'float32[N]', is as wide as its `memory_size`)."""
        return dict(cls.extras)

    @classmethod
    def state_source(cls, config: dict[str, Any]) -> str | None:
        """Where this learner's agents' global state comes from (core/global_state.py: "auto", "env", "concat"
        or "module:callable"), or None (the default) for learners that read only the agent's observation. Given
        one, the run wraps the env so these agents observe {"observation": ..., "state": ...}."""
        return None

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

    def sample(self, buffer: Any, rng: np.random.Generator) -> Batch:
        """Off-policy learners: the batch for the next `update`, drawn from the agent's `SharedRingBuffer`.

        Both runners call this (through `LearnerDriver`) whenever an update is due. The default draws
        `batch_size` rows uniformly with `buffer.sample`; override it to draw differently, e.g. with
        `buffer.sample_windows` for multi-step returns (as DQN does with `n_step > 1`). The batch must keep
        `policy_version` (one per row), which the runtime reads for its policy-lag figures.
        """
        return buffer.sample(self.batch_size, rng)

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
    """Load a flat vector produced by `policy_to_vector` into a policy of the same architecture.

    The actor calls this at every new version and the league at every snapshot swap, so the tensor list is
    built once per module: `state_dict()` walks every submodule and costs more than the copies themselves.
    The cached tensors are the module's own (loading copies into them in place, never replaces them).
    """
    tensors = policy.__dict__.get("_pzasync_state_tensors")
    if tensors is None:
        tensors = [tensor for _k, tensor in policy_tensors(policy)]
        policy.__dict__["_pzasync_state_tensors"] = tensors
    offset = 0
    source = torch.from_numpy(vector)
    with torch.no_grad():
        for tensor in tensors:
            n = tensor.numel()
            tensor.copy_(source[offset:offset + n].view_as(tensor))
            offset += n
