"""pzasync: an asynchronous actor-learner runtime for any PettingZoo environment.

Data flows env -> actor (`collect.run_episodes`, `transitions.TransitionAssembler`) -> per-agent
`SharedRingBuffer` -> learner -> per-agent `PolicySlot` -> back to the actor. See docs/architecture.md.
"""

from .buffer import SharedRingBuffer
from .collect import rollout, run_episodes
from .environments import EnvSpec, make_env
from .errors import (
    ConfigError,
    EnvSpecError,
    InsufficientSharedMemoryError,
    PzasyncError,
    RewardConservationError,
    SlotReadTimeout,
    UnsupportedSpaceError,
    UserInputError,
)
from .shm import clean_stale
from .slots import PolicySlot
from .spaces import AgentLayout, agent_layout, env_layouts
from .transitions import EpisodeSummary, Transition, TransitionAssembler

__version__ = "0.1.0"

__all__ = [
    "AgentLayout",
    "ConfigError",
    "EnvSpec",
    "EnvSpecError",
    "EpisodeSummary",
    "InsufficientSharedMemoryError",
    "PolicySlot",
    "PzasyncError",
    "RewardConservationError",
    "SharedRingBuffer",
    "SlotReadTimeout",
    "Transition",
    "TransitionAssembler",
    "UnsupportedSpaceError",
    "UserInputError",
    "agent_layout",
    "clean_stale",
    "env_layouts",
    "make_env",
    "rollout",
    "run_episodes",
]
