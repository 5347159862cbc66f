"""One agent's learning loop: read its buffer, update, publish to its slot. Inline (sequential) or in a process.

`LearnerDriver.try_update` is the single step both runners use, so they run the same algorithm: an off-policy
learner updates while its update count is behind `replay_ratio * (transitions - learning_starts)` (or freely
when there is no ratio); an on-policy learner updates once per `batch_size` transitions read in order.
`learner_host_main` runs one or several drivers in a process (a learner host) with per-learner heartbeats,
metrics and error reporting; `learner_process_main` is a host of one (the Ray backend's learner actors).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from pzasync.transport import stats as S
from pzasync.errors import LearnerCrashedError, error_type_path
from pzasync.transport.shm import run_id_of, unlink_run
from pzasync.runtime.processes import runner_is_gone
from pzasync.runtime.stop_signals import ignore_stop_signals
from pzasync.transport.protocols import PolicyPublisher, RunControl, TransitionSource
from pzasync.learners import LearnerContext, resolve_learner, policy_to_vector, vector_to_policy
from pzasync.learners.players import save_checkpoint
from pzasync.runtime.results import process_usage


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
    config: dict[str, Any]
    layout: Any
    buffer: TransitionSource
    slot: PolicyPublisher
    stats: RunControl
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


def build_learner(setup: LearnerSetup) -> Any:
    cls, _ = resolve_learner(setup.learner_path, setup.agent)
    learner = cls(LearnerContext(setup.agent, setup.layout, setup.config, setup.device, setup.seed,
                                     members=list(setup.members), tracks=setup.tracks))
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

    def __init__(self, setup: LearnerSetup, learner: Any) -> None:
        self.setup = setup
        self.learner = learner
        self.on_policy = bool(learner.on_policy)
        self.buffer = setup.buffer
        self.stats = setup.stats
        self.rng = np.random.default_rng(setup.seed)
        self.updates = setup.stats.get(setup.agent, S.UPDATES)
        self.last_metrics: dict[str, float] = {}
        self.lags: deque[float] = deque(maxlen=20_000)
        self._cpu_at_start = process_usage()[0]  # the report counts CPU from here: imports and start-up excluded
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_rows = 0
        self._vector = np.zeros(setup.slot.size, np.float32)
        # An on-policy learner's data must come from its newest policy: it publishes after every update.
        self.publish_every = 1 if self.on_policy else setup.publish_every
        self._to_vector = policy_to_vector

    def load_published(self) -> None:
        """Adopt the policy the slot holds (what the actor is acting with)."""
        if self.setup.slot.read(self._vector):
            vector_to_policy(self._vector, self.learner.policy)

    def publish(self) -> int:
        """Publish the learner's current policy; returns the new version."""
        self._to_vector(self.learner.policy, self._vector)
        version = self.setup.slot.publish(self._vector)
        self.stats.set(self.setup.agent, S.VERSION, version)
        return version

    def _next_batch(self) -> dict[str, np.ndarray] | None:
        learner = self.learner
        if not self.on_policy:
            written = self.buffer.written
            if written < max(1, learner.learning_starts):
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
        version = self.setup.slot.version
        lag = version - batch["policy_version"]
        self.lags.extend(lag[:: max(1, len(lag) // 16)].tolist())
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
                "dropped": self.buffer.dropped, "process_cpu_seconds": cpu - self._cpu_at_start, "process_peak_rss_mb": rss,
                "pid": os.getpid()}

    def save_checkpoint(self, path: str) -> None:
        tmp = f"{path}.tmp"
        save_checkpoint(tmp, self.learner)
        os.replace(tmp, path)


def learner_process_main(setup: LearnerSetup, messages: Any, checkpoint_every_s: float,
                         is_orphaned: Any = None) -> None:
    """Body of a process (or Ray actor) that hosts one learner: `learner_host_main` with a host of one."""
    learner_host_main([setup], messages, checkpoint_every_s, is_orphaned=is_orphaned)


class MessagePipe:
    """The sending end of a pipe, with the one call `learner_host_main` makes of its messages: `put`.

    A local learner host process reports through it (not a multiprocessing queue: the runner's end then reads
    end-of-file when the host dies, and no queue lock or feeder thread is left for a dead process to hold)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def put(self, message: Any) -> None:
        self.conn.send(message)


def learner_host_process_main(setups: list[LearnerSetup], messages: Any, checkpoint_every_s: float,
                              commands: Any = None) -> None:
    """Body of a local learner host process: `learner_host_main`, ignoring SIGTERM and SIGINT (the
    runner stops the run, stop_signals.py)."""
    ignore_stop_signals()
    try:
        learner_host_main(setups, messages, checkpoint_every_s, commands)
    finally:
        messages.conn.close()


def learner_host_main(setups: list[LearnerSetup], messages: Any, checkpoint_every_s: float, commands: Any = None,
                      is_orphaned: Any = None) -> None:
    """Body of a learner host process: its learners update in turn, each as its own schedule allows, until the
    run asks to stop.

    Every learner keeps its own driver (model, optimiser, buffer, slot, metrics) and its own heartbeat word.
    Reports and failures go to `messages.put` as `LearnerReport` / `LearnerFailed`, per learner: a learner that
    raises is reported and dropped, the others go on, and the host starts it again when `commands` (the
    receiving end of a pipe) brings its restarted `LearnerSetup`. Ctrl-C is the runner's to handle (a terminal
    sends SIGINT to the whole process group), so it is ignored here. If the runner's process dies (SIGKILL),
    the host notices within half a second (`is_orphaned`, by default: its parent changed), unlinks the run's
    shared memory and exits.
    """
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ray's workers too; local hosts also ignore SIGTERM
    first = setups[0]
    parent = first.parent_pid or os.getppid()
    if is_orphaned is None:
        def is_orphaned() -> bool:
            return runner_is_gone(parent)
    stats = first.stats
    for setup in setups:
        stats.beat(setup.agent)
    attached = list(setups)  # every setup received: their shared memory is closed on the way out
    drivers: dict[str, LearnerDriver] = {}
    idle_since: dict[str, int | None] = {}
    orphaned = is_orphaned()

    def fail(unit: str, exc: BaseException) -> None:
        drivers.pop(unit, None)
        stats.set(unit, S.STATUS, S.CRASHED)
        if not is_orphaned():
            messages.put(LearnerFailed.from_exception(unit, exc))

    def start(setup: LearnerSetup) -> None:
        try:
            drivers[setup.agent] = start_driver(setup)
        except Exception as exc:  # noqa: BLE001 - reported per learner; the host's other learners go on
            fail(setup.agent, exc)
            return
        idle_since[setup.agent] = None
        stats.set(setup.agent, S.STATUS, S.RUNNING)
        stats.beat(setup.agent)

    try:
        if orphaned:
            return
        import torch

        torch.set_num_threads(first.torch_threads)
        for setup in setups:
            start(setup)
        clock = {"report": time.monotonic(), "checkpoint": time.monotonic() + (
            checkpoint_every_s if checkpoint_every_s > 0 else float("inf"))}

        def periodic() -> bool:
            """Heartbeats, reports, restarted learners and checkpoints when due; False once orphaned. Called
            after every update, so that a host whose pass over its learners is long still beats for each."""
            now = time.monotonic()
            if now >= clock["report"]:
                if is_orphaned():
                    return False
                while commands is not None and commands.poll():
                    setup = commands.recv()  # a restarted learner of this host
                    attached.append(setup)
                    start(setup)
                for unit, driver in drivers.items():
                    stats.beat(unit)
                    messages.put(LearnerReport(unit, driver.report()))
                clock["report"] = now + 0.5
            if now >= clock["checkpoint"]:
                for driver in drivers.values():
                    if driver.setup.checkpoint_path:
                        driver.save_checkpoint(driver.setup.checkpoint_path)
                clock["checkpoint"] = now + checkpoint_every_s
            return True

        idle_sleep = 0.0001
        while not stats.stop_requested and not orphaned:
            if not drivers and commands is None:
                break  # a host of one whose learner failed: nothing can bring it back here
            progressed = False
            for unit, driver in list(drivers.items()):  # one update each per pass: fair turns
                try:
                    updated = driver.try_update()
                except Exception as exc:  # noqa: BLE001 - this learner is reported and restarted alone
                    fail(unit, exc)
                    continue
                since = idle_since[unit]
                if updated:
                    progressed = True
                    if since is not None:
                        stats.add(unit, S.LEARNER_WAIT_NS, time.monotonic_ns() - since)
                        idle_since[unit] = None
                    if not periodic():
                        orphaned = True
                        break
                elif since is None:
                    idle_since[unit] = time.monotonic_ns()
            if orphaned:
                break
            if progressed:
                idle_sleep = 0.0001
            else:
                # Back off while there is nothing to do, so idle learners leave the cores to the actor.
                time.sleep(idle_sleep)
                idle_sleep = min(0.002, idle_sleep * 2)
            if not periodic():
                orphaned = True
        for driver in drivers.values():
            if driver.setup.checkpoint_path:
                driver.save_checkpoint(driver.setup.checkpoint_path)
        if not orphaned:
            for unit, driver in drivers.items():
                messages.put(LearnerReport(unit, driver.report()))
                stats.set(unit, S.STATUS, S.DONE)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the runner, then re-raised
        for unit in drivers:  # outside any one learner's update: every learner of this host failed with it
            stats.set(unit, S.STATUS, S.CRASHED)
        orphaned = orphaned or is_orphaned()
        if not orphaned:
            for unit in drivers:
                messages.put(LearnerFailed.from_exception(unit, exc))
        if not isinstance(exc, Exception):
            raise
    finally:
        if orphaned:
            # The owner is gone and will never unlink: remove the whole run's memory (other learners may not
            # have lived long enough to do their part). Do not wait on the dead runner's pipe.
            if hasattr(messages, "cancel_join_thread"):
                messages.cancel_join_thread()
            unlink_run(run_id_of(first.buffer.name), parent)
        closed: set[int] = set()
        for setup in attached:
            for part in (setup.buffer, setup.slot, setup.stats):
                if id(part) not in closed:
                    closed.add(id(part))
                    part.close()
