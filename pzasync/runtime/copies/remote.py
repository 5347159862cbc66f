"""Env copies served by other processes over the remote env protocol (docs/remote.md): `RemoteEnvs` and
`RemoteCopies`, behind the same `EnvCopies` interface as the others (protocol.py).

Each copy is an `EpisodeStepper` over a `RemoteEnv` (pzasync/remote/client.py) that mirrors one served
instance, so transitions are assembled here with `rollout`'s exact semantics. Many copies share a connection
(remote_links.py): a round's steps go out as one STEP frame per group and come back as one STATE frame, dead
agents' turns come back in it (the server steps them), and the copies whose episodes ended in that reply are
reset with one RESET frame. A connection's copies form two groups, so the server steps one while the actor
answers the other; with several servers (a `cmd:` id with `servers=N`) the actor answers whichever group
comes back first.

A server that sets its own pace (`"paced": true` in its WELCOME: docs/remote.md, "Replies at the server's
pace") answers any subset of a connection's instances at a time: its copies are one group, each STATE that
comes in hands the actor the next decisions of the copies it answers, and the actor's answers to them go out
as one STEP frame while the other copies are still being stepped. Their resets go out the same way (one
RESET frame for the copies of a reply whose episodes ended), and each copy's first decision follows its
reset's answer.

On the parallel path (`parallel=True`: the server offers the parallel API, docs/remote.md) each copy is a
`ParallelStepper` over a `RemoteParallelEnv`: a round's answers to a group's copies go out as one PARALLEL_STEP
frame, a whole cycle of each copy in one record, and come back as one CYCLE frame, every agent's observation,
reward, termination, truncation and info; everything else (groups, resets, pacing, failures) is as above. A run
whose env is wrapped (`EnvSpec.wrappers`, the global state) steps each copy's cycle in a frame of its own: the
wrappers read what the env's `step` returns as it returns.

A server that fails (dies, hangs past `timeout_s`, answers with an error) ends the run with a
`RemoteEnvError` naming the server, its instances and (for servers launched here) its exit code and the end
of its stderr. Before it is raised, the copies on the other servers are cut (docs/transitions.md, rule 5:
their outstanding replies are read, then every pending transition is completed as truncated and emitted);
the failed server's copies cannot be observed any more, so their pending decisions are dropped, never
completed with made-up data. With `restarts=N` (a `cmd:` id), a launched server that was lost is instead
launched again, up to N times in the run, and its copies start fresh episodes.
"""

from __future__ import annotations

import functools
import select
import socket
import time
from typing import Any, Callable, Sequence

from pzasync.core.environments import EnvSpec
from pzasync.core.parallel_columns import ColumnSink
from pzasync.core.parallel_stepper import ParallelStepper
from pzasync.core.spaces import AgentLayout, env_action_converter
from pzasync.core.stepper import CopyStepper, EpisodeStepper, PendingDecision
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition
from pzasync.errors import EnvSpecError, RemoteEnvError
from pzasync.logs import logger
from pzasync.remote.client import Connection
from pzasync.remote.parallel import RemoteParallelEnv
from pzasync.runtime.copies.protocol import Answer, emitting
from pzasync.runtime.copies.remote_links import Group, Links


class RemoteEnvs:
    """What an actor needs to step `copies` copies of a remote env (`EnvCopiesFactory`): its id (an address
    or a `cmd:` template) and keyword arguments (`servers`, `instances`, `timeout_s`, `restarts`). `connection`:
    the connection class (`pzasync.remote.Connection`; a benchmark substitutes another transport's). With
    `parallel`, the copies are stepped through the server's parallel API (the parallel path)."""

    #: No copy is stepped in the actor's process.
    env: Any = None

    def __init__(self, env_spec: EnvSpec, copies: int, timeout_s: float = 60.0,
                 connection: type[Connection] = Connection, parallel: bool = False) -> None:
        if not isinstance(env_spec.source, str):
            raise EnvSpecError(f"env {env_spec.name!r}: a remote env is named by an address or a cmd: template, not "
                               f"{env_spec.source!r}")
        self.env_spec, self.copies, self.connection, self.parallel = env_spec, copies, connection, parallel
        self.env_id, self.env_name = env_spec.source, env_spec.name
        self.timeout_s = float(env_spec.kwargs.get("timeout_s", timeout_s))

    #: Copies in other processes are stepped one decision (or one cycle) at a time (`EnvCopiesFactory`).
    steps_columns = False

    def open(self, seed: int | None, layouts: dict[str, AgentLayout], *, emit: Callable[[Transition, int], None],
             on_episode: Callable[[EpisodeSummary], None], on_start: Callable[[int], None],
             check_rewards: bool = True, max_episode_steps: int | None = None,
             columns: ColumnSink | None = None) -> RemoteCopies:
        """Launch the servers of a `cmd:` id (or reach the one at the address) and connect the copies."""
        if columns is not None:
            raise ValueError("these env copies are not stepped in columns (steps_columns is False)")
        return RemoteCopies(self.env_id, dict(self.env_spec.kwargs), self.copies, seed, layouts, emit=emit,
                            on_episode=on_episode, on_start=on_start, check_rewards=check_rewards,
                            max_episode_steps=max_episode_steps, timeout_s=self.timeout_s,
                            connection=self.connection, parallel=self.parallel,
                            wrap=(None if not self.env_spec.wrapped else
                                  self.env_spec.wrap_parallel if self.parallel else self.env_spec.wrap))

    def close(self) -> None:
        """Nothing held between runs: each run's `RemoteCopies` closes its own connections and servers."""


class RemoteCopies:
    """Env copies served by remote env servers (module docstring)."""

    holds_back = False

    def __init__(self, env_id: str, kwargs: dict, copies: int, seed: int | None, layouts: dict[str, AgentLayout], *,
                 emit: Callable[[Transition, int], None], on_episode: Callable[[EpisodeSummary], None],
                 on_start: Callable[[int], None], check_rewards: bool = True, max_episode_steps: int | None = None,
                 timeout_s: float = 60.0, connection: type[Connection] = Connection, parallel: bool = False,
                 wrap: Callable[[Any], Any] | None = None) -> None:
        self.on_start = on_start
        self.timeout_s = timeout_s
        self.parallel = parallel
        #: Relaunches of lost servers still allowed in this run (`restarts`, cmd: ids only).
        self.restarts_left = int(kwargs.get("restarts") or 0)
        #: Each copy's stepper: an `EpisodeStepper` each on the AEC path (`aec`), a `ParallelStepper` on the
        #: parallel path (`cycles`).
        self.steppers: dict[int, CopyStepper] = {}
        self.aec: dict[int, EpisodeStepper] = {}
        self.cycles: dict[int, ParallelStepper] = {}
        #: Parallel path: what a copy's env returned from a reset or step that did not wait for the reply (a
        #: wrapped env's), for `after_reset` / `stepped`.
        self.outcomes: dict[int, Any] = {}
        self.current = 0
        #: What the actor said last about starting episodes (for copies whose server was launched again).
        self.may_reset = True
        #: Paced connections: copies whose RESET awaits its answer, and what the actor said about starting
        #: episodes when it last answered each copy.
        self.resetting: set[int] = set()
        self.may_reset_of: dict[int, bool] = {}
        self.links = Links(env_id, kwargs, copies, timeout_s, connection, parallel=parallel,
                           deferred=not (parallel and wrap is not None))
        self.groups = self.links.groups
        try:
            to_env = env_action_converter(layouts)
            for k, remote_env in sorted(self.links.envs.items()):
                # `wrap`: what the run's EnvSpec puts around every env it makes (the global state), so a
                # served env is observed as an in-process one would be.
                env = remote_env if wrap is None else wrap(remote_env)
                stepper = (ParallelStepper if parallel else EpisodeStepper)(
                    env, emitting(emit, k), copy=k, seed=None if seed is None else seed + k,
                    layouts=LayoutBook(env, layouts, fixed=True), check_rewards=check_rewards,
                    max_episode_steps=max_episode_steps, to_env=to_env, on_episode=on_episode)
                self.steppers[k] = stepper
                if isinstance(stepper, ParallelStepper):
                    self.cycles[k] = stepper
                else:
                    self.aec[k] = stepper
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------ one copy
    def _request_reset(self, k: int) -> None:
        """Queue the reset of copy `k`'s env (a wrapped parallel env's is done at once: its outcome is kept)."""
        self.current = k
        if self.parallel:
            outcome = self.cycles[k].request_reset()
            if outcome is not None:
                self.outcomes[k] = outcome
        else:
            self.aec[k].request_reset()

    def _after_reset(self, k: int) -> None:
        """Complete copy `k`'s reset, its reply in."""
        self.current = k
        if self.parallel:
            self.cycles[k].after_reset(self._outcome(k))
        else:
            self.aec[k].after_reset()

    def _act(self, k: int, answers: list[Answer]) -> None:
        """Queue the step of copy `k` that answers its decisions (a wrapped parallel env's is done at once)."""
        self.current = k
        if self.parallel:
            outcome = self.cycles[k].act(answers)
            if outcome is not None:
                self.outcomes[k] = outcome
        else:
            ((_, action, extras),) = answers
            self.aec[k].act(action, extras)

    def _stepped(self, k: int) -> None:
        """Complete copy `k`'s step, its reply in."""
        self.current = k
        if self.parallel:
            self.cycles[k].stepped(self._outcome(k))
        else:
            self.aec[k].stepped()

    def _outcome(self, k: int) -> Any:
        """What copy `k`'s parallel env returned for its last reset or step: kept, or its mirror's reply."""
        outcome = self.outcomes.pop(k, None)
        if outcome is not None:
            return outcome
        env = self.links.envs[k]
        assert isinstance(env, RemoteParallelEnv) and env.result is not None, "a parallel copy's reply is in"
        return env.result

    # ------------------------------------------------------------------------------------------ stepping
    def _advance(self, copies: list[int], may_reset: bool) -> list[PendingDecision]:
        """Each copy's next live decisions, in order, starting episodes while `may_reset`: the copies of a
        connection that need a reset together are reset with one RESET frame."""
        found: dict[int, list[PendingDecision]] = {}
        todo = copies
        while todo:
            resets = []
            for k in todo:
                stepper = self.steppers[k]
                self.current = k
                if stepper.in_episode and (decisions := stepper.next_decisions()):
                    found[k] = decisions
                elif may_reset:
                    resets.append(k)
            if resets:
                self._reset(resets)
            todo = resets
        return [d for k in copies if k in found for d in found[k]]

    def _reset(self, copies: list[int]) -> None:
        """Start the next episode of each copy: one RESET frame per connection, sent before any is read."""
        for k in copies:
            self._request_reset(k)
        tickets = [(c, t) for c in {self.links.envs[k].connection: None for k in copies}
                   if (t := c.flush_resets()) is not None]
        for connection, ticket in tickets:
            connection.collect(ticket)
        for k in copies:
            self._after_reset(k)
            self.on_start(k)

    def _advance_paced(self, g: Group, copies: list[int]) -> list[PendingDecision]:
        """The next live decision of each of a paced group's copies that has one; the copies that need a reset
        (and may start an episode) are sent one RESET frame, and their decisions come with its answers."""
        found: list[PendingDecision] = []
        resets = []
        steppers, may_reset_of = self.steppers, self.may_reset_of
        for k in copies:
            stepper = steppers[k]
            self.current = k
            if stepper.in_episode and (decisions := stepper.next_decisions()):
                found += decisions
            elif may_reset_of[k]:
                resets.append(k)
        if resets:
            for k in resets:
                self._request_reset(k)
            self.resetting.update(resets)
            g.connection.flush_resets()
        return found

    def _answered_paced(self, g: Group, instances: list[int]) -> list[PendingDecision]:
        """A paced group's STATE applied: each answered copy's step (or reset) completed, and the next decisions
        of those copies."""
        copies = []
        for instance in instances:
            k = g.copy_of[instance]
            self.current = k
            if k in self.resetting:
                self.resetting.discard(k)
                self._after_reset(k)
                self.on_start(k)
            else:
                self._stepped(k)
            copies.append(k)
        return self._advance_paced(g, copies)

    def _begin(self, g: Group, may_reset: bool) -> None:
        """A group's first decisions (at the start, or on a server launched again)."""
        if g.paced:
            self.may_reset_of.update((k, may_reset) for k in g.copies)
            g.ready = self._advance_paced(g, g.copies) or None
        else:
            g.ready = self._advance(g.copies, may_reset)

    def start(self, may_reset: bool) -> None:
        """Bring every copy to its first pending decision (the resets of a connection in one frame)."""
        self.may_reset = may_reset
        for g in self.groups:
            if g.ready is None:
                try:
                    self._begin(g, may_reset)
                except RemoteEnvError as exc:
                    self._recover(exc, may_reset)

    def submit(self, group: int, answered: list[Answer], cut: list[int], may_reset: bool,
               held: Sequence[PendingDecision] = ()) -> None:
        """Queue the group's actions on its connection and send them as one frame; return at once."""
        if held:
            raise ValueError(f"remote env group {group}: {len(held)} decisions held back; a group is answered whole")
        g = self.groups[group]
        self.may_reset = may_reset
        try:
            for k in cut:
                self.current = k
                self.steppers[k].cut()
            by_copy: dict[int, list[Answer]] = {}
            for answer in answered:
                by_copy.setdefault(answer[0].copy, []).append(answer)
            for k, answers in by_copy.items():
                self._act(k, answers)
            g.may_reset = may_reset
            g.since = time.monotonic()
            if g.paced:
                self.may_reset_of.update(dict.fromkeys(by_copy, may_reset))
                g.ready = None
                g.connection.flush()
                return
            g.answered = list(by_copy)
            ticket = g.connection.flush()
            # Nothing sent: every copy was cut, or each copy's env waited for its own reply (a wrapped parallel env).
            g.ticket = None if ticket is None or isinstance(ticket, tuple) else ticket
            g.ready = None if g.ticket is not None else self._replied(g)
        except RemoteEnvError as exc:
            self._recover(exc, may_reset)

    def next_ready(self) -> tuple[int, list[PendingDecision]] | None:
        """The next group with its reply in (waiting for one); None when no group is outstanding."""
        while True:
            try:
                return self._next_ready()
            except RemoteEnvError as exc:
                self._recover(exc, self.may_reset)

    def _next_ready(self) -> tuple[int, list[PendingDecision]] | None:
        while True:
            outstanding = [i for i, g in enumerate(self.groups) if g.outstanding]
            if not outstanding:
                return None
            self._check_deadlines(outstanding)
            # Oldest first: a group whose reply is always in at once (a fast server) must not starve the others.
            outstanding.sort(key=lambda i: self.groups[i].since)
            for i in outstanding:
                g = self.groups[i]
                if g.ready is not None or (g.connection.poll() if g.paced else
                                           g.ticket is not None and g.connection.has_reply(g.ticket)):
                    return i, self._complete(g)
            waiting: dict[socket.socket, int] = {}
            for i in outstanding:  # a connection's replies come in order: its oldest ticket is read next
                g = self.groups[i]
                sock = g.connection.sock
                assert sock is not None, "a group awaiting a reply has an open connection"
                if sock in waiting:
                    first = self.groups[waiting[sock]]
                    # groups that share a connection are unpaced ones (a paced connection has one), each with a ticket
                    assert g.ticket is not None and first.ticket is not None, "an unpaced group awaits its ticket"
                    if g.ticket >= first.ticket:
                        continue
                waiting[sock] = i
            readable, _, _ = select.select(list(waiting), [], [], 0.05)
            if readable:
                i = min((waiting[s] for s in readable), key=lambda i: self.groups[i].since)
                return i, self._complete(self.groups[i])

    def _check_deadlines(self, outstanding: list[int]) -> None:
        """Raise for a group whose reply is overdue, with nothing come in on its connection: checked every
        round, so a hung server is found while other servers keep the actor busy."""
        now = time.monotonic()
        for i in outstanding:
            g = self.groups[i]
            if g.paced:  # the oldest instance awaiting an answer
                waiting = g.connection.outstanding
                if not waiting or now - next(iter(waiting.values())) <= self.timeout_s or g.connection.poll():
                    continue
            elif g.ticket is None or now - g.since <= self.timeout_s or g.connection.has_reply(g.ticket):
                continue
            sock = g.connection.sock
            assert sock is not None, "a group awaiting a reply has an open connection"
            if not select.select([sock], [], [], 0)[0]:
                raise g.connection.failure(f"has not answered for {self.timeout_s:g}s (an env step that never "
                                          f"returns?)", hung=True)

    def _complete(self, g: Group) -> list[PendingDecision]:
        """The group's reply applied: each answered copy's step completed and its next decision."""
        if g.ready is not None:
            ready, g.ready = g.ready, None
            return ready
        if g.paced:
            return self._answered_paced(g, g.connection.next_answered())
        ticket, g.ticket = g.ticket, None
        assert ticket is not None, "an unpaced group awaiting a reply has its ticket"
        g.connection.collect(ticket)
        return self._replied(g)

    def _replied(self, g: Group) -> list[PendingDecision]:
        """An unpaced group's reply in: each answered copy's step completed, and their next decisions."""
        for k in g.answered:
            self._stepped(k)
        return self._advance(g.answered, g.may_reset)

    def finish(self) -> None:
        """Cut every copy still in an episode (the run is over)."""
        self.may_reset = False
        for k, stepper in self.steppers.items():
            self.current = k
            try:
                stepper.cut()
            except RemoteEnvError as exc:
                self._recover(exc, False)

    # ------------------------------------------------------------------------------------------ failures
    def _recover(self, error: RemoteEnvError, may_reset: bool) -> None:
        """After `error`: relaunch the lost servers while the restart budget allows (their copies start fresh
        episodes), else cut the copies on healthy servers, drop those on failed ones, and raise `error`."""
        while True:
            failed = [c for c in self.links.connections if c.broken is not None]
            servers = {self.links.server(c) for c in failed}
            if (not failed or not all(c.lost for c in failed) or None in servers
                    or len(servers) > self.restarts_left):
                self._wind_down()
                raise error
            try:
                for server in sorted(s for s in servers if s is not None):  # None is not in `servers` (above)
                    self.restarts_left -= 1
                    dropped = self._drop(self.links.copies_of(server))
                    logger.warning(f"remote: {next(c.broken for c in failed if self.links.server(c) == server)}; "
                                   f"{dropped} pending decisions of its episodes in flight dropped; launching it "
                                   f"again ({self.restarts_left} restarts left)")
                    for g in self.links.relaunch(server):
                        g.may_reset = may_reset
                        self._begin(g, may_reset)
                return
            except RemoteEnvError as again:
                error = again

    def _drop(self, copies: list[int]) -> int:
        """Abandon the episodes in flight of copies whose server was lost; the decisions dropped."""
        self.resetting.difference_update(copies)
        for k in copies:
            self.outcomes.pop(k, None)
        return sum(self.steppers[k].abandon() for k in copies)

    def _wind_down(self) -> None:
        """Before a server's error ends the run: read the healthy connections' outstanding replies, cut their
        copies (rule 5), and drop the episodes of copies on failed connections. A healthy connection that fails
        meanwhile has its copies dropped too."""
        for g in self.groups:
            if g.connection.broken is None and g.paced:
                g.ready = None
                self._quietly(g.connection, functools.partial(self._drain_paced, g))
            elif g.connection.broken is None and g.ticket is not None:
                g.may_reset, g.ready = False, None
                self._quietly(g.connection, functools.partial(self._complete, g))
            g.clear()
        for connection in self.links.connections:
            self._quietly(connection, functools.partial(self._cut, self.links.copies_of(None, connection)))
        for connection in self.links.connections:
            if connection.broken is not None:
                self._drop(self.links.copies_of(None, connection))

    def _cut(self, copies: list[int]) -> None:
        """Cut the episodes of `copies` (rule 5)."""
        for k in copies:
            self.steppers[k].cut()

    def _drain_paced(self, g: Group) -> None:
        """Read every answer a paced group still awaits, starting no episode: the steps are completed (and their
        dead agents' turns played), the copies whose reset was answered stay between episodes."""
        connection = g.connection
        while connection.outstanding or connection.answered:
            for instance in connection.next_answered():
                k = g.copy_of[instance]
                self.current = k
                if k in self.resetting:
                    self.resetting.discard(k)
                    continue
                self._stepped(k)
                self.steppers[k].next_decisions()

    def _quietly(self, connection: Connection, work: Callable[[], Any]) -> None:
        """Run `work` on a healthy connection; a failure there is logged, never raised over the first error."""
        if connection.broken is not None:
            return
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - the run already ends with the first server's error
            logger.warning(f"remote: while cutting the episodes of {connection.label}: {type(exc).__name__}: {exc}")

    def failure_context(self) -> tuple[int, str | None, int]:
        stepper = self.steppers.get(self.current)
        if stepper is None:
            return -1, None, -1
        agent = getattr(self.links.envs[self.current], "agent_selection", None) or getattr(stepper, "agent_selection",
                                                                                           None)
        return self.current, agent, stepper.episode_index

    def close(self) -> None:
        """Close every connection and stop every launched server; never raises."""
        self.links.close()
