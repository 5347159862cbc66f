"""pzasync: an asynchronous actor-learner runtime for any PettingZoo environment.

Data flows env copies -> actor (runtime/actor.py: each copy an `EpisodeStepper`, its transitions assembled by a
`TransitionAssembler`) -> per-unit `TransitionWriter` (a `SharedRingBuffer`) -> learner, in a `LearnerHost`
(runtime/hosts.py; backends/ray/host.py) -> per-unit `PolicyPublisher` (a `PolicySlot`) -> back to the actor.
`train` (a `Trainer`) is what `pzasync train` does. See docs/architecture.md.
"""

from pzasync.config import RunConfig
from pzasync.core.collect import rollout, run_episodes
from pzasync.core.dataset import Dataset, open_dataset
from pzasync.core.environments import EnvSpec, make_env
from pzasync.core.spaces import AgentLayout, agent_layout, env_layouts
from pzasync.core.transitions import EpisodeSummary, Transition, TransitionAssembler
from pzasync.errors import (
    ConfigError,
    DatasetError,
    EnvSpecError,
    InsufficientSharedMemoryError,
    PzasyncError,
    RewardConservationError,
    SlotReadTimeout,
    UnsupportedSpaceError,
    UserInputError,
)
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.protocols import (
    PolicyPublisher,
    PolicySource,
    PolicyStore,
    RunControl,
    TransitionSource,
    TransitionWriter,
)
from pzasync.transport.shm import clean_stale
from pzasync.transport.slots import PolicySlot


def __getattr__(name: str):
    # Runners and learners need torch (the `torch` extra); import them on first use only.
    if name in ("AsyncRunner", "SequentialRunner"):
        from pzasync import runners

        return getattr(runners, name)
    if name in ("Learner", "Policy", "LearnerContext", "LearnerOptions", "Option", "Check", "option"):
        from pzasync import learners

        return getattr(learners, name)
    if name in ("evaluate", "Evaluation"):
        from pzasync.evaluation import report

        return getattr(report, name)
    if name == "evaluate_snapshots":
        from pzasync.evaluation.snapshots import evaluate_snapshots

        return evaluate_snapshots
    if name == "record":
        from pzasync.evaluation.record import record

        return record
    if name == "export":
        from pzasync.evaluation.export import export

        return export
    if name == "exploitability":
        from pzasync.evaluation.exploitability import exploitability

        return exploitability
    if name in ("train", "Trainer", "TrainResult"):
        from pzasync import training

        return getattr(training, name)
    if name in ("RunResult", "AgentResult"):
        from pzasync.runtime import results

        return getattr(results, name)
    raise AttributeError(f"module 'pzasync' has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "AgentLayout",
    "AgentResult",
    "AsyncRunner",
    "Check",
    "Learner",
    "LearnerContext",
    "LearnerOptions",
    "Option",
    "Policy",
    "RunConfig",
    "RunResult",
    "SequentialRunner",
    "TrainResult",
    "Trainer",
    "ConfigError",
    "Dataset",
    "DatasetError",
    "EnvSpec",
    "EnvSpecError",
    "EpisodeSummary",
    "Evaluation",
    "InsufficientSharedMemoryError",
    "PolicyPublisher",
    "PolicySlot",
    "PolicySource",
    "PolicyStore",
    "RunControl",
    "PzasyncError",
    "RewardConservationError",
    "SharedRingBuffer",
    "SlotReadTimeout",
    "Transition",
    "TransitionAssembler",
    "TransitionSource",
    "TransitionWriter",
    "UnsupportedSpaceError",
    "UserInputError",
    "agent_layout",
    "clean_stale",
    "env_layouts",
    "evaluate",
    "evaluate_snapshots",
    "exploitability",
    "export",
    "make_env",
    "open_dataset",
    "option",
    "record",
    "rollout",
    "run_episodes",
    "train",
]
