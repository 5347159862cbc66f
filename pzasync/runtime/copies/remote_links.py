"""Where one run's remote env copies are served (docs/remote.md): the servers launched from a `cmd:` id (or
the one at an address), the connections to them, and the copies' groups (two per connection; one per paced
connection, whose replies come per instance). `relaunch` replaces a launched server that was lost, and its
connections, keeping each copy's mirror: a `RemoteEnv`, or on the parallel path a `RemoteParallelEnv`."""

from __future__ import annotations

import math

import numpy as np

from pzasync.core.stepper import PendingDecision
from pzasync.errors import EnvSpecError
from pzasync.remote.address import Address
from pzasync.remote.client import Connection, Mirror
from pzasync.remote.launch import ServerProcess, launch
from pzasync.remote.parallel import RemoteParallelEnv


class Group:
    """Copies of one connection answered together: their outstanding STEP frame, if any. On a paced connection
    (its server answers any subset of instances at a time) the group is all the connection's copies, and each
    STATE that comes in makes the copies it answers ready together."""

    def __init__(self, connection: Connection, copies: list[int], copy_of: dict[int, int],
                 deferred: bool = True) -> None:
        self.connection, self.copies, self.deferred = connection, copies, deferred
        #: Instance on the connection -> copy.
        self.copy_of = copy_of
        self.clear()

    def clear(self) -> None:
        """Nothing outstanding."""
        self.ticket: int | None = None
        self.answered: list[int] = []
        self.may_reset = False
        self.since = 0.0
        self.ready: list[PendingDecision] | None = None  # decisions known without a reply (after `start`)

    @property
    def paced(self) -> bool:
        """Whether the group's replies come at the server's pace (copies whose envs wait for their own replies,
        `deferred` False, are answered whole whatever the server)."""
        return self.connection.paced and self.deferred

    @property
    def outstanding(self) -> bool:
        """Whether the group has decisions ready or answers to come."""
        if self.ready is not None or self.ticket is not None:
            return True
        connection = self.connection
        return self.paced and (bool(connection.outstanding) or bool(connection.answered))


class Links:
    """The servers, connections and groups of `copies` remote env copies (module docstring). For a `cmd:` id:
    `servers` processes (kwargs), each launched with `instances` as its {instances}. `connection` is the
    connection class (a benchmark substitutes one carrying the messages another way). With `parallel` the copies
    are served through the parallel API (`RemoteParallelEnv`s), and with `deferred` False each mirror sends its own
    requests and waits for their replies (the parallel envs of a run whose env is wrapped: a wrapper reads what the
    env's `step` returns)."""

    def __init__(self, env_id: str, kwargs: dict, copies: int, timeout_s: float,
                 connection: type[Connection] = Connection, parallel: bool = False, deferred: bool = True) -> None:
        self.timeout_s, self.connection = timeout_s, connection
        self.parallel, self.deferred = parallel, deferred
        self.servers: list[ServerProcess] = []
        #: Per connection: the index of its server in `servers` (None: a server at an address, not ours).
        self.connections: list[Connection] = []
        self.server_of: list[int | None] = []
        self.groups: list[Group] = []
        #: Copy -> the mirror of its instance (a RemoteEnv, or a RemoteParallelEnv on the parallel path).
        self.envs: dict[int, Mirror] = {}
        try:
            self._connect(env_id, kwargs, copies)
        except BaseException:
            self.close()
            raise

    def _connect(self, env_id: str, kwargs: dict, copies: int) -> None:
        if env_id.startswith("cmd:"):
            n = int(kwargs.get("servers") or 1)
            if not 1 <= n <= copies:
                raise EnvSpecError(f"remote env {env_id!r}: servers={n}, but the actor steps {copies} copies")
            per_server = kwargs.get("instances") or math.ceil(copies / n)
            self.servers = launch(env_id, n, timeout_s=self.timeout_s, instances=per_server)
            endpoints: list[tuple[Address, int | None]] = [(s.address, i) for i, s in enumerate(self.servers)]
        else:
            endpoints = [(Address.parse(env_id), None)]
        for part, (address, server) in zip(np.array_split(np.arange(copies), len(endpoints)), endpoints):
            share = [int(k) for k in part]
            while share:
                connection = self._open(address, server)
                mine, share = share[:connection.max_instances], share[connection.max_instances:]
                for instance, k in enumerate(mine):
                    self.envs[k] = (RemoteParallelEnv(connection, instance, deferred=self.deferred) if self.parallel
                                    else connection.env(instance, deferred=True))
                copy_of = dict(enumerate(mine))
                if connection.paced and self.deferred:  # the server's pace groups the copies, reply by reply
                    self.groups.append(Group(connection, mine, copy_of))
                    continue
                halves = np.array_split(np.array(mine), 2 if len(mine) > 1 else 1)
                self.groups.extend(Group(connection, [int(k) for k in h], copy_of, self.deferred) for h in halves)

    def _open(self, address: Address, server: int | None) -> Connection:
        """A new connection (the server's n-th is labelled so)."""
        n = sum(1 for s in self.server_of if s == server) if server is not None else len(self.connections)
        if server is None:
            label, describe_end = f"server {address}", None
        else:
            label, describe_end = self.servers[server].label, self.servers[server].describe_end
        connection = self.connection(address, self.timeout_s, describe_end=describe_end,
                                     label=label + (f", connection {n}" if n else ""))
        self.connections.append(connection)
        self.server_of.append(server)
        return connection

    def server(self, connection: Connection) -> int | None:
        """The index of the launched server behind `connection` (None: a server at an address)."""
        return self.server_of[self.connections.index(connection)]

    def copies_of(self, server: int | None, connection: Connection | None = None) -> list[int]:
        """The copies served by `connection`, or by every connection to launched server `server`."""
        return [k for g in self.groups if (g.connection is connection if connection is not None else
                                           self.server(g.connection) == server) for k in g.copies]

    def relaunch(self, server: int) -> list[Group]:
        """Stop launched server `server`, start it again and reconnect its connections (each copy keeps its
        RemoteEnv, showing nothing until its next reset). Returns the groups it serves."""
        old_label = self.servers[server].label
        self.servers[server] = fresh = self.servers[server].relaunch(self.timeout_s)
        groups = []
        for j, (connection, s) in enumerate(list(zip(self.connections, self.server_of))):
            if s != server:
                continue
            connection.close()
            replacement = self.connection(fresh.address, self.timeout_s, describe_end=fresh.describe_end,
                                          label=fresh.label + connection.label[len(old_label):])
            self.connections[j] = replacement
            for env in connection.envs.values():
                replacement.adopt(env)
            for g in self.groups:
                if g.connection is connection:
                    g.connection = replacement
                    g.clear()
                    groups.append(g)
        return groups

    def close(self) -> None:
        """Close every connection and stop every launched server; never raises."""
        for connection in self.connections:
            connection.close()
        for server in self.servers:
            server.close()
