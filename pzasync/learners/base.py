"""The learner plug-in API (docs/learners.md): `Learner` trains, `Policy` acts, one flat vector links them.

A learner runs in its own process (async) or inline (sequential). It builds the policy module with
`build_policy`, which the actor also calls to get an identical module that it refreshes from the agent's
policy slot. Batches arrive as dicts of numpy arrays with the keys of `SharedRingBuffer` rows:
`obs` (or `obs/<leaf>` for nested observations), `action`, `reward`, `next_obs` (`next_obs/<leaf>`),
`terminated`, `truncated`, `action_mask` and `next_action_mask` where the env has masks, `policy_version`,
and the extras the learner declared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np
import torch

from pzasync.config.declare import Check
from pzasync.core.spaces import AgentLayout
from pzasync.learners.options import LearnerOptions, Option, options_from_defaults
from pzasync.transport.protocols import TransitionSource

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

    def acting_module(self) -> torch.nn.Module:
        """This policy's acting (greedy and sampled) as one plain torch module that `pzasync export` writes to a
        file acting with torch alone: `learners.acting.ActingModule`'s calling convention. A policy that does not
        give one cannot be exported."""
        raise NotImplementedError(f"{type(self).__name__} does not give an acting module (Policy.acting_module)")

    def parameter_device(self) -> torch.device:
        """Where the parameters live (the CPU without any): where `act` puts its inputs."""
        return next((t.device for t in self.parameters()), torch.device("cpu"))

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
      - `acts_on_observation`: its policy needs no global state to act, where its learner reads one.
      - `Options`: its options class (learners/options.py), each option declared once with its default, doc
        and `Check`; or, the older form, `defaults` (every option with its default) and `schema` (`Option`
        rules for their values), from which the class is made.
    Instance attributes the runtime reads (set by `__init__` from the options):
      - `config`: the checked options, typed attributes (`self.config.lr`) that can also be read by key.
      - `batch_size`: rows per `update` (off-policy samples, or on-policy chunk length).
      - `learning_starts`: transitions in the buffer before the first off-policy update.
    Instance attributes the runtime writes: `progress` (the share of the run's budget spent, before each update).
    """

    on_policy: ClassVar[bool] = False
    learns: ClassVar[bool] = True
    #: Whether the learner learns only from recorded transitions (`RunConfig.dataset`), so that a run without
    #: any for its agents is refused (`bc`).
    needs_dataset: ClassVar[bool] = False
    #: Whether its policy acts on the agent's own observation alone where the learner reads the global state
    #: (`state_source`), as mappo's does: then `build_policy` also takes the layout of the env without the state,
    #: and evaluation and export build it so (acting needs only what the agent observes). False (the default):
    #: its policy is built for the layout with the state beside the observation, and acts on both.
    acts_on_observation: ClassVar[bool] = False
    extras: ClassVar[dict[str, str]] = {}
    #: The options this learner accepts (a `LearnerOptions` dataclass); anything else is refused up front.
    Options: ClassVar[type[LearnerOptions]] = LearnerOptions
    #: Every option with its default (`Options.defaults()`, or a plug-in's own dict from which `Options` is made).
    defaults: ClassVar[dict[str, Any]] = {}
    #: A plug-in's rules for the values of its `defaults` (name -> `Option`); a class's schema adds to its
    #: parents' (see `option_rules`); a rule for a key that is not in `defaults` is skipped.
    schema: ClassVar[dict[str, Check]] = {
        "batch_size": Option(int, ge=1),
        "learning_starts": Option(int, ge=0),
    }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "Options" in own:
            cls.defaults = cls.Options.defaults()
        elif "defaults" in own or "schema" in own:
            cls.Options = options_from_defaults(cls, cls.defaults, cls.option_rules())

    def __init__(self, ctx: LearnerContext) -> None:
        self.ctx = ctx
        self.config = self.validate_config(ctx.agent, ctx.config)
        self.batch_size: int = self.config.get("batch_size", 64)
        self.learning_starts: int = self.config.get("learning_starts", self.batch_size)
        #: Recorded transitions given to `load_dataset` (RunConfig.dataset); the driver counts them towards
        #: `learning_starts`.
        self.dataset_rows = 0
        #: The share of the run's budget (seconds or agent steps) spent when the current update began, in [0, 1]:
        #: set by the runtime before each `update`, for schedules (PPO's `lr_schedule`). 0 where no budget is
        #: known; a resumed run starts again from 0 with its new budget.
        self.progress = 0.0

    @classmethod
    def option_rules(cls) -> dict[str, Check]:
        """The rules of this class's options and of its bases' (`schema`s and `Options` classes), subclasses
        overriding a base's rule for the same key."""
        rules: dict[str, Check] = {}
        for klass in reversed(cls.__mro__):
            own = vars(klass)
            rules.update(own.get("schema", {}))
            if "Options" in own:
                rules.update(own["Options"].checks())
        return rules

    @classmethod
    def validate_config(cls, agent: str, config: Mapping[str, Any]) -> Any:
        """`config` over the defaults, checked (one line naming the agent, the option, the value and what is
        accepted) before anything starts: the learner's `Options`."""
        return cls.Options.parse(agent, cls.__name__, config)

    @classmethod
    def checked(cls, agent: str, config: Mapping[str, Any]) -> Any:
        """`config` as this learner's checked `Options`: itself where it already is, else `validate_config`'s (a
        plain dict handed to `build_policy` is checked by the same one validator)."""
        return config if isinstance(config, cls.Options) else cls.validate_config(agent, config)

    @classmethod  # noqa: B027 - optional: a learner that takes any space keeps it empty
    def check_spaces(cls, layout: AgentLayout) -> None:
        """Raise UnsupportedSpaceError naming the agent if this learner cannot handle its spaces."""

    @classmethod
    def dataset_refusal(cls, config: Mapping[str, Any]) -> str | None:
        """Why this learner, with these options, cannot learn from recorded transitions (`RunConfig.dataset`), or
        None where it can (it implements `load_dataset`). The plan refuses a dataset for a learning unit whose
        learner gives a reason, naming the agent and the reason."""
        return f"{cls.__name__} does not learn from recorded transitions (no load_dataset)"

    def load_dataset(self, batch: Batch) -> None:
        """Take recorded transitions (a dataset's rows for this learner's agents, keyed like a buffer's batch,
        without `policy_version` or extras; with `member` for an agent group) before the first update; a learner
        that can keeps them beside its buffer and sets `dataset_rows`. Called once per learner (again after a
        restart), only where `dataset_refusal` gives None."""
        raise NotImplementedError(f"{type(self).__name__} does not learn from recorded transitions")

    @classmethod
    def extra_fields(cls, config: Mapping[str, Any]) -> dict[str, str]:
        """The extras stored with each transition for this config: `extras`, unless they depend on the options
        (a recurrent policy's memory, 'float32[N]', is as wide as its `memory_size`)."""
        return dict(cls.extras)

    @classmethod
    def state_source(cls, config: Mapping[str, Any]) -> str | None:
        """Where this learner's agents' global state comes from (core/global_state.py: "auto", "env", "concat"
        or "module:callable"), or None (the default) for learners that read only the agent's observation. Given
        one, the run wraps the env so these agents observe {"observation": ..., "state": ...}."""
        return None

    @classmethod
    @abstractmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
        """The acting module, built identically in the learner and in the actor: `config` is the learner's checked
        `Options` (a plain dict of options is checked first by `checked`)."""

    @property
    @abstractmethod
    def policy(self) -> Policy:
        """The module whose state is published to the actor."""

    @abstractmethod
    def update(self, batch: Batch) -> dict[str, float]:
        """One learning step on `batch`; returns metrics (floats) for logs and the progress display."""

    def sample(self, buffer: TransitionSource, rng: np.random.Generator) -> Batch:
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
    """Load a flat vector produced by `policy_to_vector` into a policy of the same architecture, in place."""
    offset = 0
    source = torch.from_numpy(vector)
    with torch.no_grad():
        for _name, tensor in policy_tensors(policy):
            n = tensor.numel()
            tensor.copy_(source[offset:offset + n].view_as(tensor))
            offset += n
