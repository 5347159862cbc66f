"""What an actor is built from: each agent it acts for (`ActingAgent`: its layout, its copy of its unit's
policy, its buffer, what it counts) and the run around it (`ActorContext`). Shared by the actor (runtime/actor.py)
and its array path (runtime/actor_columns.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from pzasync.core.spaces import AgentLayout
from pzasync.learners import Policy, vector_to_policy
from pzasync.runtime.copies import EnvCopiesFactory
from pzasync.transport.protocols import PolicySource, RunControl, TransitionSource, TransitionWriter


@dataclass
class LocalPolicy:
    """A learning unit's policy as an actor holds it: the local module (shared by an agent group's members), the
    slot it is refreshed from, the vector last read from that slot and its version."""

    module: Policy
    slot: PolicySource | None = None
    vector: np.ndarray | None = None
    version: int = 0

    def __post_init__(self) -> None:
        if self.slot is not None and self.vector is None:
            self.vector = np.zeros(self.slot.size, np.float32)

    def refresh(self) -> None:
        """Copy the newest published policy into the module, if the slot's version changed."""
        slot, vector = self.slot, self.vector
        if slot is not None and slot.version != self.version:
            assert vector is not None, "a policy with a slot has its vector (__post_init__)"
            self.version = slot.read(vector)
            vector_to_policy(vector, self.module)


@dataclass
class AgentCounts:
    """What an actor counts for one agent."""

    #: Decisions taken, this run's and (`offset`) those of the run it resumes.
    steps: int = 0
    offset: int = 0
    #: Transitions written to its buffer (a group's members each count their own).
    written: int = 0
    #: Transitions with NaN or inf seen.
    nonfinite: int = 0
    #: Under a replay ratio: the unit's buffer may hold this many transitions before the lead bound needs asking.
    lead_checked_until: float = 0


@dataclass(frozen=True)
class ActingAgent:
    """What is fixed about one agent an actor acts for; what it counts is in `count`."""

    agent: str
    layout: AgentLayout
    #: The actor's copy of its unit's published policy (one for all members of an agent group).
    local: LocalPolicy
    learns: bool
    on_policy: bool = False
    #: The buffer (shard) this actor writes the agent's transitions to; None for players that do not learn.
    buffer: TransitionWriter | None = None
    #: Transitions in the unit's buffer before its first off-policy update.
    learning_starts: int = 0
    #: Whose learner counters apply (its own name, or its agent group's) and, in a group, its member index.
    unit: str = ""
    member: int | None = None
    #: Trajectories interleaved in its unit's buffer (env copies x group members; RunPlan.tracks).
    tracks: int = 1
    #: With several actors: the unit's whole source (every actor's shard), whose `written` paces a replay
    #: ratio; `buffer` is this actor's own shard.
    pace: TransitionSource | None = None
    count: AgentCounts = field(default_factory=AgentCounts)
    #: Indices of the observation leaves checked for NaN and inf (the floating ones), and their keys in a batch.
    float_leaves: tuple[int, ...] = field(init=False)
    float_keys: tuple[str, ...] = field(init=False)

    @property
    def policy(self) -> Policy:
        """The module the agent acts with."""
        return self.local.module

    def __post_init__(self) -> None:
        if not self.unit:
            object.__setattr__(self, "unit", self.agent)
        floating = tuple(i for i, leaf in enumerate(self.layout.obs_leaves) if leaf.dtype.kind == "f")
        keys = ["obs"] if not self.layout.nested_obs else [f"obs/{leaf.name}" for leaf in self.layout.obs_leaves]
        object.__setattr__(self, "float_leaves", floating)
        object.__setattr__(self, "float_keys", tuple(keys[i] for i in floating))


@dataclass(frozen=True)
class ActorContext:
    """Everything an actor is built from: its env copies, the agents it acts for, the run's counters, and how it
    paces itself against its learners."""

    #: What the env copies are made from (runtime/copies/protocol.py).
    copies: EnvCopiesFactory
    agents: dict[str, ActingAgent]
    stats: RunControl
    #: Off-policy learners' replay ratio when the actor waits for them (a bounded lead), else None.
    replay_ratio: float | None = None
    #: With a replay ratio: the most updates a learner may fall behind, in units of the ratio.
    max_lead: int = 64
    #: On-policy learners: wait rather than overwrite unread transitions.
    backpressure: bool = False
    check_rewards: bool = True
    max_episode_steps: int | None = None
    #: Called before an agent's decisions (the sequential runner's learners update here).
    before_decision: Callable[[str], None] | None = None
    raise_on_nonfinite: bool = False
    #: Which of the run's actors this is (RunConfig.actors): its tracks follow those of the actors before it.
    actor_index: int = 0
    #: Whether transitions carry `track` (several env copies, in this actor or across actors); None: when
    #: this actor has several copies.
    stores_track: bool | None = None
    #: Parallel env copies in this process are stepped in columns where that applies (core/parallel_columns.py);
    #: False keeps the reference path, a `PendingDecision` and a `Transition` per agent and step.
    columns: bool = True
