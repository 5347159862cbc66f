"""Actors 1..M-1 as Ray actors on any node (`RunConfig.actors` with `backend="ray"`, docs/distributed.md).

`RayActorPool` is the Ray backend's `ActorPool`: the runner starts, polls, waits for and stops it the same way.
Each actor is an `ActorWorker` (sampling.py) asking for `ray_actor_pool_cpus` and `ray_actor_pool_resources`,
running the body local actor processes run, with its own env copies (or env workers, or remote copies),
seeds, policy copies and league-free schedule, exactly as actor process k would. Once Ray has placed it:

- **On the driver's node** (transport "shm"): it attaches to the run's shared memory and writes its own shard
  of every unit's buffer, as a local actor process does.
- **On another node** (transport "object_store"; every actor with `ray_transport="object_store"`): it runs
  on that node's copy of the run's memory, held by the node's `NodeRelay`. The relay forwards what it writes
  in chunks; this pool's thread takes them and writes them, in order, into the actor's shard here
  (`write_rows`), which the learner reads with all the others. Each version a learner publishes is put into
  the object store once and sent to each relay, which publishes it into its node's slot: one fetch per node
  and version. The relay's status mirrors the node's actors' counters into the run's.

Accounting per actor and unit: what it wrote = what reached its shard here + what was overwritten in its node's
shard before it was forwarded (counted dropped) + what was lost with a node that died (counted dropped, as of
the node's last status). A run that stops takes every chunk still on the nodes first, so nothing is in transit.

Failures: an actor (or its node) that dies is restarted, on whatever node Ray picks, with the budget its earlier
lives left and their counts carried on, up to `ray_max_actor_restarts` times; past that the run stops with one
line naming the actor and its node. The run's stop (budget, Ctrl-C, SIGTERM, a failure) reaches every node.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import sys
import threading
import time
from typing import Any

import numpy as np

from pzasync.backends.ray.chunks import chunk_rows, nbytes, rows_in, unpack
from pzasync.backends.ray.sampling import ActorWorker, NodeRelay
from pzasync.errors import EnvCrashedError, PzasyncError, remote_error
from pzasync.logs import logger
from pzasync.runtime.actor_pool import ActorDone, ActorFailed, ActorPool, ActorProgress, ActorReady, ActorSetup
from pzasync.runtime.allocation import detached
from pzasync.transport import stats as S
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.shards import ShardedBuffer
from pzasync.transport.shm import unlink_run
from pzasync.transport.slots import PolicySlot

#: How long the relay holds a `take` call when it has no chunk, and how often actors' messages are drained.
TAKE_WAIT_S = 0.05
DRAIN_EVERY_S = 0.1
POOL_IDLE_S = 0.005
#: At the end of a run, how long rows may wait for a learner that reads nothing before `stop` writes them anyway.
STALLED_S = 2.0


@dataclasses.dataclass
class _Life:
    """One life of an actor: its Ray actor, where it ran, its calls outstanding and what it wrote."""

    worker: Any
    node: str
    transport: str
    run_ref: Any = None
    drain_ref: Any = None
    next_drain: float = 0.0
    #: Per agent, transitions written (its last `ActorProgress`, or its `ActorDone`).
    written: dict[str, int] = dataclasses.field(default_factory=dict)
    over: bool = False
    #: It sent its closing figures (or its failure).
    reported: bool = False


@dataclasses.dataclass
class _Relay:
    """The driver's side of one node's relay: its actor, its calls outstanding, and per (actor, unit) what it
    forwarded and what its shards said last."""

    actor: Any
    node: str
    segments: tuple[str, int] | None = None
    take_ref: Any = None
    publish_refs: dict[str, tuple[Any, int, float]] = dataclasses.field(default_factory=dict)
    sent: dict[str, int] = dataclasses.field(default_factory=dict)
    received: dict[tuple[int, str], int] = dataclasses.field(default_factory=dict)
    status: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    fetches: int = 0
    dead: bool = False


@dataclasses.dataclass
class _Actor:
    """Actor k over its lives."""

    index: int
    budget: int | None
    lives: list[_Life] = dataclasses.field(default_factory=list)
    restarts: int = 0
    #: Policy lag of the rows that came through this pool (object-store lives), summed, and their count.
    lag_sum: float = 0.0
    lag_rows: int = 0

    @property
    def life(self) -> _Life:
        return self.lives[-1]


class RayActorPool(ActorPool):
    """Actors 1..M-1 as Ray actors (see the module doc); the runner drives it as it drives `ActorPool`."""

    def __init__(self, plan: Any, budgets: list[int | None], paced: bool, resumed_steps: dict[str, int],
                 timeout_s: float, heartbeat_timeout_s: float | None = None) -> None:
        super().__init__(plan, budgets, paced, resumed_steps, timeout_s, heartbeat_timeout_s)
        import ray

        self.paced, self.resumed_steps = paced, dict(resumed_steps)
        self.ray = ray
        self.config = plan.config
        self.driver_node = ray.get_runtime_context().get_node_id()
        self.actors: dict[int, _Actor] = {k: _Actor(k, budgets[k]) for k in range(1, plan.actors)}
        self.relays: dict[str, _Relay] = {}
        #: Relays that died and were replaced by a new one on the same node.
        self.gone: list[_Relay] = []
        #: Per unit: the driver's writer of each object-store actor's shard (attached afresh for each life).
        self._writers: dict[tuple[int, str], SharedRingBuffer] = {}
        #: Messages from the pool's thread to `poll`, which handles them on the runner's thread.
        self.inbox: queue.Queue = queue.Queue()
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._quit = threading.Event()
        self._worker_class: Any = None
        self._relay_class: Any = None
        self._refs: dict[tuple[str, int], Any] = {}
        self._ready_now: set | None = None
        #: Per (actor, unit): rows taken from its node, waiting for room in its shard here (`_flush`).
        self._pending: dict[tuple[int, str], collections.deque] = {}
        #: Seconds from a version's put to its publication in a node's slot, per node.
        self.version_latency: dict[str, list[float]] = {}
        self.acting_since: float | None = None
        self.stopped_at: float | None = None
        self.bytes_received = 0
        self.rows_received = 0
        self._rows_per_chunk: dict[str, int] | None = None

    # ------------------------------------------------------------------------------------------ start
    def start(self) -> None:
        """Create every actor's Ray actor, learn where Ray placed it, prepare the relays of nodes other than this
        one, and start the actors building their env copies (they act on the go, `start_acting`)."""
        ray = self.ray
        self._worker_class = ray.remote(max_concurrency=3)(ActorWorker)
        self._relay_class = ray.remote(max_concurrency=4)(NodeRelay)
        workers = {k: self._new_worker() for k in self.actors}
        try:
            nodes = ray.get([w.node.remote() for w in workers.values()], timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            for worker in workers.values():
                self._kill(worker)
            cfg = self.config
            raise PzasyncError(
                f"Ray could not place actors 1..{len(self.actors)} within {self.timeout_s:g}s: no node offers "
                f"ray_actor_pool_cpus={cfg.ray_actor_pool_cpus:g} and ray_actor_pool_resources="
                f"{dict(cfg.ray_actor_pool_resources)} for each (RunConfig.process_timeout_s)") from None
        for (k, worker), node in zip(workers.items(), nodes):
            self._begin_life(self.actors[k], worker, node, carried=None)
        self._thread = threading.Thread(target=self._pump_loop, name="pzasync-ray-actors", daemon=True)
        self._thread.start()

    def _new_worker(self) -> Any:
        cfg = self.config
        return self._worker_class.options(num_cpus=cfg.ray_actor_pool_cpus,
                                          resources=dict(cfg.ray_actor_pool_resources), max_restarts=0
                                          ).remote(list(sys.path))

    def _remote(self, node: str) -> bool:
        return self.config.ray_transport == "object_store" or node != self.driver_node

    def _begin_life(self, actor: _Actor, worker: Any, node: str, carried: dict[str, Any] | None) -> None:
        """Start one life of `actor` on `worker`, placed on `node`."""
        k = actor.index
        budget = actor.budget
        if carried is not None and budget is not None:
            budget = max(0, budget - carried["total"])
        life = _Life(worker, node, "object_store" if self._remote(node) else "shm")
        if life.transport == "shm":
            for unit in self._units():  # the shard's one writer is the actor from now on
                self._flush(k, unit, everything=True)
                old = self._writers.pop((k, unit), None)
                if old is not None:
                    old.close()
            setup = ActorSetup(k, self.plan, budget, self.paced, os.getpid(), dict(self.resumed_steps),
                               carried=carried, progress=True)
            life.run_ref = worker.run.remote(setup, None, None)
        else:
            relay = self._relay(node)
            for unit in self._units():
                reduce, args = self._shard(k, unit).__reduce__()
                old = self._writers.pop((k, unit), None)
                if old is not None:
                    old.close()
                self._writers[(k, unit)] = reduce(*args)  # a writer whose counts are the shard's, now
            request = {"index": k, "agent_steps": budget, "carried": carried,
                       "resumed_steps": dict(self.resumed_steps)}
            life.run_ref = worker.run.remote(None, relay.actor, request)
        actor.lives.append(life)

    def _units(self) -> list[str]:
        return [p.agent for p in self.plan.learning]

    def _shard(self, k: int, unit: str) -> SharedRingBuffer:
        """Actor k's shard of `unit`'s buffer on this node."""
        buffer = self.plan.units[unit].buffer
        if not isinstance(buffer, ShardedBuffer):
            raise RuntimeError(f"learner unit {unit!r} has no buffer shards (actors > 1 has one per actor)")
        return buffer.shard(k)

    def _chunk_rows(self) -> dict[str, int]:
        """Rows a chunk from another node carries at most, per unit (`ray_chunk_rows`)."""
        if self._rows_per_chunk is None:
            self._rows_per_chunk = {unit: chunk_rows(self.config.ray_chunk_rows, self._shard(0, unit).row_nbytes)
                                    for unit in self._units()}
        return self._rows_per_chunk

    def _slot(self, unit: str) -> PolicySlot:
        slot = self.plan.units[unit].slot
        if slot is None:
            raise RuntimeError(f"learner unit {unit!r} has no policy slot")
        return slot

    def _relay(self, node: str) -> _Relay:
        """The relay of `node`, made and prepared the first time an actor lands there."""
        relay = self.relays.get(node)
        if relay is not None and not relay.dead:
            return relay
        if relay is not None:
            self.gone.append(relay)  # its figures still count (`dropped`)
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        on_node = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        handle = self._relay_class.options(num_cpus=0, max_restarts=0, scheduling_strategy=on_node
                                           ).remote(list(sys.path))
        initial = {}
        for unit in self._units():
            slot = self._slot(unit)
            vector = np.zeros(slot.size, np.float32)
            version = slot.read(vector)
            if version:
                initial[unit] = (version, vector)
        cfg = self.config
        segments = ray.get(handle.prepare.remote(detached(self.plan), initial, self._chunk_rows(),
                                                 cfg.ray_max_chunks_in_flight * max(1, len(self.actors))),
                                 timeout=self.timeout_s)
        relay = self.relays[node] = _Relay(handle, node, tuple(segments),
                                           sent={u: v for u, (v, _x) in initial.items()})
        return relay

    def start_acting(self, monitor: Any) -> None:
        """Wait until every actor is ready, then let them all act (this node's by the run's go word, the
        others' by their relay's)."""
        deadline, stats = time.monotonic() + self.timeout_s, self.plan.counters()
        try:
            while len(self.ready) < len(self.actors) and self.fatal is None and not stats.stop_requested:
                self.poll(monitor)
                if time.monotonic() > deadline:
                    late = sorted(set(self.actors) - self.ready)
                    self._fail(monitor, PzasyncError(
                        f"Ray actor(s) {late} did not finish building their env copies and policies within "
                        f"{self.timeout_s:g}s (RunConfig.process_timeout_s)"))
                    break
                time.sleep(0.005)
        finally:
            stats.let_actors_go()
            with self._lock:
                relays = [r for r in self.relays.values() if not r.dead]
            for ref in [r.actor.go.remote() for r in relays]:
                try:
                    self.ray.get(ref, timeout=self.timeout_s)
                except Exception:  # noqa: BLE001 - a dead relay: its actors' deaths are reported
                    pass
            self.acting_since = time.monotonic()

    # ------------------------------------------------------------------------------------------ the pump
    def _pump_loop(self) -> None:
        """Takes chunks and statuses from the relays, sends them new policies, drains every actor's messages and
        notices deaths; never touches the monitor (its messages go through the inbox)."""
        told = False
        while not self._quit.is_set():
            busy = False
            if not told and self.plan.counters().stop_requested:
                told = True
                self._tell_relays_to_stop()
            with self._lock:
                self._ready_now = self._ready_refs()
                for relay in list(self.relays.values()):
                    if not relay.dead:
                        try:
                            busy |= self._pump_relay(relay)
                        except Exception as exc:  # noqa: BLE001 - a call to the relay failed: its node is gone
                            self._relay_died(relay, exc)
                for actor in self.actors.values():
                    if actor.lives:
                        self._pump_actor(actor)
                self._ready_now = None
            if not busy:
                self._quit.wait(POOL_IDLE_S)

    def _ready_refs(self) -> set:
        """The calls outstanding that have finished, found with one `ray.wait` (each Ray call takes the GIL the
        runner's own actor needs)."""
        refs = []
        for relay in self.relays.values():
            if not relay.dead:
                refs += [r for r in [relay.take_ref, *(p[0] for p in relay.publish_refs.values())] if r is not None]
        for actor in self.actors.values():
            if actor.lives and not actor.life.over:
                refs += [r for r in (actor.life.drain_ref, actor.life.run_ref) if r is not None]
        return set(self.ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()

    def _ready(self, ref: Any) -> bool:
        if self._ready_now is not None:
            return ref in self._ready_now
        return bool(self.ray.wait([ref], timeout=0)[0])

    def _pump_relay(self, relay: _Relay) -> bool:
        busy = False
        for unit in self._units():
            busy |= self._send_policy(relay, unit)
        for (k, unit) in list(self._pending):
            self._flush(k, unit)
        if relay.take_ref is None:
            if self._held_back(relay) > self.config.ray_max_chunks_in_flight * max(self._chunk_rows().values()):
                return busy  # its actors' rings hold the rest: what they overwrite is counted there
            relay.take_ref = relay.actor.take.remote(TAKE_WAIT_S, self.plan.counters().curriculum_stage)
        if not self._ready(relay.take_ref):
            return busy
        return self._taken(relay) or busy

    def _taken(self, relay: _Relay) -> bool:
        """Handle the answer of the relay's `take` call (ready): its chunks, its status."""
        answer = self.ray.get(relay.take_ref)
        relay.take_ref = None
        self._receive(relay, answer["chunks"])
        relay.status = answer["status"]
        relay.fetches = answer["fetches"]
        self._mirror(relay)
        return bool(answer["chunks"])

    def _final_take(self, relay: _Relay, everything: bool = True) -> None:
        """The run is over: the answer of the call outstanding, then everything the node still holds."""
        if relay.take_ref is not None:
            self.ray.wait([relay.take_ref], timeout=self.timeout_s)
            self._taken(relay)
        relay.take_ref = relay.actor.take.remote(0.0, self.plan.counters().curriculum_stage, True)
        self.ray.wait([relay.take_ref], timeout=self.timeout_s)
        self._taken(relay)
        for (k, unit) in list(self._pending):
            self._flush(k, unit, everything=everything)

    def _receive(self, relay: _Relay, chunks: list[Any]) -> None:
        """Take the chunks, in order, for the actors' shards here (`_flush` writes them)."""
        stats = self.plan.counters()
        for k, unit, chunk in chunks:
            if (k, unit) not in self._writers:
                continue
            rows = unpack(chunk)
            n = rows_in(chunk)
            relay.received[(k, unit)] = relay.received.get((k, unit), 0) + n
            self.rows_received += n
            self.bytes_received += nbytes(chunk)
            actor = self.actors[k]
            actor.lag_sum += float((stats.get(unit, S.VERSION) - rows["policy_version"]).sum())
            actor.lag_rows += n
            self._pending.setdefault((k, unit), collections.deque()).append(rows)
            self._flush(k, unit)

    def _flush(self, k: int, unit: str, everything: bool = False) -> None:
        """Append what came for actor k's shard of `unit`, in order: for an on-policy learner only as much as its
        shard holds unread (a chunk larger than the shard would overwrite itself), the rest on the next call;
        for an off-policy learner (or `everything`, at the end) all of it."""
        pending = self._pending.get((k, unit))
        writer = self._writers.get((k, unit))
        if not pending or writer is None:
            return
        limited = self.plan.units[unit].learner_cls.on_policy and not everything
        while pending:
            rows = pending[0]
            n = len(rows["reward"])
            room = writer.capacity - writer.unread if limited else n
            if room <= 0:
                return
            if room < n:
                writer.write_rows({name: values[:room] for name, values in rows.items()})
                pending[0] = {name: values[room:] for name, values in rows.items()}
                return
            writer.write_rows(rows)
            pending.popleft()

    def _held_back(self, relay: _Relay) -> int:
        """Rows taken from `relay` that wait here for room in their shards."""
        return sum(len(rows["reward"]) for (k, _u), queue_ in self._pending.items() for rows in queue_
                   if self.actors[k].life.node == relay.node)

    def _mirror(self, relay: _Relay) -> None:
        """The relay's actors' counter words into the run's (this thread writes those words for them)."""
        stats = self.plan.counters()
        now = time.monotonic_ns()
        for k, status in relay.status.items():
            actor = self.actors.get(k)
            if actor is None or actor.life.node != relay.node or actor.life.transport != "object_store":
                continue
            words = status["words"]
            stats.actor_words[k, S.AGENT_STEPS] = words[S.AGENT_STEPS]
            stats.actor_words[k, S.EPISODES] = words[S.EPISODES]
            if status["silent_s"] is not None:
                stats.actor_words[k, S.ACTOR_BEAT] = now - int(status["silent_s"] * 1e9)
            stats.actor_agent[k] = np.asarray(status["agents"], np.int64)

    def _final_counts(self, k: int, words: list, agents: list) -> None:
        """An actor away from this node finished: its last counts, whatever its relay said last."""
        stats = self.plan.counters()
        stats.actor_words[k, S.AGENT_STEPS] = words[S.AGENT_STEPS]
        stats.actor_words[k, S.EPISODES] = words[S.EPISODES]
        stats.actor_agent[k] = np.asarray(agents, np.int64)

    def _send_policy(self, relay: _Relay, unit: str) -> bool:
        """The unit's newest version to the relay, if it lacks it and has none on its way (one put per version,
        shared by every relay)."""
        ray = self.ray
        pending = relay.publish_refs.get(unit)
        if pending is not None:
            ref, version, put_at = pending
            if not self._ready(ref):
                return False
            published_at = ray.get(ref)
            relay.publish_refs.pop(unit)
            relay.sent[unit] = max(relay.sent.get(unit, 0), version)
            self.version_latency.setdefault(relay.node, []).append(max(0.0, published_at - put_at))
        slot = self._slot(unit)
        if slot.version <= relay.sent.get(unit, 0):
            return False
        key = (unit, slot.version)
        put_at = time.time()
        if key not in self._refs:
            vector = np.zeros(slot.size, np.float32)
            version = slot.read(vector)
            key = (unit, version)
            for old in [k for k in self._refs if k[0] == unit]:
                del self._refs[old]
            self._refs[key] = ray.put(vector)
        relay.publish_refs[unit] = (relay.actor.publish.remote(unit, key[1], self._refs[key]), key[1], put_at)
        return True

    def _pump_actor(self, actor: _Actor) -> None:
        ray, life = self.ray, actor.life
        if life.over:
            return
        now = time.monotonic()
        if life.drain_ref is None and now >= life.next_drain:
            life.drain_ref = life.worker.drain.remote()
            life.next_drain = now + DRAIN_EVERY_S
        if life.drain_ref is not None and self._ready(life.drain_ref):
            try:
                for message in ray.get(life.drain_ref):
                    self._take_message(actor, life, message)
            except Exception:  # noqa: BLE001 - the actor died; its run call says so below
                pass
            life.drain_ref = None
        if self._ready(life.run_ref):
            life.over = True
            try:
                ray.get(life.run_ref)
                self._collect(actor, life)
                if not life.reported:
                    raise RuntimeError("its loop ended without a report (its node's relay gone?)")
            except Exception as exc:  # noqa: BLE001 - the actor (or its node) died
                self._actor_died(actor, life, exc)

    def _take_message(self, actor: _Actor, life: _Life, message: Any) -> None:
        if isinstance(message, ActorProgress):
            life.written = dict(message.written)
            return
        if isinstance(message, ActorDone):
            life.written = dict(message.written)
            if life.transport == "object_store" and message.counters is not None:
                self._final_counts(actor.index, *message.counters)
        if isinstance(message, (ActorDone, ActorFailed)):
            life.reported = True
        self.inbox.put((actor.index, message))

    def _collect(self, actor: _Actor, life: _Life) -> None:
        """A life that returned: its last messages (those of the drain call still outstanding first)."""
        refs = [life.drain_ref] if life.drain_ref is not None else []
        life.drain_ref = None
        try:
            refs.append(life.worker.drain.remote())
        except Exception:  # noqa: BLE001 - gone already
            pass
        for ref in refs:
            try:
                for message in self.ray.get(ref, timeout=10):
                    self._take_message(actor, life, message)
            except Exception:  # noqa: BLE001 - gone already
                pass

    # ------------------------------------------------------------------------------------------ failures
    def _actor_died(self, actor: _Actor, life: _Life, exc: BaseException) -> None:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        where = f"actor {actor.index} (Ray actor on node {life.node[:12]})"
        stats = self.plan.counters()
        if stats.stop_requested or actor.index in self.done:
            self.inbox.put((actor.index, ActorDone(actor.index, {}, {}, 0.0, 0.0)))
            return
        if actor.restarts >= self.config.ray_max_actor_restarts:
            self.inbox.put((actor.index, EnvCrashedError(
                f"{where} died ({type(exc).__name__}{': ' + why[:120] if why else ''}); restart budget "
                f"ray_max_actor_restarts={self.config.ray_max_actor_restarts} spent")))
            return
        k = actor.index
        carried = {"total": int(stats.actor_words[k, S.AGENT_STEPS]), "episodes": int(stats.actor_words[k, S.EPISODES]),
                   "steps": {a: int(stats.actor_agent[k, i, 0]) for a, i in stats.index.items()}}
        actor.restarts += 1
        self.inbox.put((k, f"{where} died ({type(exc).__name__}); restarting it "
                           f"({actor.restarts}/{self.config.ray_max_actor_restarts})"))
        try:
            self.ray.kill(life.worker, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
        worker = self._new_worker()
        try:
            node = self.ray.get(worker.node.remote(), timeout=self.timeout_s)
            old = self.relays.get(life.node)
            if life.transport == "object_store" and old is not None and not old.dead and (
                    node != life.node or not self._remote(node)):
                self._receive(old, self.ray.get(old.actor.retire.remote(k), timeout=self.timeout_s))
            self._begin_life(actor, worker, node, carried)
            relay = self.relays.get(node)
            if relay is not None and actor.life.transport == "object_store":
                self.ray.get(relay.actor.go.remote(), timeout=self.timeout_s)
        except Exception as restart_error:  # noqa: BLE001 - the restart itself failed
            self.inbox.put((k, EnvCrashedError(f"{where} died and could not be restarted: {restart_error}")))

    def _relay_died(self, relay: _Relay, exc: BaseException) -> None:
        """A node's relay is gone (its node removed, or unreachable): what its actors wrote and was not forwarded
        is lost, and its actors, which can no longer deliver anything, are killed and handled as dead."""
        relay.dead = True
        self._kill(relay.actor)
        if relay.segments is not None:
            unlink_run(*relay.segments)  # on this machine only; elsewhere the next run there removes them
        logger.warning(f"the actors' relay on node {relay.node[:12]} is gone ({type(exc).__name__})")
        for actor in list(self.actors.values()):
            life = actor.life if actor.lives else None
            if life is not None and not life.over and life.node == relay.node and life.transport == "object_store":
                life.over = True
                self._actor_died(actor, life, exc)

    # ------------------------------------------------------------------------------------------ runner's side
    def poll(self, monitor: Any) -> None:
        """The actors' readiness, episodes, closing figures and failures, on the runner's thread."""
        while True:
            try:
                k, message = self.inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(message, ActorReady):
                self.ready.add(k)
            elif isinstance(message, ActorDone):
                self.done[k] = message
            elif isinstance(message, ActorFailed):
                logger.error(f"actor {k} failed:\n{message.traceback}")
                self._fail(monitor, remote_error(EnvCrashedError, message.error_type, f"actor {k}: {message.message}",
                                                 message.traceback))
                self.done[k] = ActorDone(k, {}, {}, 0.0, 0.0)
            elif isinstance(message, PzasyncError):
                self._fail(monitor, message)
            elif isinstance(message, str):
                logger.warning(message)
            else:
                for summary in message:
                    monitor.episode(summary, actor=k)

    @property
    def running(self) -> bool:
        return any(k not in self.done for k in self.actors) and self.fatal is None

    def wait(self, monitor: Any) -> None:
        """Poll until every actor has finished (its budget, or the run's stop flag)."""
        while self.running:
            if not monitor.tick():
                break
            self.poll(monitor)
            time.sleep(0.01)
        self._tell_relays_to_stop()
        deadline = time.monotonic() + self.timeout_s
        while self.running and time.monotonic() < deadline:
            self.poll(monitor)
            time.sleep(0.01)
        self.poll(monitor)
        if not self.running and self.fatal is None and not self.plan.counters().stop_requested:
            self._deliver_the_rest(deadline)

    def _deliver_the_rest(self, deadline: float) -> None:
        """Every actor finished its budget: take what the nodes still hold and hand it to the learners, which are
        still reading, as they make room for it (until `deadline`; what is left then is written by `stop`)."""
        self._quit.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for relay in [r for r in self.relays.values() if not r.dead]:
                try:
                    self._final_take(relay, everything=False)
                except Exception as exc:  # noqa: BLE001
                    self._relay_died(relay, exc)
            left, moved = self._pending_rows(), time.monotonic()
            while left and time.monotonic() < deadline and time.monotonic() - moved < STALLED_S:
                for (k, unit) in list(self._pending):
                    self._flush(k, unit)
                time.sleep(0.002)
                if self._pending_rows() < left:
                    left, moved = self._pending_rows(), time.monotonic()

    def _pending_rows(self) -> int:
        return sum(len(rows["reward"]) for queue_ in self._pending.values() for rows in queue_)

    def _tell_relays_to_stop(self) -> None:
        with self._lock:
            relays = [r for r in self.relays.values() if not r.dead]
        for relay in relays:
            try:
                relay.actor.stop.remote()
            except Exception:  # noqa: BLE001
                pass

    def stop(self, monitor: Any = None) -> None:
        """Stop every actor on every node, take what their nodes still hold, and remove every Ray actor and
        every node's copy of the run's memory."""
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
        stats = self.plan.stats
        if stats is not None:
            stats.request_stop()
        self._tell_relays_to_stop()
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            live = [a.life for a in self.actors.values() if a.lives and not a.life.over]
            if not live:
                break
            if self._thread is None or not self._thread.is_alive():  # else the pump notices their ends
                ended = set(self.ray.wait([x.run_ref for x in live], num_returns=len(live), timeout=0.05)[0])
                for life in live:
                    life.over = life.over or life.run_ref in ended
            if monitor is not None:
                self.poll(monitor)
            time.sleep(0.01)
        self._quit.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for relay in self.relays.values():
                if relay.dead:
                    continue
                try:
                    self._final_take(relay)
                except Exception as exc:  # noqa: BLE001
                    self._relay_died(relay, exc)
            for actor in self.actors.values():
                if actor.lives and not actor.life.over:
                    actor.life.over = True
                    self._collect(actor, actor.life)
        if monitor is not None:
            self.poll(monitor)
        for actor in self.actors.values():
            for life in actor.lives:
                self._kill(life.worker)
        for relay in self.relays.values():
            if not relay.dead:
                try:
                    self.ray.get(relay.actor.close.remote(), timeout=30)
                except Exception:  # noqa: BLE001
                    pass
            self._kill(relay.actor)
            if relay.segments is not None:
                unlink_run(*relay.segments)
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def _kill(self, handle: Any) -> None:
        try:
            self.ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    # ------------------------------------------------------------------------------------------ figures
    def written(self, agent: str) -> int:
        return sum(life.written.get(agent, 0) for a in self.actors.values() for life in a.lives)

    def nonfinite(self, agent: str) -> int:
        return sum(d.nonfinite.get(agent, 0) for d in self.done.values())

    def dropped(self, unit: str) -> int:
        """Transitions of `unit` overwritten on an actor's node before they were forwarded, or lost with a node
        that died (as of its last status)."""
        total = 0
        for relay in [*self.relays.values(), *self.gone]:
            for k, status in relay.status.items():
                total += status["dropped"].get(unit, 0)
                if relay.dead:  # what its actors wrote there, as of their last word, and never came here
                    seats = self.plan.units[unit].seats
                    reported = sum(life.written.get(a, 0) for life in self.actors[k].lives
                                   if life.node == relay.node for a in seats)
                    unforwarded = (max(status["written"].get(unit, 0), reported) - status["dropped"].get(unit, 0)
                                   - relay.received.get((k, unit), 0))
                    total += max(0, unforwarded)
        return total

    def _steps_per_s(self, steps: int) -> float:
        if self.acting_since is None:
            return 0.0
        return steps / max(1e-9, (self.stopped_at or time.monotonic()) - self.acting_since)

    def actor_figures(self) -> list[dict[str, Any]]:
        """Per actor (0: the runner's own): node, transport, agent steps and steps/s, policy lag of the rows that
        came through the object store, restarts, and per unit what reached its shard here."""
        stats = self.plan.stats
        words = stats.actor_words if stats is not None else None
        rows = [{"actor": 0, "node": self.driver_node, "transport": "driver",
                 "agent_steps": int(words[0, S.AGENT_STEPS]) if words is not None else 0, "restarts": 0,
                 "policy_lag_mean": None}]
        for k, actor in self.actors.items():
            life = actor.life
            rows.append({"actor": k, "node": life.node, "transport": life.transport,
                         "agent_steps": int(words[k, S.AGENT_STEPS]) if words is not None else 0,
                         "restarts": actor.restarts, "nodes": [x.node for x in actor.lives],
                         "policy_lag_mean": actor.lag_sum / actor.lag_rows if actor.lag_rows else None,
                         "received": {u: sum(r.received.get((k, u), 0) for r in [*self.relays.values(), *self.gone])
                                      for u in self._units()}})
        for row in rows:
            row["steps_per_second"] = self._steps_per_s(row["agent_steps"])
        return rows

    def node_figures(self, actors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per node: its actors, their agent steps and steps/s, restarts, and the policy versions fetched there."""
        nodes: dict[str, dict[str, Any]] = {}
        for row in actors:
            n = nodes.setdefault(row["node"], {"node": row["node"], "actors": [], "agent_steps": 0, "restarts": 0,
                                               "steps_per_second": 0.0})
            n["actors"].append(row["actor"])
            n["agent_steps"] += row["agent_steps"]
            n["restarts"] += row["restarts"]
            n["steps_per_second"] += row["steps_per_second"]
        for relay in self.relays.values():
            if relay.node in nodes:
                n = nodes[relay.node]
                n["policy_fetches"] = relay.fetches
                lat = self.version_latency.get(relay.node, [])
                n["version_latency_ms_median"] = float(np.median(lat) * 1e3) if lat else None
        return list(nodes.values())

    def display_line(self) -> str | None:
        rows = self.actor_figures()
        nodes = self.node_figures(rows)
        parts = []
        for n in nodes:
            lags = [r["policy_lag_mean"] for r in rows if r["node"] == n["node"] and r["policy_lag_mean"] is not None]
            parts.append(f"node {n['node'][:8]}: actors {n['actors']} {n['steps_per_second']:,.0f} steps/s"
                         + (f" lag {np.mean(lags):.1f}" if lags else "")
                         + (f" restarts {n['restarts']}" if n["restarts"] else ""))
        return " · ".join(parts)
