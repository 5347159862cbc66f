"""The Ray backend (docs/distributed.md): learners as Ray actors, on the actor's node or any other.

`RunConfig(backend="ray")` makes the async runner use `RayHost`. Each learner unit becomes one `LearnerActor`
(a Ray actor asking for `ray_learner_cpus` / `ray_learner_gpus` / `ray_learner_resources`); Ray places it.
Then, per learner:

- **On the actor's node** (the common case on one machine): the learner attaches to the run's shared-memory
  buffer, slot and counters exactly as a local learner process does. Nothing else crosses a process.
- **On another node** (or with `ray_transport="object_store"`): the learner keeps a local ring buffer of the
  same layout on its own node. A pump thread in the actor's process reads the actor's buffer *in order*
  (`read_new`: a transition overwritten before it was sent is counted dropped) and sends chunks of at most
  `ray_chunk_rows` ("auto": 4 MiB of rows) with sequence numbers, at most `ray_max_chunks_in_flight`
  unacknowledged per learner;
  while the window is full it reads nothing, so the actor never waits and the ring absorbs bursts. The
  learner appends the chunks in sequence order (`SharedRingBuffer.write_rows`), so on-policy learners read
  them in order and every transition is delivered exactly once or counted dropped. The learner publishes
  versioned vectors locally; the pump asks each learner for a version newer than the one it holds (one
  call outstanding at a time, never per decision) and mirrors what comes back into the local slot with the
  learner's version number, so the actor, the evaluator and the policy-lag figures work unchanged.

Failures match the local backend: a learner that raises is reported with its traceback and restarted within
the budget; an actor that dies (its node removed, its process killed) is restarted on whatever node Ray
picks, from its checkpoint if that node can read it, else from the weights last mirrored here.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
from typing import Any

import numpy as np

from pzasync.backends.ray.chunks import chunk_rows
from pzasync.backends.ray.workers import LearnerActor, RemoteRun
from pzasync.config import RunConfig
from pzasync.errors import ConfigError
from pzasync.runtime.autotune import usable_cores
from pzasync.runtime.hosts import LearnerHost
from pzasync.runtime.learner_loop import LearnerFailed, LearnerReport, LearnerSetup, restarted
from pzasync.runtime.monitor import RunMonitor
from pzasync.runtime.results import RunResult
from pzasync.transport import stats as S
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.shards import ShardedBuffer
from pzasync.transport.shm import unlink_run
from pzasync.transport.slots import PolicySlot

#: Seconds between two status calls to a remote learner (its counters, mirrored into the run's).
STATUS_EVERY_S = 0.2
#: Longest a remote learner holds the pump's "newer policy?" call before answering "none yet".
POLICY_WAIT_S = 1.0
#: The pump's sleep when it has nothing to send, with learners on other nodes / with learners on shared memory only.
PUMP_IDLE_S = 0.005
WATCH_EVERY_S = 0.05
#: Seconds between two collections of a learner's messages (its reports come every 0.5 s).
DRAIN_EVERY_S = 0.1


def require_ray() -> Any:
    """Import Ray, or fail with one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError('backend="ray" needs Ray, which is not installed: pip install "pzasync[ray]"') from None
    return ray


def init_ray(ray: Any, config: RunConfig, learners: int) -> bool:
    """Join `config.ray_address`, or start a local instance; True if this call started (and so owns) it.
    Inside a Ray worker (a remote actor process) Ray is already initialised and is used as it is."""
    if ray.is_initialized():
        return False
    if config.ray_address is not None:
        ray.init(address=config.ray_address, log_to_driver=False)
    else:
        ray.init(num_cpus=max(usable_cores(), learners + 1), include_dashboard=False, log_to_driver=False)
    return True


def run_remotely(runner: Any, agent_steps: int | None, seconds: float | None) -> RunResult:
    """`AsyncRunner.run` with `ray_actor_resources` set: the run itself becomes a Ray actor asking for those
    resources (and `ray_actor_cpus`). Ctrl-C here stops it gracefully there; its errors reach you as Ray
    raises them (an instance of the original type)."""
    ray = require_ray()
    cfg = runner.config
    owns = init_ray(ray, cfg, len(runner.plan.learning))
    inner = dataclasses.replace(cfg, ray_actor_resources=None, progress=False)
    handle = None
    try:
        import sys

        cls = ray.remote(concurrency_groups={"run": 1, "control": 1})(RemoteRun)
        handle = cls.options(num_cpus=cfg.ray_actor_cpus, resources=dict(cfg.ray_actor_resources),
                             max_restarts=0).remote(runner.env, runner.learners, inner, list(sys.path))
        ref = handle.run.options(concurrency_group="run").remote(agent_steps, seconds)
        try:
            return ray.get(ref)
        except KeyboardInterrupt:
            handle.stop.options(concurrency_group="control").remote("interrupted (SIGINT)")
            return ray.get(ref)
    finally:
        if handle is not None:
            ray.kill(handle, no_restart=True)
        if owns:
            ray.shutdown()


@dataclasses.dataclass
class _Remote:
    """The pump's state for one learner unit: its actor, the calls outstanding, what has been sent."""

    actor: Any
    mode: str  # "shm" or "object_store"
    node: str = ""
    #: Remote mode: (run id, pid) naming the learner's own segments, removed here if it dies on this machine.
    segments: tuple[str, int] | None = None
    run_ref: Any = None
    drain_ref: Any = None
    policy_ref: Any = None
    status_ref: Any = None
    next_status: float = 0.0
    next_drain: float = 0.0
    in_flight: list = dataclasses.field(default_factory=list)
    next_chunk: int = 0
    #: Transitions sent to this incarnation of the learner, how far its in-order reader got (as last heard),
    #: and its latest counters.
    sent: int = 0
    remote_cursor: int = 0
    status: dict = dataclasses.field(default_factory=dict)
    finished: bool = False


class RayHost(LearnerHost):
    """One Ray actor per learner unit; a pump thread in this process moves transitions, policies and counters
    for the learners on other nodes, relaunches learners, and collects every learner's messages and deaths,
    so the actor's thread never waits on Ray."""

    name = "ray"

    @classmethod
    def run_elsewhere(cls, runner: Any, agent_steps: int | None, seconds: float | None) -> RunResult | None:
        """With `ray_actor_resources`, the whole run is a Ray actor on the node that has them (`run_remotely`)."""
        if runner.config.ray_actor_resources is None:
            return None
        return run_remotely(runner, agent_steps, seconds)

    def __init__(self, setups: dict[str, LearnerSetup], config: RunConfig, monitor: RunMonitor) -> None:
        super().__init__(setups, config, monitor)
        self.ray = require_ray()
        self.plan = monitor.plan
        self.learners: dict[str, _Remote] = {}
        #: (unit, message) from the pump to `poll`, which handles them on the actor's thread.
        self.inbox: queue.Queue = queue.Queue()
        self._launches: queue.Queue = queue.Queue()
        self._lock = threading.RLock()
        self._owns_ray = False
        self._actor_class: Any = None
        self._pump: threading.Thread | None = None
        self._pump_stop = threading.Event()
        #: The calls found finished by this pump iteration's single ray.wait (None outside an iteration).
        self._ready_now: set | None = None
        #: Transitions lost with learners that died (sent but not received, or received but overwritten).
        self._lost: dict[str, int] = dict.fromkeys(setups, 0)

    # ------------------------------------------------------------------------------------------ start
    def _init_ray(self) -> None:
        self._owns_ray = init_ray(self.ray, self.config, len(self.setups) + self.plan.actors - 1)

    def _actor_options(self, unit: str) -> dict[str, Any]:
        cfg = self.config
        gpus = cfg.ray_learner_gpus
        if gpus is None:
            gpus = 1 if cfg.device_for(unit).startswith("cuda") else 0
        return {"num_cpus": cfg.ray_learner_cpus, "num_gpus": gpus, "resources": dict(cfg.ray_learner_resources),
                "max_restarts": 0}

    def _launch(self, unit: str, setup: LearnerSetup) -> _Remote:
        """Create the learner's actor, pick its transport by where Ray put it, and start its loop."""
        ray, timeout = self.ray, self.config.process_timeout_s
        if self._actor_class is None:
            # Threads: the learning loop ("loop"), the host's calls ("io"), the policy long poll ("policy").
            self._actor_class = ray.remote(concurrency_groups={"loop": 1, "io": 1, "policy": 1})(LearnerActor)
        actor = self._actor_class.options(**self._actor_options(unit)).remote()
        node = ray.get(actor.node.remote(), timeout=timeout)
        remote = self.config.ray_transport == "object_store" or node != ray.get_runtime_context().get_node_id()
        local_buffer, local_slot = self._shared(unit)
        payload = initial = None
        if remote:
            payload = {"fields": local_buffer.fields, "capacity": local_buffer.capacity,
                       "obs_paths": local_buffer.obs_paths, "slot_size": local_slot.size,
                       "updates": self.stats.get(unit, S.UPDATES)}
            if setup.init_from_slot:
                vector = np.zeros(local_slot.size, np.float32)
                version = local_slot.read(vector)
                initial = (version, vector) if version else None
            setup = dataclasses.replace(setup, buffer=None, slot=None, stats=None)
        import sys

        segments = ray.get(actor.prepare.options(concurrency_group="io").remote(setup, payload, initial,
                                                                               list(sys.path)), timeout=timeout)
        state = _Remote(actor, "object_store" if remote else "shm", node, segments=segments)
        state.run_ref = actor.run.options(concurrency_group="loop").remote(self.config.checkpoint_every_s,
                                                                          os.getpid())
        return state

    def start(self) -> None:
        self._init_ray()
        for unit, setup in self.setups.items():
            self.learners[unit] = self._launch(unit, setup)
        self._pump = threading.Thread(target=self._pump_loop, name="pzasync-ray-pump", daemon=True)
        self._pump.start()

    def _next_message(self, timeout: float) -> LearnerReport | LearnerFailed | None:
        try:
            return self.inbox.get(timeout=timeout)[1]
        except queue.Empty:
            return None

    # ------------------------------------------------------------------------------------------ pump
    def _pump_loop(self) -> None:
        """Moves data for remote learners, relaunches learners and watches every one; never touches the monitor."""
        while not self._pump_stop.is_set():
            busy = False
            while not self._launches.empty():
                unit, setup = self._launches.get_nowait()
                try:
                    state = self._launch(unit, setup)  # may take seconds: outside the lock the actor's thread takes
                except Exception as exc:  # noqa: BLE001 - a failed relaunch counts as a failure
                    self.inbox.put((unit, LearnerFailed.from_exception(unit, exc)))
                    continue
                with self._lock:
                    self.learners[unit] = state
            with self._lock:
                for unit, state in list(self.learners.items()):
                    try:
                        busy |= self._pump_one(unit, state)
                    except Exception as exc:  # noqa: BLE001 - a call to the learner failed: it is gone
                        self._died(unit, state, exc)
            if not busy:
                # Idle: a remote learner's next chunk is at most PUMP_IDLE_S late; with learners only on shared
                # memory the pump just watches them and can sleep longer. Every call here takes the actor's GIL.
                remote = any(s.mode == "object_store" and not s.finished for s in self.learners.values())
                self._pump_stop.wait(PUMP_IDLE_S if remote else WATCH_EVERY_S)

    def _ready(self, ref: Any) -> bool:
        if ref is None:
            return False
        if self._ready_now is not None:
            return ref in self._ready_now
        return bool(self.ray.wait([ref], timeout=0)[0])

    def _pump_one(self, unit: str, state: _Remote) -> bool:
        ray = self.ray
        if state.finished:
            return False
        # One ray.wait for every call outstanding to this learner: each Ray call takes the actor's GIL.
        refs = [r for r in (state.run_ref, state.drain_ref, state.policy_ref, state.status_ref) if r is not None]
        refs += state.in_flight
        self._ready_now = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        try:
            return self._pump_ready(unit, state)
        finally:
            self._ready_now = None

    def _pump_ready(self, unit: str, state: _Remote) -> bool:
        ray = self.ray
        if self._ready(state.run_ref):
            state.finished = True
            self._collect_messages(unit, state)
            try:
                final = ray.get(state.run_ref)
                if final:
                    state.status = final
            except Exception as exc:  # noqa: BLE001 - the actor died: its node went away, or it was killed
                self._died(unit, state, exc)
            return True
        now = time.monotonic()
        if state.drain_ref is None:
            if now >= state.next_drain:
                state.drain_ref = state.actor.drain.options(concurrency_group="io").remote()
                state.next_drain = now + DRAIN_EVERY_S
        elif self._ready(state.drain_ref):
            for message in ray.get(state.drain_ref):
                self.inbox.put((unit, message))
            state.drain_ref = None
        if state.mode != "object_store":
            return False
        busy = self._forward(unit, state)
        busy |= self._pull_policy(unit, state)
        self._mirror_status(unit, state)
        return busy

    def _retire(self, unit: str, state: _Remote) -> None:
        """This incarnation of the learner is over: count what it lost, remove its segments, kill its actor."""
        state.finished = True
        self._count_lost(unit, state)
        self._kill(state)

    def _died(self, unit: str, state: _Remote, exc: BaseException) -> None:
        """The learner's actor is gone (its node removed, its process killed, a call to it failed)."""
        self._retire(unit, state)
        why = str(exc).strip().split(". ")[0].splitlines()[0] if str(exc).strip() else ""
        self.inbox.put((unit, LearnerFailed.runtime(
            unit, f"the learner actor died ({type(exc).__name__}{': ' + why if why else ''})")))

    def _count_lost(self, unit: str, state: _Remote) -> None:
        """A remote learner died: what it was sent but had not read in order (as of its last status) is lost.
        Its segments, if it ran on this machine, are removed (on another machine the next run there does it)."""
        if state.segments is not None:
            unlink_run(*state.segments)
            state.segments = None
        if state.mode == "object_store":
            received, unread = state.status.get("received", 0), state.status.get("unread", 0)
            self._lost[unit] += (state.sent - received) + unread + state.status.get("dropped", 0)
            state.status = {}

    def _collect_messages(self, unit: str, state: _Remote) -> None:
        """Whatever the learner still has to say (its last report, its error), if it is still there."""
        refs = [state.drain_ref] if state.drain_ref is not None else []
        state.drain_ref = None
        try:
            refs.append(state.actor.drain.options(concurrency_group="io").remote())
        except Exception:  # noqa: BLE001 - already gone
            pass
        for ref in refs:
            try:
                for message in self.ray.get(ref, timeout=5):
                    self.inbox.put((unit, message))
            except Exception:  # noqa: BLE001 - a dead actor has nothing more to say
                pass

    def _forward(self, unit: str, state: _Remote) -> bool:
        """Send the actor's new transitions for `unit` in order, within the in-flight window."""
        ray, cfg = self.ray, self.config
        if state.in_flight:
            done = [r for r in state.in_flight if self._ready(r)]
            state.in_flight = [r for r in state.in_flight if r not in done]
            for cursor in ray.get(done):
                state.remote_cursor = max(state.remote_cursor, cursor)
        if len(state.in_flight) >= cfg.ray_max_chunks_in_flight:
            return False
        buffer = self._shared(unit)[0]
        rows = chunk_rows(cfg.ray_chunk_rows, buffer.row_nbytes)
        if cfg.backpressure and self.plan.units[unit].learner_cls.on_policy:
            # Never send more than the learner's ring can hold unread: the local ring fills instead, and the
            # actor's own backpressure wait takes over, as with a learner on this node.
            rows = min(rows, buffer.capacity - (state.sent - state.remote_cursor))
            if rows <= 0:
                state.next_status = 0.0  # hear soon how far the learner got
                return False
        chunk = buffer.read_new(max_rows=rows)
        if chunk is None:
            return False
        state.in_flight.append(state.actor.push.options(concurrency_group="io").remote(state.next_chunk, chunk))
        state.next_chunk += 1
        state.sent += len(chunk["reward"])
        return True

    def _pull_policy(self, unit: str, state: _Remote, wait: float = 0.0) -> bool:
        """Ask for a version newer than ours (one call outstanding); mirror an answer into the local slot."""
        if state.policy_ref is None:
            known = self.stats.get(unit, S.VERSION)
            state.policy_ref = state.actor.policy_newer_than.options(concurrency_group="policy").remote(
                known, POLICY_WAIT_S)
        if wait:
            self.ray.wait([state.policy_ref], timeout=wait)
        if not self._ready(state.policy_ref):
            return False
        newer = self.ray.get(state.policy_ref)
        state.policy_ref = None
        if newer is None:
            return False
        version, vector = newer
        slot = self._shared(unit)[1]
        if version > slot.version:
            slot.publish(vector, version=version)
            self.stats.set(unit, S.VERSION, version)
        return True

    def actor_pool(self, plan: Any, budgets: list[int | None], resumed_steps: dict[str, int]) -> Any:
        """Actors 1..M-1 as Ray actors on any node (backends/ray/actors.py)."""
        from pzasync.backends.ray.actors import RayActorPool

        cfg = self.config
        return RayActorPool(plan, budgets, self.paces_actor, resumed_steps, cfg.process_timeout_s,
                            cfg.heartbeat_timeout_s)

    def _shared(self, unit: str) -> tuple[SharedRingBuffer | ShardedBuffer, PolicySlot]:
        """The unit's buffer (with several actors, the `ShardedBuffer` of their shards) and slot in the run's
        shared memory."""
        p = self.plan.units[unit]
        if not isinstance(p.buffer, (SharedRingBuffer, ShardedBuffer)) or p.slot is None:
            raise RuntimeError(f"learner unit {unit!r} has no buffer and slot of its own in shared memory")
        return p.buffer, p.slot

    def _final_policy(self, unit: str, state: _Remote) -> None:
        """After a remote learner stopped: mirror its last published version, if the actor lacks it."""
        if state.policy_ref is not None:
            self._pull_policy(unit, state, wait=POLICY_WAIT_S + 1)
        state.policy_ref = state.actor.policy_newer_than.options(concurrency_group="policy").remote(
            self.stats.get(unit, S.VERSION), 0.0)
        self._pull_policy(unit, state, wait=5.0)

    def _mirror_status(self, unit: str, state: _Remote) -> None:
        now = time.monotonic()
        if state.status_ref is None:
            if now >= state.next_status:
                state.status_ref = state.actor.status.options(concurrency_group="io").remote(self.stats.progress)
                state.next_status = now + STATUS_EVERY_S
            return
        if not self._ready(state.status_ref):
            return
        status = self.ray.get(state.status_ref)
        state.status_ref = None
        if status is not None:
            self._apply_status(unit, state, status)

    def _apply_status(self, unit: str, state: _Remote, status: dict) -> None:
        state.status = status
        state.remote_cursor = max(state.remote_cursor, status["cursor"])
        self.stats.set(unit, S.UPDATES, status["updates"])
        self.stats.set(unit, S.LEARNER_WAIT_NS, status["learner_wait_ns"])
        if unit not in self.failing:
            self.stats.set(unit, S.STATUS, status["status"])
        self.stats.set(unit, S.BEAT, time.monotonic_ns() - int(status["silent_s"] * 1e9))

    # ------------------------------------------------------------------------------------------ watching
    def _handle_inbox(self) -> None:
        while True:
            try:
                unit, message = self.inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(message, LearnerFailed) and unit in self.failing:
                continue  # the actor's death after its exception was already reported
            if isinstance(message, LearnerReport) and self.learners[unit].mode == "object_store":
                message = LearnerReport(unit, {**message.report, **self.transport_figures(unit)})
            self.handle(message)

    def transport_figures(self, unit: str) -> dict[str, Any]:
        """For a learner on another node: transitions sent to it, lost in transit, and chunks in flight."""
        state = self.learners[unit]
        return {"dropped": self.transitions_dropped(unit), "sent": state.sent, "chunks_in_flight": len(state.in_flight),
                "node": state.node}

    def placement(self, unit: str) -> dict[str, Any]:
        state = self.learners.get(unit)
        return {"learner_node": state.node, "learner_transport": state.mode} if state is not None else {}

    def transitions_dropped(self, unit: str) -> int:
        """Overwritten here before they were sent, overwritten in a remote learner's ring before it read them,
        or lost with a remote learner that died."""
        dropped = super().transitions_dropped(unit)
        state = self.learners.get(unit)
        if state is not None and state.mode == "object_store":
            dropped += state.status.get("dropped", 0)
        return dropped + self._lost.get(unit, 0)

    def poll(self) -> None:
        self._handle_inbox()
        for unit, state in list(self.learners.items()):
            if unit in self.failing or self.fatal is not None or state.finished:
                continue
            if self.stats.get(unit, S.STATUS) in (S.STARTING, S.RUNNING):
                silent = (time.monotonic_ns() - self.stats.get(unit, S.BEAT)) / 1e9
                if silent > self.config.heartbeat_timeout_s:
                    self.failed(LearnerFailed.runtime(unit, f"no heartbeat for {silent:.0f}s (hung); killed"))
                    with self._lock:
                        self._retire(unit, state)
        self.restart_due()

    def _kill(self, state: _Remote) -> None:
        try:
            self.ray.kill(state.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _restart(self, unit: str) -> None:
        """Relaunch from the pump thread, so the actor's thread never waits for Ray to place a new actor."""
        with self._lock:
            state = self.learners[unit]
            if state.finished:  # its losses are counted already
                self._kill(state)
            else:
                self._retire(unit, state)
        setup = restarted(self.setups[unit])
        self.stats.set(unit, S.STATUS, S.STARTING)
        self.stats.beat(unit)
        self.announce_restart(unit, setup)
        self._launches.put((unit, setup))

    # ------------------------------------------------------------------------------------------ stopping
    def stop(self) -> None:
        """Stop every learner (final checkpoints, reports, counters and policies), then Ray if we started it."""
        ray = self.ray
        self.stats.request_stop()  # learners on shared memory see the flag
        self._pump_stop.set()
        if self._pump is not None:
            self._pump.join(timeout=30)
        live = {u: s for u, s in self.learners.items() if not s.finished}
        for state in live.values():
            if state.mode == "object_store":
                try:
                    state.actor.stop.options(concurrency_group="io").remote()
                except Exception:  # noqa: BLE001
                    pass
        refs = [s.run_ref for s in live.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=self.config.process_timeout_s)
        for unit, state in live.items():
            self._collect_messages(unit, state)
            try:
                final = ray.get(state.run_ref, timeout=0)
                if final:
                    self._apply_status(unit, state, final)
                    self.stats.set(unit, S.STATUS, S.DONE)
                if state.mode == "object_store":
                    self._final_policy(unit, state)
            except Exception:  # noqa: BLE001 - gone or hung: keep what was mirrored
                pass
            state.finished = True
        self._handle_inbox()
        for state in self.learners.values():
            self._kill(state)
        if self._owns_ray:
            ray.shutdown()
