"""What runs inside Ray's processes for the Ray backend (backends/ray/host.py has the host that drives them).

- `LearnerActor`: one learner unit in a Ray actor: the same learning loop as a local learner process
  (`host_loop.learner_process_main`), on the run's shared memory when it is on the actor's node, or on a
  local ring buffer filled with the chunks the host pushes when it is on another node.
- `VersionedVector`: such a learner's policy publisher: its newest vector and version, handed out whole.
- `RemoteRun`: the whole run (actor, monitor, learner host) as a Ray actor (`RunConfig.ray_actor_resources`).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
from typing import Any

import numpy as np

from pzasync.runners import AsyncRunner
from pzasync.runtime.host_loop import learner_process_main
from pzasync.runtime.learner_loop import LearnerFailed, LearnerReport, LearnerSetup
from pzasync.runtime.results import RunResult
from pzasync.transport import stats as S
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.shm import _alive, new_run_id
from pzasync.transport.stats import RunStats


def adopt_sys_path(paths: list[str]) -> None:
    """Add the driver's import path entries that exist on this node, so user modules named `module:Class`
    import here as they do in local processes (on other machines, ship them with Ray's runtime_env)."""
    import sys

    sys.path.extend(p for p in paths if p not in sys.path and os.path.isdir(p or "."))



def drain(messages: queue.Queue) -> list[Any]:
    """Every message waiting in `messages` now, in order, without blocking (what the driver collects)."""
    out = []
    while True:
        try:
            out.append(messages.get_nowait())
        except queue.Empty:
            return out

class VersionedVector:
    """A remote learner's `PolicyPublisher`: its newest vector and version, copied under a lock, so the
    thread answering the pump never hands out a half-written vector."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._vector = np.zeros(size, np.float32)
        self._version = 0
        self._lock = threading.Condition()

    @property
    def version(self) -> int:
        return self._version

    def publish(self, vector: np.ndarray, version: int | None = None) -> int:
        with self._lock:
            np.copyto(self._vector, vector, casting="same_kind")
            self._version = self._version + 1 if version is None else version
            self._lock.notify_all()
            return self._version

    def read(self, out: np.ndarray) -> int:
        with self._lock:
            if self._version:
                np.copyto(out, self._vector)
            return self._version

    def newer_than(self, version: int, wait_s: float = 0.0) -> tuple[int, np.ndarray] | None:
        """The newest (version, vector) if newer than `version`, waiting up to `wait_s` for one (a long poll:
        the pump learns of a new version as soon as it exists without asking hundreds of times a second)."""
        with self._lock:
            if wait_s > 0:
                self._lock.wait_for(lambda: self._version > version, timeout=wait_s)
            return (self._version, self._vector.copy()) if self._version > version else None

    def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class _OwnMemory:
    """A remote-mode learner's own buffer, publisher and counters, made on its node (`LearnerActor.prepare`)."""

    buffer: SharedRingBuffer
    publisher: VersionedVector
    stats: RunStats


class LearnerActor:
    """One learner unit inside a Ray actor. `run` holds the learning loop (its own concurrency group);
    every other method answers the host from a second thread."""

    def __init__(self) -> None:
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self.messages: queue.Queue = queue.Queue()
        self.setup: LearnerSetup | None = None
        #: Remote mode: what the learner runs on here (None in shared-memory mode).
        self.own: _OwnMemory | None = None
        self.remote = False
        self.closed = False
        self._next_chunk = 0
        self._early: dict[int, dict[str, np.ndarray]] = {}
        self._lock = threading.Lock()
        #: Remote mode: the learner's counters just before its loop closed them (what `run` returns).
        self._final: dict[str, Any] | None = None

    def node(self) -> str:
        return self.node_id

    def prepare(self, setup: LearnerSetup, remote: dict[str, Any] | None, initial: tuple[int, np.ndarray] | None,
                sys_path: list[str]) -> tuple[str, int] | None:
        """Shared-memory mode (`remote` None): use the setup's buffer, slot and counters as they are. Remote
        mode: make local ones from `remote`'s layout; `initial` is (version, vector) to restart from.
        `sys_path`: the driver's import path (`adopt_sys_path`)."""
        adopt_sys_path(sys_path)
        if remote is None:
            self.setup = setup
            return None

        run_id = new_run_id()
        buffer = SharedRingBuffer.create_like(remote["fields"], remote["capacity"], remote["obs_paths"],
                                              run_id=run_id, label="rbuf", what=f"learner {setup.agent!r}")
        publisher = VersionedVector(remote["slot_size"])
        if initial is not None:
            publisher.publish(initial[1], version=initial[0])
        stats = RunStats.create(run_id, [setup.agent])
        stats.set(setup.agent, S.UPDATES, remote["updates"])
        self.remote = True
        self.own = _OwnMemory(buffer, publisher, stats)
        self.setup = dataclasses.replace(setup, buffer=buffer, slot=publisher, stats=stats, parent_pid=0)
        return run_id, os.getpid()  # how the host removes these segments if this actor dies on its machine

    def run(self, checkpoint_every_s: float, driver_pid: int) -> dict[str, Any] | None:
        """The learning loop, until `stop` (or the run's stop flag in shared-memory mode). Remote mode returns
        the learner's final counters (`status`)."""
        setup = self._prepared()
        if setup.checkpoint_path:
            os.makedirs(os.path.dirname(setup.checkpoint_path), exist_ok=True)
        if not self.remote:
            learner_process_main(setup, self.messages, checkpoint_every_s,
                                 is_orphaned=lambda: not _alive(driver_pid))
            return None
        try:
            # The loop closes the buffer and counters when it ends; take the final figures just before.
            learner_process_main(setup, _FinalStatus(self, setup), checkpoint_every_s, is_orphaned=lambda: False)
        finally:
            with self._lock:
                final = self._final
                self.closed = True
            own = self._own()
            own.buffer.unlink()
            own.stats.unlink()
        return final

    def push(self, seq: int, chunk: dict[str, np.ndarray]) -> int:
        """Append a chunk of transitions, in sequence order (early ones wait); returns the in-order reader's
        position (transitions read or dropped), which the pump's backpressure uses."""
        with self._lock:
            if self.closed:
                return 0
            self._early[seq] = chunk
            buffer = self._own().buffer
            while self._next_chunk in self._early:
                buffer.write_rows(self._early.pop(self._next_chunk))
                self._next_chunk += 1
            return buffer.read_cursor

    def status(self, progress: float = 0.0) -> dict[str, int | float] | None:
        """The learner's counters (remote mode), or None once it has finished. `progress`: the run's share of its
        budget spent, as the driver's counters hold it (the learner's schedules read it from its own)."""
        with self._lock:
            if self.closed:
                return None
            self._own().stats.set_progress(progress)
            return self._status()

    def _status(self) -> dict[str, int | float]:
        own, agent = self._own(), self._prepared().agent
        stats, buffer = own.stats, own.buffer
        return {"updates": stats.get(agent, S.UPDATES), "status": stats.get(agent, S.STATUS),
                "silent_s": (time.monotonic_ns() - stats.get(agent, S.BEAT)) / 1e9,
                "learner_wait_ns": stats.get(agent, S.LEARNER_WAIT_NS), "dropped": buffer.dropped,
                "received": buffer.written, "unread": buffer.unread, "cursor": buffer.read_cursor}

    def policy_newer_than(self, version: int, wait_s: float = 0.0) -> tuple[int, np.ndarray] | None:
        return self._own().publisher.newer_than(version, wait_s)

    def drain(self) -> list[Any]:
        return drain(self.messages)

    def stop(self) -> None:
        with self._lock:
            if not self.closed:
                self._prepared().transport()[2].request_stop()

    def _prepared(self) -> LearnerSetup:
        """The setup `prepare` was given (made local in remote mode)."""
        if self.setup is None:
            raise RuntimeError("LearnerActor: prepare() has not been called")
        return self.setup

    def _own(self) -> _OwnMemory:
        """Remote mode's buffer, publisher and counters."""
        if self.own is None:
            raise RuntimeError("LearnerActor: a remote-mode call in shared-memory mode (or before prepare())")
        return self.own


class _FinalStatus:
    """The remote learner's message sink: passes messages on, and records the final counters when the loop's
    last report arrives (after that the loop closes its buffer and counters)."""

    def __init__(self, owner: LearnerActor, setup: LearnerSetup) -> None:
        self.owner, self.setup = owner, setup

    def put(self, message: LearnerReport | LearnerFailed, /) -> None:
        if isinstance(message, LearnerReport) and self.setup.transport()[2].stop_requested:
            with self.owner._lock:
                self.owner._final = self.owner._status()
        self.owner.messages.put(message)


class RemoteRun:
    """The whole async run (actor, monitor, learner host) inside a Ray actor, on the node Ray places it
    (`RunConfig.ray_actor_resources`); the caller's process only waits for the `RunResult`."""

    def __init__(self, env: Any, learners: Any, config: Any, sys_path: list[str]) -> None:
        import ray

        adopt_sys_path(sys_path)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.runner = AsyncRunner(env, learners, config)

    def run(self, agent_steps: int | None, seconds: float | None) -> RunResult:
        result = self.runner.run(agent_steps=agent_steps, seconds=seconds)
        result.actor_node = self.node_id
        return result

    def stop(self, reason: str) -> None:
        monitor = self.runner.monitor
        if monitor is not None:
            monitor.request_stop(reason)
