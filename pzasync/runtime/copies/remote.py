"""Env copies served by other processes over the remote env protocol (docs/remote.md): `RemoteEnvs` and
`RemoteCopies`, behind the same `EnvCopies` interface as the others (protocol.py).

Each copy is an `EpisodeStepper` over a `RemoteEnv` (pzasync/remote/client.py) that mirrors one served
instance, so transitions are assembled here with `rollout`'s exact semantics. Many copies share a connection:
a round's steps go out as one STEP frame per group and come back as one STATE frame, and dead agents' turns
come back in it (the server steps them). A connection's copies form two groups, so the server steps one
while the actor answers the other; with several servers (a `cmd:` id with `servers=N`) the actor answers
whichever group comes back first.

A server that dies, hangs past `timeout_s` or answers with an error ends the run with a `RemoteEnvError`
naming the server, its instances and (for servers launched here) its exit code and the end of its stderr.
Transitions already delivered stay delivered; the episodes in flight on that server are dropped, never
completed with made-up data. `close` closes every connection and stops every launched server.
"""

from __future__ import annotations

import math
import select
import time
from typing import Any, Callable, Sequence

import numpy as np

from pzasync.core.spaces import env_action_converter
from pzasync.core.stepper import EpisodeStepper, PendingDecision
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition
from pzasync.errors import EnvSpecError
from pzasync.remote.address import Address
from pzasync.remote.client import Connection
from pzasync.remote.launch import ServerProcess, launch
from pzasync.runtime.copies.protocol import Answer


class RemoteEnvs:
    """What an actor needs to step `copies` copies of a remote env (`EnvCopiesFactory`): its id (an address
    or a `cmd:` template) and keyword arguments (`servers`, `instances`, `timeout_s`)."""

    #: No copy is stepped in the actor's process.
    env: Any = None

    def __init__(self, env_spec: Any, copies: int, timeout_s: float = 60.0) -> None:
        self.env_spec, self.copies = env_spec, copies
        self.env_name = env_spec.name
        self.timeout_s = float(env_spec.kwargs.get("timeout_s", timeout_s))

    def open(self, seed: int | None, layouts: dict, *, emit: Callable[[Transition, int], None],
             on_episode: Callable[[EpisodeSummary], None], on_start: Callable[[int], None],
             check_rewards: bool = True, max_episode_steps: int | None = None) -> RemoteCopies:
        """Launch the servers of a `cmd:` id (or reach the one at the address) and connect the copies."""
        return RemoteCopies(self.env_spec.source, dict(self.env_spec.kwargs), self.copies, seed, layouts, emit=emit,
                            on_episode=on_episode, on_start=on_start, check_rewards=check_rewards,
                            max_episode_steps=max_episode_steps, timeout_s=self.timeout_s)

    def close(self) -> None:
        """Nothing held between runs: each run's `RemoteCopies` closes its own connections and servers."""


class _Group:
    """Copies of one connection answered together: their outstanding STEP frame, if any."""

    def __init__(self, connection: Connection, copies: list[int]) -> None:
        self.connection, self.copies = connection, copies
        self.ticket: int | None = None
        self.answered: list[int] = []
        self.may_reset = False
        self.since = 0.0
        self.ready: list[PendingDecision] | None = None  # decisions known without a reply (after `start`)


class RemoteCopies:
    """Env copies served by remote env servers (module docstring)."""

    holds_back = False

    def __init__(self, env_id: str, kwargs: dict, copies: int, seed: int | None, layouts: dict, *,
                 emit: Callable[[Transition, int], None], on_episode: Callable[[EpisodeSummary], None],
                 on_start: Callable[[int], None], check_rewards: bool = True, max_episode_steps: int | None = None,
                 timeout_s: float = 60.0) -> None:
        self.on_start = on_start
        self.timeout_s = timeout_s
        self.servers: list[ServerProcess] = []
        self.connections: list[Connection] = []
        self.groups: list[_Group] = []
        self.steppers: dict[int, EpisodeStepper] = {}
        self.current = 0
        try:
            self._connect(env_id, kwargs, copies)
            to_env = env_action_converter(layouts)
            for group in self.groups:
                for k in group.copies:
                    env = self._env_of[k]
                    self.steppers[k] = EpisodeStepper(
                        env, (lambda t, k=k: emit(t, k)), copy=k, seed=None if seed is None else seed + k,
                        layouts=LayoutBook(env, layouts, fixed=True), check_rewards=check_rewards,
                        max_episode_steps=max_episode_steps, to_env=to_env, on_episode=on_episode)
        except BaseException:
            self.close()
            raise

    def _connect(self, env_id: str, kwargs: dict, copies: int) -> None:
        """Launch or reach the servers, open as many connections as their instance limits need, and split the
        copies into groups (two per connection)."""
        if env_id.startswith("cmd:"):
            n = int(kwargs.get("servers") or 1)
            if not 1 <= n <= copies:
                raise EnvSpecError(f"remote env {env_id!r}: servers={n}, but the actor steps {copies} copies")
            per_server = kwargs.get("instances") or math.ceil(copies / n)
            self.servers = launch(env_id, n, timeout_s=self.timeout_s, instances=per_server)
            endpoints = [(s.address, s.describe_end, s.label) for s in self.servers]
        else:
            endpoints = [(Address.parse(env_id), None, f"server {env_id}")]
        self._env_of: dict[int, Any] = {}
        for share, (address, describe_end, label) in zip(np.array_split(np.arange(copies), len(endpoints)),
                                                         endpoints):
            share = [int(k) for k in share]
            while share:
                n_conn = len([c for c in self.connections if c.address == address])
                connection = Connection(address, self.timeout_s, describe_end=describe_end,
                                        label=label + (f", connection {n_conn}" if n_conn else ""))
                self.connections.append(connection)
                mine, share = share[:connection.max_instances], share[connection.max_instances:]
                for instance, k in enumerate(mine):
                    self._env_of[k] = connection.env(instance, deferred=True)
                halves = [h for h in np.array_split(np.array(mine), 2 if len(mine) > 1 else 1)]
                self.groups.extend(_Group(connection, [int(k) for k in h]) for h in halves)

    def _next(self, stepper: EpisodeStepper, may_reset: bool) -> PendingDecision | None:
        """The copy's next live decision, starting episodes while `may_reset`."""
        self.current = stepper.copy
        while True:
            if not stepper.in_episode:
                if not may_reset:
                    return None
                stepper.reset()
                self.on_start(stepper.copy)
            decision = stepper.advance()
            if decision is not None:
                return decision

    def start(self, may_reset: bool) -> None:
        """Bring every copy to its first pending decision (each reset is a round trip: once per episode)."""
        for group in self.groups:
            group.ready = [d for k in group.copies if (d := self._next(self.steppers[k], may_reset)) is not None]

    def submit(self, group: int, answered: list[Answer], cut: list[int], may_reset: bool,
               held: Sequence[PendingDecision] = ()) -> None:
        """Queue the group's actions on its connection and send them as one frame; return at once."""
        if held:
            raise ValueError(f"remote env group {group}: {len(held)} decisions held back; a group is answered whole")
        g = self.groups[group]
        for k in cut:
            self.current = k
            self.steppers[k].cut()
        for decision, action, extras in answered:
            self.current = decision.copy
            self.steppers[decision.copy].act(action, extras)
        g.answered = [d.copy for d, _, _ in answered]
        g.may_reset = may_reset
        g.ticket = g.connection.flush()
        g.ready = None if g.ticket is not None else []
        g.since = time.monotonic()

    def _outstanding(self) -> list[int]:
        return [i for i, g in enumerate(self.groups) if g.ready is not None or g.ticket is not None]

    def next_ready(self) -> tuple[int, list[PendingDecision]] | None:
        """The next group with its reply in (waiting for one); None when no group is outstanding."""
        while True:
            outstanding = self._outstanding()
            if not outstanding:
                return None
            for i in outstanding:
                g = self.groups[i]
                if g.ready is not None or g.connection.has_reply(g.ticket):
                    return i, self._complete(g)
            waiting: dict[Any, int] = {}
            for i in outstanding:  # a connection's replies come in order: its oldest ticket is read next
                sock = self.groups[i].connection.sock
                if sock not in waiting or self.groups[i].ticket < self.groups[waiting[sock]].ticket:
                    waiting[sock] = i
            readable, _, _ = select.select(list(waiting), [], [], 0.05)
            if readable:
                i = min(waiting[s] for s in readable)
                return i, self._complete(self.groups[i])
            for i in waiting.values():
                g = self.groups[i]
                if time.monotonic() - g.since > self.timeout_s:
                    raise g.connection.failure(f"has not answered for {self.timeout_s:g}s (an env step that never "
                                              f"returns?)", hung=True)

    def _complete(self, g: _Group) -> list[PendingDecision]:
        """The group's reply applied: each answered copy's step completed and its next decision."""
        if g.ready is not None:
            ready, g.ready = g.ready, None
            return ready
        ticket, g.ticket = g.ticket, None
        g.connection.collect(ticket)
        following = []
        for k in g.answered:
            stepper = self.steppers[k]
            self.current = k
            stepper.stepped()
            if (nxt := self._next(stepper, g.may_reset)) is not None:
                following.append(nxt)
        return following

    def finish(self) -> None:
        """Cut every copy still in an episode (the run is over)."""
        for k, stepper in self.steppers.items():
            self.current = k
            stepper.cut()

    def failure_context(self) -> tuple[int, Any, int]:
        stepper = self.steppers.get(self.current)
        if stepper is None:
            return -1, None, -1
        return self.current, stepper.env.agent_selection, stepper.episode_index

    def close(self) -> None:
        """Close every connection and stop every launched server; never raises."""
        for connection in self.connections:
            connection.close()
        for server in self.servers:
            server.close()
