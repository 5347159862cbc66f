"""Env copies stepped in env worker processes (`EnvWorkers`, `WorkerCopies`), behind the same `EnvCopies`
interface as copies stepped in the actor's process (protocol.py). Each copy is still an `EpisodeStepper`, so
transitions are assembled next to the env, with `rollout`'s exact semantics.

Env workers (RunConfig.env_workers) are for envs whose step dominates: each worker process owns a contiguous
slice of the copies, in two groups, and steps one group while the actor runs inference for another. One
message per group and round carries the actions, which copies to cut and whether new episodes may start;
the answer carries the events and pending decisions. Observations and masks go through shared-memory slots
(transport/obs_slots.py), the answer naming the slot; a transition crosses back without the observations, masks,
action and extras the actor already holds from the decisions it answered (`AnsweredDecisions`).
Errors follow Gymnasium's AsyncVectorEnv: a worker's exception comes back as its own type (also an
`EnvCrashedError`), with the worker's traceback as its cause and the copy index in the message; a worker
that dies or stays silent for `timeout_s` is reported with its copies. A worker whose actor dies sees its
pipe close and exits.
"""

from __future__ import annotations

import multiprocessing.connection as mp_connection
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pzasync.core.environments import EnvSpec
from pzasync.core.parallel_columns import ColumnSink
from pzasync.core.spaces import AgentLayout
from pzasync.core.stepper import PendingDecision
from pzasync.core.transitions import EpisodeSummary, Transition
from pzasync.errors import EnvCrashedError, error_type_path, remote_error
from pzasync.runtime.copies.local import LocalCopies, LocalEnvs
from pzasync.runtime.copies.protocol import Answer
from pzasync.runtime.copies.wire import AnsweredDecisions, _packed, _recv_wire, _send_wire, enlarge_pipe
from pzasync.runtime.processes import process_context
from pzasync.runtime.stop_signals import ignore_stop_signals, shielded
from pzasync.transport.obs_slots import ObservationSlots
from pzasync.transport.shm import new_run_id


@dataclass
class EnvWorkers:
    """What the actor needs to step its copies in env workers: `copies` copies of `env_spec` over `workers`
    processes, each answering within `timeout_s`."""

    env_spec: EnvSpec
    copies: int
    workers: int
    timeout_s: float = 120.0
    #: The run whose name the observation slots' segment carries (a fresh id when None).
    run_id: str | None = None
    #: The parallel path: the workers step the env's parallel API, a whole cycle of a copy at a time.
    parallel: bool = False
    #: No copy is stepped in the actor's process.
    env: Any = None

    @property
    def env_name(self) -> str:
        return self.env_spec.name

    #: Copies in other processes are stepped one decision (or one cycle) at a time (`EnvCopiesFactory`).
    steps_columns = False

    def open(self, seed: int | None, layouts: dict[str, AgentLayout], *, emit: Callable[[Transition, int], None],
             on_episode: Callable[[EpisodeSummary], None], on_start: Callable[[int], None],
             check_rewards: bool = True, max_episode_steps: int | None = None,
             columns: ColumnSink | None = None) -> WorkerCopies:
        """Spawn the workers and build their env copies (start-up: `Actor.prepare` does this before acting)."""
        if columns is not None:
            raise ValueError("these env copies are not stepped in columns (steps_columns is False)")
        return WorkerCopies(self.env_spec, self.copies, self.workers, seed, layouts, emit=emit,
                            on_episode=on_episode, on_start=on_start, check_rewards=check_rewards,
                            max_episode_steps=max_episode_steps, timeout_s=self.timeout_s,
                            env_name=self.env_spec.name, run_id=self.run_id, parallel=self.parallel)

    def close(self) -> None:
        """Nothing held between runs: each run's `WorkerCopies` stops its own workers."""


# ---------------------------------------------------------------------------------------------- the worker
def worker_main(inbox: Any, conn: Any, env_spec: EnvSpec, groups: dict[int, list[int]], seed: int | None,
                layouts: dict[str, AgentLayout], check_rewards: bool, max_episode_steps: int | None, slots_name: str,
                n_copies: int, parallel: bool = False) -> None:
    """Body of an env worker: build its groups of copies (parallel envs on the parallel path), then answer the
    actor's messages (each about one group) in order until told to close."""
    ignore_stop_signals()  # SIGTERM and Ctrl-C are the runner's to handle; its actor closes us
    events: list[tuple] = []
    waiting: dict[tuple[int, str], PendingDecision] = {}  # the decisions the actor is answering, by (copy, agent)
    history = AnsweredDecisions()
    slots: ObservationSlots | None = None
    finals_named: set[int] = set()  # final slots named in the answer being built (each at most once)

    def on_start(k: int) -> None:
        history.forget(k)
        events.append(("start", k))

    def stash(k: int, agent: str, obs: Any, mask: np.ndarray | None) -> bool:
        assert slots is not None, "copies step once the slots are attached"
        slot = slots.final_slot(k, agent)
        if slot is None or slot in finals_named or not slots.put(slot, agent, obs, mask):
            return False
        finals_named.add(slot)
        return True

    local: dict[int, LocalCopies] = {}
    envs: list[LocalEnvs] = []
    group = next(iter(groups))
    try:
        slots = ObservationSlots.attach(slots_name, layouts, n_copies, per_agent=parallel)
        make = env_spec.make_parallel if parallel else env_spec.make
        for group, members in groups.items():
            envs.append(LocalEnvs([make() for _ in members], parallel=parallel))
            local[group] = LocalCopies(envs[-1].envs, members, seed, layouts,
                                       emit=lambda t, k: events.append(history.encode(t, k, stash)),
                                       on_episode=lambda s: events.append(("end", s)),
                                       on_start=on_start, check_rewards=check_rewards,
                                       max_episode_steps=max_episode_steps, parallel=parallel)
        _send_wire(conn, ("ready",))
        while True:
            try:
                message = _recv_wire(inbox)
            except (EOFError, OSError):  # the actor is gone
                return
            kind, group = message[0], message[1] if len(message) > 1 else group
            if kind == "close":
                return
            copies = local[group]
            if kind == "start":
                copies.start(message[2])
                ready = copies.next_ready()
                assert ready is not None, "a started group has its first decisions"
                pending = ready[1]
            elif kind == "step":
                _, _, answered_keys, actions, extras, cut, may_reset = message
                answered = [(waiting.pop(key), a, x) for key, a, x in zip(answered_keys, actions, extras)]
                for d, a, x in answered:
                    history.answered(d, a, x)
                pending = copies.step(answered, cut, may_reset)
            else:  # "finish"
                copies.finish()
                pending = []
            waiting.update(((d.copy, d.agent), d) for d in pending)
            _send_wire(conn, ("ok", group, events, [
                (d.copy, d.agent) if slots.put(slots.pending_slot(d.copy, d.agent), d.agent, d.obs, d.mask)
                else (d.copy, d.agent, d.obs, d.mask) for d in pending]))
            events = []
            finals_named.clear()
    except Exception as exc:  # noqa: BLE001 - reported to the actor with the copy it happened in
        where = local.get(group)
        copy, agent, episode = where.failure_context() if where is not None else (groups[group][0], None, None)
        try:
            _send_wire(conn, ("error", group, copy, agent, episode, error_type_path(type(exc)), str(exc),
                              traceback.format_exc()))
        except OSError:
            pass
    finally:
        for group_envs in envs:
            group_envs.close()
        if slots is not None:
            slots.close()
        inbox.close()
        conn.close()


class WorkerCopies:
    """Env copies stepped in `workers` processes (module docstring).

    The copies are split into two groups per worker, so that while a worker steps one of its groups the
    actor runs inference for the other: with one worker on two cores, env and inference overlap."""

    holds_back = False

    def __init__(self, env_spec: EnvSpec, copies: int, workers: int, seed: int | None,
                 layouts: dict[str, AgentLayout], *,
                 emit: Callable[[Transition, int], None], on_episode: Callable[[EpisodeSummary], None],
                 on_start: Callable[[int], None], check_rewards: bool = True,
                 max_episode_steps: int | None = None, timeout_s: float = 120.0, env_name: str = "env",
                 run_id: str | None = None, parallel: bool = False) -> None:
        self.emit, self.on_episode, self.on_start = emit, on_episode, on_start
        self.timeout_s = timeout_s
        self.env_name = env_name
        self.history = AnsweredDecisions()
        n_groups = min(copies, 2 * workers)
        #: Group -> its copies, and group -> the worker stepping it (worker w holds consecutive groups).
        self.members = [list(map(int, g)) for g in np.array_split(np.arange(copies), n_groups)]
        self.worker_of = [int(w) for w, size in enumerate(np.array_split(np.arange(n_groups), workers))
                          for _ in range(len(size))]
        #: Per worker: the pipe its answers come from, and the pipe to send it messages.
        self.conns: list[Any] = []
        self.outboxes: list[Any] = []
        self.procs: list[Any] = []
        self._hung: set[int] = set()
        #: Groups with an answer outstanding -> when their message was sent.
        self._outstanding: dict[int, float] = {}
        ctx = process_context()
        #: Where the workers put observations (transport/obs_slots.py); this process owns the segment.
        self.slots = ObservationSlots.create(run_id or new_run_id(), layouts, copies, per_agent=parallel)
        try:
            for w in range(workers):
                groups = {g: self.members[g] for g in range(n_groups) if self.worker_of[g] == w}
                inbox, to_worker = ctx.Pipe(duplex=False)
                from_worker, outbox = ctx.Pipe(duplex=False)
                enlarge_pipe(outbox)
                proc = ctx.Process(target=worker_main, name=f"pzasync-env-worker-{w}", daemon=True,
                                   args=(inbox, outbox, env_spec, groups, seed, layouts, check_rewards,
                                         max_episode_steps, self.slots.name, copies, parallel))
                with shielded():
                    proc.start()
                inbox.close()
                outbox.close()
                self.conns.append(from_worker)
                self.outboxes.append(to_worker)
                self.procs.append(proc)
            for w in range(workers):
                self._receive(w, startup=True)
        except BaseException:
            self.close()
            raise

    def _where(self, w: int) -> str:
        ks = [k for g, members in enumerate(self.members) if self.worker_of[g] == w for k in members]
        return f"env worker {w} (copies {ks[0]}-{ks[-1]})" if len(ks) > 1 else f"env worker {w} (copy {ks[0]})"

    def _receive(self, w: int, startup: bool = False) -> tuple[int, list[PendingDecision]]:
        """One answer of worker `w` (waiting for it): its events delivered, its group and pending decisions."""
        conn, proc = self.conns[w], self.procs[w]
        since = time.monotonic()
        while not conn.poll(0.05):
            self._check_alive(w, since)
        try:
            reply = _recv_wire(conn)
        except (EOFError, OSError):
            proc.join(5)
            raise EnvCrashedError(f"{self._where(w)} of env {self.env_name!r} died with exit code "
                                  f"{proc.exitcode}") from None
        if reply[0] == "error":
            _, _group, copy, agent, episode, type_path, message, trace = reply
            what = "while building its env copies" if startup or episode is None else (
                f"during the turn of agent {agent!r}, in episode {episode} (from 0) of that copy")
            raise remote_error(EnvCrashedError, type_path, (
                f"env {self.env_name!r} (env copy {copy}, in {self._where(w)}) raised "
                f"{type_path.rpartition(':')[2]}: {message} {what} (the worker's traceback is the cause)"),
                trace)
        if reply[0] == "ready":
            return -1, []
        _, group, events, pending = reply
        for event in events:
            if event[0] == "r":
                self.emit(self.history.decode(event, self._final), event[1])
            elif event[0] == "t":
                self.emit(Transition(*event[2]), event[1])
            elif event[0] == "end":
                self.on_episode(event[1])
            else:
                self.history.forget(event[1])
                self.on_start(event[1])
        slots = self.slots
        return group, [PendingDecision(d[0], d[1], *slots.take(slots.pending_slot(d[0], d[1]), d[1])) if len(d) == 2
                       else PendingDecision(*d) for d in pending]

    def _final(self, copy: int, agent: str) -> tuple[Any, np.ndarray | None]:
        slot = self.slots.final_slot(copy, agent)
        assert slot is not None, "a worker put this observation in the copy's final slot for the agent"
        return self.slots.take(slot, agent)

    def _send(self, group: int, message: tuple) -> None:
        w = self.worker_of[group]
        try:
            _send_wire(self.outboxes[w], message)
        except OSError:  # the worker is gone; what it said last (its error, usually) is still in its pipe
            while True:
                self._receive(w)
        self._outstanding[group] = time.monotonic()

    def start(self, may_reset: bool) -> None:
        for g in range(len(self.members)):
            self._send(g, ("start", g, may_reset))

    def submit(self, group: int, answered: list[Answer], cut: list[int], may_reset: bool,
               held: Sequence[PendingDecision] = ()) -> None:
        """Send the group's actions to its worker and return at once: it steps while the actor serves others.
        A worker's group is answered whole, so nothing can be `held`."""
        if held:
            raise ValueError(f"env worker group {group}: {len(held)} decisions held back; a group is answered whole")
        for d, action, extras in answered:
            self.history.answered(d, action, extras)
        self._send(group, ("step", group, [(d.copy, d.agent) for d, _, _ in answered],
                           _packed([a for _, a, _ in answered]), [x for _, _, x in answered], cut, may_reset))

    def next_ready(self) -> tuple[int, list[PendingDecision]] | None:
        """The next group to come back, among those with an answer outstanding (None when none is)."""
        if not self._outstanding:
            return None
        while True:
            workers = sorted({self.worker_of[g] for g in self._outstanding})
            ready = mp_connection.wait([self.conns[w] for w in workers], 0.05)
            if ready:
                w = min(w for w in workers if self.conns[w] in ready)
                group, pending = self._receive(w)
                del self._outstanding[group]
                return group, pending
            for g, since in self._outstanding.items():
                self._check_alive(self.worker_of[g], since)

    def _check_alive(self, w: int, since: float) -> None:
        """Raise if worker `w`, silent since `since`, has died or has been silent past the timeout."""
        if not self.procs[w].is_alive() and not self.conns[w].poll(0.05):
            raise EnvCrashedError(f"{self._where(w)} of env {self.env_name!r} died with exit code "
                                  f"{self.procs[w].exitcode}")
        if time.monotonic() - since > self.timeout_s:
            self._hung.add(w)
            raise EnvCrashedError(f"{self._where(w)} of env {self.env_name!r} has not answered for "
                                  f"{self.timeout_s:g}s (an env step that never returns?); it was stopped")

    def finish(self) -> None:
        """Cut every copy still in an episode, in every worker, and deliver those transitions."""
        for g in range(len(self.members)):
            self._send(g, ("finish", g))
        while self.next_ready() is not None:
            pass

    def failure_context(self) -> tuple[int, str | None, int]:
        return -1, None, -1  # errors inside a worker carry their own context

    def close(self) -> None:
        """Stop every worker (politely, then by force); never raises."""
        for outbox in self.outboxes:
            try:
                _send_wire(outbox, ("close",))
            except (OSError, ValueError):
                pass
        for w, proc in enumerate(self.procs):
            if w in self._hung:
                proc.kill()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in self.conns + self.outboxes:
            conn.close()
        self.slots.close()
        self.slots.unlink()
