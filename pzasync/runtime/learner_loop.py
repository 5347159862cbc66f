"""One agent's learning loop: read its buffer, update, publish to its slot. Inline (sequential) or in a process.

`LearnerDriver.try_update` is the single step both runners use, so they run the same algorithm: an off-policy
learner updates while its update count is behind `replay_ratio * (transitions - learning_starts)` (or freely
when there is no ratio); an on-policy learner updates once per `batch_size` transitions read in order.
A learner host process (host_loop.py) runs one or several drivers in turn.
"""

from __future__ import annotations

import dataclasses
import math
import os
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from pzasync.core.dataset import open_dataset, unit_rows
from pzasync.core.spaces import AgentLayout
from pzasync.errors import LearnerCrashedError, error_type_path
from pzasync.learners import Learner, LearnerContext, policy_to_vector, resolve_learner, vector_to_policy
from pzasync.learners.players import save_checkpoint
from pzasync.runtime.results import process_usage
from pzasync.transport import stats as S
from pzasync.transport.protocols import PolicyStore, RunControl, TransitionSource


@dataclass(frozen=True)
class LearnerReport:
    """A learner's periodic figures: updates, last metrics, policy lag, its process's CPU and memory."""

    unit: str
    report: dict[str, Any]


@dataclass(frozen=True)
class LearnerFailed:
    """A learner failed. `error_type` is `module:qualname` of its exception (or of the runtime's own error for
    a death or a hang), so the parent can raise the same type again without unpickling user classes."""

    unit: str
    error_type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, unit: str, exc: BaseException) -> LearnerFailed:
        return cls(unit, error_type_path(type(exc)), str(exc), traceback.format_exc())

    @classmethod
    def runtime(cls, unit: str, message: str) -> LearnerFailed:
        """A failure the runtime saw (the process died, it hung), not an exception of the learner."""
        return cls(unit, error_type_path(LearnerCrashedError), message)

    @property
    def summary(self) -> str:
        """One line: 'RuntimeError: what went wrong', or the runtime's message."""
        if self.error_type.endswith(":LearnerCrashedError"):
            return self.message
        return f"{self.error_type.rpartition(':')[2]}: {self.message}"


def target_updates(ratio: float, written: int, learning_starts: int) -> int:
    """Updates an off-policy learner should have made once `written` transitions exist."""
    return int(ratio * (written - learning_starts)) + 1 if written >= learning_starts else 0


def written_within_lead(ratio: float, updates: int, lead: int, learning_starts: int) -> float:
    """`target_updates` turned round: while fewer transitions than this exist, `target_updates(ratio, written,
    learning_starts) - updates <= lead`, i.e. an actor `lead` updates ahead of a learner that has made `updates`
    is not past its bound (one transition short of the exact figure, for float rounding). Infinite for a ratio
    of 0, which never asks for more than one update."""
    if not ratio:
        return math.inf
    return learning_starts + int((updates + lead) / ratio) - 1


@dataclass
class LearnerSetup:
    """Everything a learner process needs, picklable: built by the runner before processes start."""

    agent: str
    learner_path: str  # "module:Class"
    #: The learner's options as a plain dict (a Ray worker unpickles the setup before it can import a plug-in's
    #: module); the learner checks them again when it is built.
    config: dict[str, Any]
    layout: AgentLayout
    #: The learner's transport: its buffer, its policy's publisher and the run's counters. None only in a setup
    #: sent to a learner on another node, which makes its own there (backends/ray/workers.py).
    buffer: TransitionSource | None
    slot: PolicyStore | None
    stats: RunControl | None
    replay_ratio: float | None
    publish_every: int
    device: str
    seed: int
    torch_threads: int
    checkpoint_path: str | None = None
    resume_state_path: str | None = None
    #: Start from the weights in the slot (a restarted learner with no checkpoint to load).
    init_from_slot: bool = False
    #: The runner's pid. Recorded by the runner, not read with getppid() in the child: if the runner dies
    #: before the child gets that far, getppid() already names the process that adopted it.
    parent_pid: int = 0
    #: An agent group's members (then `agent` is the group's name).
    members: list[str] = dataclasses.field(default_factory=list)
    #: Trajectories interleaved in the buffer (LearnerContext.tracks).
    tracks: int = 1
    #: Recorded transitions to load before the first update (RunConfig.dataset: a dataset directory, read where
    #: the learner runs); None: none.
    dataset: str | None = None

    def transport(self) -> tuple[TransitionSource, PolicyStore, RunControl]:
        """The buffer, slot and counters a learner runs with (every setup a learner is started from has them)."""
        if self.buffer is None or self.slot is None or self.stats is None:
            raise ValueError(f"the learner of {self.agent!r} has no buffer, slot or counters in its setup (a setup "
                             f"for another node gets them where it runs)")
        return self.buffer, self.slot, self.stats


def build_learner(setup: LearnerSetup) -> Learner:
    cls, _ = resolve_learner(setup.learner_path, setup.agent)
    learner = cls(LearnerContext(setup.agent, setup.layout, setup.config, setup.device, setup.seed,
                                     members=list(setup.members), tracks=setup.tracks))
    if setup.dataset is not None:
        rows = unit_rows(open_dataset(setup.dataset), list(setup.members) or [setup.agent], setup.layout,
                         grouped=bool(setup.members))
        if len(rows["reward"]):
            learner.load_dataset(rows)
    if setup.resume_state_path and os.path.exists(setup.resume_state_path):
        import torch

        learner.load_state_dict(torch.load(setup.resume_state_path, weights_only=False)["state"])
    return learner


def restarted(setup: LearnerSetup) -> LearnerSetup:
    """The setup of a restarted learner: from its latest checkpoint, or from its published weights."""
    path = setup.checkpoint_path
    checkpoint = path if path and os.path.exists(path) else None
    return dataclasses.replace(setup, resume_state_path=checkpoint, init_from_slot=checkpoint is None)


def start_driver(setup: LearnerSetup) -> LearnerDriver:
    """Build the learner (adopting the slot's weights if asked) and publish its policy."""
    driver = LearnerDriver(setup, build_learner(setup))
    if setup.init_from_slot:
        driver.load_published()
    driver.publish()
    return driver


class LearnerDriver:
    """Feeds one learner from its buffer and publishes its policy; call `try_update` repeatedly."""

    def __init__(self, setup: LearnerSetup, learner: Learner) -> None:
        self.setup = setup
        self.learner = learner
        self.on_policy = bool(learner.on_policy)
        self.buffer, self.slot, self.stats = setup.transport()
        self.rng = np.random.default_rng(setup.seed)
        self.updates = self.stats.get(setup.agent, S.UPDATES)
        self.last_metrics: dict[str, float] = {}
        self.lags: deque[float] = deque(maxlen=20_000)
        self._cpu_at_start = process_usage()[0]  # the report counts CPU from here: imports and start-up excluded
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_rows = 0
        self._vector = np.zeros(self.slot.size, np.float32)
        # An on-policy learner's data must come from its newest policy: it publishes after every update.
        self.publish_every = 1 if self.on_policy else setup.publish_every
        self._to_vector = policy_to_vector

    def load_published(self) -> None:
        """Adopt the policy the slot holds (what the actor is acting with)."""
        if self.slot.read(self._vector):
            vector_to_policy(self._vector, self.learner.policy)

    def publish(self) -> int:
        """Publish the learner's current policy; returns the new version."""
        self._to_vector(self.learner.policy, self._vector)
        version = self.slot.publish(self._vector)
        self.stats.set(self.setup.agent, S.VERSION, version)
        return version

    def _next_batch(self) -> dict[str, np.ndarray] | None:
        learner = self.learner
        if not self.on_policy:
            written = self.buffer.written
            if written + learner.dataset_rows < max(1, learner.learning_starts):  # recorded rows count
                return None
            ratio = self.setup.replay_ratio
            if ratio is not None and self.updates >= target_updates(ratio, written, learner.learning_starts):
                return None
            return learner.sample(self.buffer, self.rng)
        while self._pending_rows < learner.batch_size:
            chunk = self.buffer.read_new(max_rows=learner.batch_size - self._pending_rows)
            if chunk is None:
                return None
            self._pending.append(chunk)
            self._pending_rows += len(chunk["reward"])
        batch = {k: np.concatenate([c[k] for c in self._pending]) for k in self._pending[0]}
        self._pending, self._pending_rows = [], 0
        return batch

    def try_update(self) -> bool:
        """Run one update if one is due and data is there; publish every `publish_every` updates."""
        batch = self._next_batch()
        if batch is None:
            return False
        version = self.slot.version
        made = batch["policy_version"]
        lag = version - made[made > 0]  # version 0: recorded rows (RunConfig.dataset), made by no policy of the run
        self.lags.extend(lag[:: max(1, len(lag) // 16)].tolist())
        self.learner.progress = self.stats.progress
        self.last_metrics = {k: float(v) for k, v in self.learner.update(batch).items()}
        self.updates += 1
        self.stats.set(self.setup.agent, S.UPDATES, self.updates)
        if self.updates % self.publish_every == 0:
            self.publish()
        return True

    def lag_summary(self) -> tuple[float, float]:
        """Mean and 95th percentile of (published version - version that produced each consumed transition)."""
        if not self.lags:
            return 0.0, 0.0
        values = np.fromiter(self.lags, dtype=np.float64)
        return float(values.mean()), float(np.percentile(values, 95))

    def report(self) -> dict[str, Any]:
        mean, p95 = self.lag_summary()
        cpu, rss = process_usage()
        return {"updates": self.updates, "metrics": self.last_metrics, "lag_mean": mean, "lag_p95": p95,
                "dropped": self.buffer.dropped, "process_cpu_seconds": cpu - self._cpu_at_start,
                "process_peak_rss_mb": rss,
                "pid": os.getpid()}

    def save_checkpoint(self, path: str) -> None:
        tmp = f"{path}.tmp"
        save_checkpoint(tmp, self.learner)
        os.replace(tmp, path)
