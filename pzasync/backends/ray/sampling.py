"""What runs inside Ray's processes for actors 1..M-1 as Ray actors (backends/ray/actors.py drives them).

- `ActorWorker`: one actor of the run (`RunConfig.actors`): the actor process body that local actor processes
  run (`actor_pool.actor_process_main`), in a Ray actor. On the driver's node it attaches to the run's shared
  memory and writes its own buffer shards as a local actor process does. On another node it attaches to its
  node's `NodeRelay` instead.
- `NodeRelay`: one per node that runs actors away from the driver. It owns that node's copy of the run's
  shared memory (a detached copy of the plan, allocated there: policy slots, buffer shards, counters), so
  the node's actors run exactly as on the driver's node. It is the *policy relay*: each published version
  reaches it once (one object fetch per node and version) and it publishes it into the node's slots, which
  every actor there reads. It is the *forwarder*: a thread reads each of its actors' shards in order
  (`read_new`, so what was overwritten before it was read is counted dropped in that shard) and queues
  chunks (`chunks.pack`) that the driver takes with `take`; while the driver has not taken
  `max_chunks` chunks, it reads nothing more and the rings absorb the burst: no actor waits.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from typing import Any

import numpy as np

from pzasync.backends.ray.chunks import pack
from pzasync.backends.ray.workers import adopt_sys_path, drain
from pzasync.runtime.actor_pool import ActorSetup, actor_process_main
from pzasync.runtime.allocation import allocate, release
from pzasync.transport import stats as S
from pzasync.transport.shm import new_run_id

#: The forwarder's sleep when no actor of its node has written anything new.
FORWARD_IDLE_S = 0.002


class _Outbox:
    """`actor_process_main`'s pipe end in a Ray actor: its messages wait here until the driver drains them."""

    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()

    def send(self, message: Any, /) -> None:
        self.messages.put(message)

    def close(self) -> None:
        pass

    def drain(self) -> list[Any]:
        return drain(self.messages)


class ActorWorker:
    """Actor `k` of a run as a Ray actor: `run` holds the actor's loop (its own thread); `drain` hands the driver
    the actor's messages (readiness, episodes, progress, closing figures, failure) from another."""

    def __init__(self, sys_path: list[str]) -> None:
        import ray

        adopt_sys_path(sys_path)  # before any call's arguments are unpickled here (the plan names user classes)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.outbox = _Outbox()

    def node(self) -> str:
        """The Ray node this actor runs on."""
        return self.node_id

    def pid(self) -> int:
        """This Ray actor's process id (on its node)."""
        return os.getpid()

    def run(self, setup: ActorSetup | None, relay: Any, request: dict[str, Any] | None) -> None:
        """Act as `actor_process_main` does. `setup` on the driver's node; else None, and the setup comes from
        this node's `relay` (`NodeRelay.add_actor(**request)`), attached to this node's shared memory."""
        if setup is None:
            import ray

            setup = ray.get(relay.add_actor.remote(**(request or {})))
        actor_process_main(setup, self.outbox)

    def drain(self) -> list[Any]:
        """The actor's messages since the last call."""
        return self.outbox.drain()


class NodeRelay:
    """A node's copy of the run's shared memory for the actors Ray placed there, the policy relay into its
    slots and the forwarder of its actors' transitions (see the module doc)."""

    def __init__(self, sys_path: list[str]) -> None:
        import ray

        adopt_sys_path(sys_path)  # before `prepare`'s plan is unpickled here (it names user classes)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.plan: Any = None
        #: Rows a chunk carries at most, per learning unit (`chunks.chunk_rows`).
        self.chunk_rows: dict[str, int] = {}
        self.max_chunks = 32
        #: Actor indices whose shards the forwarder reads.
        self.actors: set[int] = set()
        self.out: collections.deque = collections.deque()
        self._cond = threading.Condition()
        #: Held for each read of a shard (the forwarder's, or `take`'s final one, or `retire`'s).
        self._reading = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        #: Versions published here per unit, and how many (each one fetched once by this node).
        self.versions: dict[str, int] = {}
        self.fetches = 0

    def node(self) -> str:
        """The Ray node this relay serves."""
        return self.node_id

    def prepare(self, plan: Any, initial: dict[str, tuple[int, np.ndarray]], chunk_rows: dict[str, int],
                max_chunks: int) -> tuple[str, int]:
        """Allocate this node's copy of the run's memory from a detached plan (`allocation.detached`), publish
        the policies the learners have published so far, start the forwarder. Returns (run id, pid), which name
        the segments here (removed by the driver if this relay dies on its machine)."""
        plan.run_id = new_run_id()
        for unit in plan.learning:  # each shard here holds two chunks, however small the learner's buffer
            unit.capacity = max(unit.capacity, plan.actors * 2 * chunk_rows[unit.agent])
        allocate(plan)
        self.plan, self.chunk_rows, self.max_chunks = plan, chunk_rows, max_chunks
        for unit, (version, vector) in initial.items():
            self._publish(unit, version, vector)
        self._thread = threading.Thread(target=self._forward_loop, name="pzasync-forwarder", daemon=True)
        self._thread.start()
        return plan.run_id, os.getpid()

    def add_actor(self, index: int, agent_steps: int | None, resumed_steps: dict[str, int],
                  carried: dict[str, Any] | None) -> ActorSetup:
        """The setup of actor `index` on this node (it attaches to this node's memory when unpickled here). It
        is never paced: an actor away from its learners never waits for them."""
        with self._cond:
            self.actors.add(index)
        return ActorSetup(index, self.plan, agent_steps, False, os.getpid(), dict(resumed_steps), carried=carried,
                          progress=True)

    # ------------------------------------------------------------------------------------------ policies
    def publish(self, unit: str, version: int, vector: np.ndarray) -> float:
        """A new version of `unit`'s policy (its vector fetched to this node once, as this call's argument)
        into this node's slot; returns the wall time it was there."""
        self.fetches += 1
        self._publish(unit, version, vector)
        return time.time()

    def _publish(self, unit: str, version: int, vector: np.ndarray) -> None:
        slot = self.plan.units[unit].slot
        if version > slot.version:
            slot.publish(vector, version=version)
            self.plan.counters().set(unit, S.VERSION, version)
        self.versions[unit] = max(version, self.versions.get(unit, 0))

    # ------------------------------------------------------------------------------------------ control
    def go(self) -> None:
        """Every actor of the run is ready: this node's actors start acting."""
        self.plan.counters().let_actors_go()

    def stop(self) -> None:
        """The run stops: this node's actors stop at their next decision."""
        if self.plan is not None:
            self.plan.counters().request_stop()

    # ------------------------------------------------------------------------------------------ transitions
    def _forward_loop(self) -> None:
        while not self._closing.is_set():
            busy = False
            for k in sorted(self.actors):
                if len(self.out) >= self.max_chunks:
                    break
                busy |= self._forward(k, self.chunk_rows) > 0
            if not busy:
                self._closing.wait(FORWARD_IDLE_S)

    def _forward(self, k: int, max_rows: dict[str, int] | None) -> int:
        """Read actor `k`'s new transitions of every unit (one chunk of at most `max_rows[unit]` each, or
        everything there when None) into chunks; rows read."""
        n = 0
        with self._reading:
            for unit in self.plan.learning:
                shard = unit.buffer.shard(k)
                while (rows := shard.read_new(None if max_rows is None else max_rows[unit.agent])) is not None:
                    chunk = pack(rows)
                    n += len(rows["reward"])
                    with self._cond:
                        self.out.append((k, unit.agent, chunk))
                        self._cond.notify_all()
                    if max_rows is not None:
                        break
        return n

    def take(self, wait_s: float, stage: int = 0, final: bool = False) -> dict[str, Any]:
        """The chunks forwarded since the last call, in order (waiting up to `wait_s` for one), and the status of
        this node's actors: their counters' words, seconds since their heartbeat, and per unit what each
        wrote to its shard here and what was overwritten before it was read. `stage`: the run's curriculum
        stage. `final`: the actors are done; every row still in their shards is read and returned now."""
        plan = self.plan
        stats = plan.counters()
        if stats.curriculum_stage != stage:
            stats.set_curriculum_stage(stage)
        if final:
            self._closing.set()
            if self._thread is not None:
                self._thread.join(timeout=10)
            for k in sorted(self.actors):
                self._forward(k, None)
        with self._cond:
            if not self.out and wait_s > 0:
                self._cond.wait(timeout=wait_s)
            chunks = list(self.out)
            self.out.clear()
        return {"chunks": chunks, "status": self._status(), "fetches": self.fetches}

    def retire(self, k: int) -> list[Any]:
        """Actor `k` moves away from this node (it died, and its next life is elsewhere): the chunks of what it
        wrote here that were not yet taken, and nothing more of it after."""
        with self._reading:
            with self._cond:
                self.actors.discard(k)
                mine = [c for c in self.out if c[0] == k]
                kept = [c for c in self.out if c[0] != k]
                self.out.clear()
                self.out.extend(kept)
            for unit in self.plan.learning:
                while (batch := unit.buffer.shard(k).read_new(None)) is not None:
                    mine.append((k, unit.agent, pack(batch)))
        return mine

    def _status(self) -> dict[int, dict[str, Any]]:
        plan = self.plan
        stats = plan.counters()
        now = time.monotonic_ns()
        out = {}
        for k in sorted(self.actors):
            beat = int(stats.actor_words[k, S.ACTOR_BEAT])
            out[k] = {"words": stats.actor_words[k].tolist(), "agents": stats.actor_agent[k].tolist(),
                      "silent_s": (now - beat) / 1e9 if beat else None,
                      "written": {u.agent: u.buffer.shard(k).written for u in plan.learning},
                      "dropped": {u.agent: u.buffer.shard(k).dropped for u in plan.learning}}
        return out

    def close(self) -> None:
        """Stop the forwarder and remove this node's copy of the run's memory."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.plan is not None:
            release(self.plan)
