"""The trainer's side of the remote env protocol (docs/remote.md): a `Connection` to one server, and
`RemoteEnv`, an AEC env that mirrors one served instance (`RemoteParallelEnv`, remote/parallel.py, mirrors one
through the parallel API, where the server offers it).

A `RemoteEnv` shows exactly what the served env shows after each step (agents, selection, every agent's reward,
cumulative reward, termination and truncation, the selected agent's observation and info), so anything that
steps an AEC env in process steps it unchanged; `connect` returns one. Env copies (runtime/copies/remote.py)
put many of them on one connection and send each round's steps as one frame (`Connection.flush`).

A server that sets its own pace (`"paced": true` in its WELCOME) may answer a STEP or RESET with several STATE
frames, each covering any subset of the instances awaiting an answer: on such a connection a STATE is applied
as soon as it comes in and its instances are queued (`Connection.answered`), while the other replies keep
their order by ticket.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections import deque
from typing import Any, Callable, Protocol, overload

import numpy as np
from pettingzoo import AECEnv

from pzasync.errors import RemoteEnvError, RemoteProtocolError, RemoteSpaceError, remote_error
from pzasync.remote.address import Address
from pzasync.remote.json_values import plain
from pzasync.remote.launch import launch
from pzasync.remote.protocol import (
    CYCLE_INFO_JSON,
    HAS_OPTIONS,
    HAS_SEED,
    INFO_JSON,
    INFO_MASK,
    MAGIC,
    MASK_KEY,
    NO_AGENT,
    NO_OBS,
    NONE_ACTION,
    OBSERVE_RECORD,
    RESET_RECORD,
    VERSION,
    EnvLayout,
    Kind,
    frame,
    info_tail,
    packed_frame,
    read_infos,
    records_frame,
    split_records,
    unpack_records,
)
from pzasync.remote.stream import FrameStream

_ERRORS = {"malformed": RemoteProtocolError, "version": RemoteProtocolError, "space": RemoteSpaceError}

#: What `Connection.send` returns and `collect` takes: a request's place in the reply order, or, for a STEP or
#: RESET on a paced connection, the instances it names (answered per instance).
Ticket = int | tuple[int, ...]


class Mirror(Protocol):
    """A served instance as a connection's client shows it: a `RemoteEnv` (the AEC protocol) or a
    `RemoteParallelEnv` (the parallel API: remote/parallel.py)."""

    connection: Connection
    instance: int

    def forget(self) -> None:
        """Show nothing until the next reset (the instance is served afresh)."""

    def apply_cycle(self, row: tuple, infos: list[dict]) -> None:
        """Show a cycle record (`EnvLayout.cycle_struct`) and its infos' JSON parts, in agent order."""


class Connection:
    """One connection to a server: the handshake, requests answered in order (several may be in flight), and
    the instances (`RemoteEnv`s) it serves. Every failure is a `RemoteEnvError` naming the server, the
    instances and, for a server we launched, its exit code and the tail of its stderr (`describe_end`).

    On a `paced` connection (module docstring) STATE frames answer instances, not requests: `outstanding`
    holds the instances awaiting one, `answered` the instances of each STATE come in and not yet taken
    (`poll`, `next_answered`)."""

    def __init__(self, address: str | Address, timeout_s: float = 60.0,
                 describe_end: Callable[[bool], str] | None = None, label: str | None = None) -> None:
        self.address = Address.parse(address) if isinstance(address, str) else address
        self.timeout_s = timeout_s
        self.describe_end = describe_end
        self.label = label or f"server {self.address}"
        self.envs: dict[int, Mirror] = {}
        self._sent = 0  # tickets: requests sent, and the one whose reply is read next
        self._read = 0
        self._stash: dict[int, tuple[int, memoryview]] = {}
        self._queued: list[tuple[int, int, bytes]] = []
        self._resets: list[tuple[int, int | None, dict | None]] = []
        #: The parallel API's queued requests: cycle steps (instance, packed record) and resets.
        self._cycles: list[tuple[int, bytes]] = []
        self._parallel_resets: list[tuple[int, int | None, dict | None]] = []
        self._broken: RemoteEnvError | None = None
        #: Whether the server answers STEP and RESET per instance, in STATE frames of any subset (its WELCOME
        #: says `"paced": true`); False until the handshake.
        self.paced = False
        #: Whether the server offers the parallel API (its WELCOME says `"parallel": true`: docs/remote.md, "The
        #: parallel API"); False until the handshake.
        self.parallel = False
        #: Paced: instance -> when the STEP or RESET naming it was sent (oldest first), while unanswered.
        self.outstanding: dict[int, float] = {}
        #: Paced: the instances of each STATE come in (in their order), not yet taken.
        self.answered: deque[list[int]] = deque()
        #: Whether the server was lost (closed the connection, died, did not answer in time), as opposed to
        #: answering with an ERROR (an env that raised, a refused request).
        self.lost = False
        self.sock: socket.socket | None = None
        try:
            self.sock = self.address.connect(timeout_s)
        except OSError as exc:
            raise self.failure(f"cannot connect ({type(exc).__name__}: {exc})") from None
        self.stream = FrameStream(self.sock, self.label)
        try:
            self.stream.send(frame(Kind.HELLO, MAGIC + struct.pack("<HH", VERSION, 0)), time.monotonic() + timeout_s)
            kind, body = self._read_frame()
            if kind == Kind.ERROR:
                raise self._refusal(body)
            if kind != Kind.WELCOME or len(body) < 2:
                raise RemoteProtocolError(f"{self.label}: expected WELCOME to HELLO, got message kind {kind}")
            (version,) = struct.unpack_from("<H", body)
            if version != VERSION:
                raise RemoteProtocolError(f"{self.label} speaks protocol version {version}; this client speaks "
                                          f"{VERSION}")
            try:
                self.description = json.loads(bytes(body[2:]))
            except ValueError as exc:
                raise RemoteProtocolError(f"{self.label}: malformed WELCOME JSON ({exc})") from None
            self.layout = EnvLayout.from_description(self.description, self.label)
            self.name = str(self.description.get("name", self.address))
            self.max_instances = int(self.description.get("max_instances", 1))
            self.paced = self.description.get("paced", False) is True
            self.parallel = self.description.get("parallel", False) is True
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------ frames
    def _read_frame(self) -> tuple[int, memoryview]:
        try:
            return self.stream.read(time.monotonic() + self.timeout_s)
        except TimeoutError:
            raise self.failure(f"has not answered for {self.timeout_s:g}s (an env step that never returns?)",
                              hung=True) from None
        except (EOFError, OSError) as exc:
            raise self.failure(f"closed the connection ({type(exc).__name__}: {exc})") from None

    def failure(self, what: str, hung: bool = False) -> RemoteEnvError:
        """The error that ends a run whose server failed: the server, the instances, how it ended."""
        instances = sorted(self.envs)
        served = (f" (instances {instances[0]}-{instances[-1]})" if len(instances) > 1 else
                  f" (instance {instances[0]})" if instances else "")
        end = self.describe_end(hung) if self.describe_end is not None else ""
        error = RemoteEnvError(f"{self.label}{served} {what}{'; ' + end if end else ''}")
        self._broken, self.lost = error, True
        return error

    @property
    def broken(self) -> RemoteEnvError | None:
        """The error that ended this connection, if one did."""
        return self._broken

    def _refusal(self, body: memoryview) -> RemoteEnvError:
        """An ERROR frame as the error it stands for (the env's own type where the server names one)."""
        try:
            data = json.loads(bytes(body))
        except ValueError:
            return RemoteProtocolError(f"{self.label} answered with a malformed ERROR frame")
        code, message = data.get("code", "error"), data.get("message", "")
        where = f"instance {data['instance']}" if data.get("instance") is not None else ""
        if data.get("agent") is not None:
            where += f", during the turn of agent {data['agent']!r}"
        text = f"{self.label} of env {self.description.get('name')!r}" if hasattr(self, "description") else self.label
        text += f" ({where})" if where else ""
        if code == "env" and data.get("type"):
            return remote_error(RemoteEnvError, data["type"], f"{text} raised {message} (the server's traceback is "
                                f"the cause)", data.get("traceback", ""))
        return _ERRORS.get(code, RemoteEnvError)(f"{text}: {message}")

    @overload
    def send(self, data: bytes) -> int: ...

    @overload
    def send(self, data: bytes, instances: list[int] | None) -> Ticket: ...

    def send(self, data: bytes, instances: list[int] | None = None) -> Ticket:
        """Send a request; returns its ticket, for `receive` (or `collect`). `instances`: those a STEP or RESET
        names; on a paced connection they are its ticket, each outstanding until a STATE answers it."""
        if self._broken is not None:
            raise self._broken
        paced = tuple(instances) if instances is not None and self.paced else None
        if paced is not None:
            outstanding, now = self.outstanding, time.monotonic()
            for instance in paced:
                if instance in outstanding:
                    raise ValueError(f"{self.label}: instance {instance} is sent a request while its last STEP or "
                                     f"RESET is not answered")
                outstanding[instance] = now
        try:
            self.stream.send(data, time.monotonic() + self.timeout_s)
        except TimeoutError:
            raise self.failure(f"has not taken a request for {self.timeout_s:g}s", hung=True) from None
        except OSError as exc:
            raise self.failure(f"closed the connection ({type(exc).__name__}: {exc})") from None
        if paced is not None:
            return paced
        self._sent += 1
        return self._sent - 1

    def _take(self, found: tuple[int, memoryview]) -> None:
        """File a frame that came in: the reply to the next ticket; but on a paced connection a STATE is applied
        at once and its instances queued in `answered`, and an ERROR ends the connection (it may stand for any
        instance's answer)."""
        kind, body = found
        if self.paced:
            if kind == Kind.STATE or kind == Kind.CYCLE:
                try:
                    instances = self.apply_state(body) if kind == Kind.STATE else self.apply_cycles(body)
                except RemoteProtocolError as exc:
                    self._broken = exc
                    raise
                if instances:
                    self.answered.append(instances)
                return
            if kind == Kind.ERROR:
                self._broken = self._refusal(body)
                raise self._broken
        self._stash[self._read] = found
        self._read += 1

    def receive(self, ticket: int) -> tuple[int, memoryview]:
        """The reply to `ticket` (replies come in order; earlier ones are kept for their own `receive`). An
        ERROR reply is raised."""
        while ticket not in self._stash:
            if self._broken is not None:
                raise self._broken
            self._take(self._read_frame())
        kind, body = self._stash.pop(ticket)
        if kind == Kind.ERROR:
            self._broken = self._refusal(body)
            raise self._broken
        return kind, body

    def has_reply(self, ticket: int) -> bool:
        """Whether `ticket`'s reply was already read (it came in while waiting for another, or with it)."""
        if ticket in self._stash:
            return True
        if self._broken is None and self.sock is not None:
            while ticket not in self._stash and (found := self.stream.next_frame()) is not None:
                self._take(found)
        return ticket in self._stash

    def poll(self) -> bool:
        """Paced: file the frames already received (no system call); whether a STATE's instances wait in
        `answered`."""
        if not self.answered and self._broken is None and self.sock is not None:
            while not self.answered and (found := self.stream.next_frame()) is not None:
                self._take(found)
        return bool(self.answered)

    def next_answered(self) -> list[int]:
        """Paced: the instances of every STATE come in (applied already), in order, waiting for one until the
        deadline; the STATE frames already received with it are taken too."""
        while not self.answered:
            if self._broken is not None:
                raise self._broken
            self._take(self._read_frame())
        answered = self.answered
        instances = answered.popleft()
        while answered or self.poll():
            instances += answered.popleft()
        return instances

    def wait_for(self, instances: tuple[int, ...] | list[int]) -> None:
        """Paced: wait until a STATE has answered each of `instances`, and take them out of `answered` (the
        other instances of those STATE frames stay there)."""
        outstanding = self.outstanding
        while any(i in outstanding for i in instances):
            if self._broken is not None:
                raise self._broken
            self._take(self._read_frame())
        wanted = set(instances)
        rest = [kept for batch in self.answered if (kept := [i for i in batch if i not in wanted])]
        self.answered = deque(rest)

    def request(self, data: bytes, expect: int) -> memoryview:
        kind, body = self.receive(self.send(data))
        if kind != expect:
            raise RemoteProtocolError(f"{self.label}: expected message kind {expect}, got {kind}")
        return body

    def ping(self, token: int = 0) -> float:
        """A heartbeat: seconds until the server answered."""
        start = time.perf_counter()
        body = self.request(frame(Kind.PING, struct.pack("<Q", token)), Kind.PONG)
        if bytes(body) != struct.pack("<Q", token):
            raise RemoteProtocolError(f"{self.label}: PONG carries another token")
        return time.perf_counter() - start

    # ------------------------------------------------------------------------------------------ instances
    def env(self, instance: int, deferred: bool = False) -> RemoteEnv:
        """The `RemoteEnv` of `instance` on this connection (made on first use)."""
        env = self.envs.get(instance)
        if env is None:
            env = RemoteEnv(self, instance, deferred=deferred)
            self.attach(env)
        if not isinstance(env, RemoteEnv):
            raise RemoteEnvError(f"{self.label}: instance {instance} is mirrored through the parallel API")
        return env

    def attach(self, env: Mirror) -> None:
        """Serve `env` (a new mirror, or one of a connection that was lost) from this connection, as its instance;
        it shows nothing until its next reset."""
        if not 0 <= env.instance < self.max_instances:
            raise RemoteEnvError(f"{self.label} serves instances 0..{self.max_instances - 1} per connection, not "
                                 f"{env.instance}")
        env.connection = self
        env.forget()
        self.envs[env.instance] = env

    adopt = attach

    def queue_reset(self, instance: int, seed: int | None, options: dict | None) -> None:
        self._resets.append((instance, seed, options))

    def queue_parallel_reset(self, instance: int, seed: int | None, options: dict | None) -> None:
        self._parallel_resets.append((instance, seed, options))

    def flush_resets(self) -> Ticket | None:
        """Send the queued resets as one RESET frame (PARALLEL_RESET for instances on the parallel API); its
        ticket (None when nothing was queued)."""
        if self._resets and self._parallel_resets:
            raise ValueError(f"{self.label}: resets of both APIs queued; flush one kind before queuing the other")
        kind, requests = (Kind.RESET, self._resets) if self._resets else (Kind.PARALLEL_RESET, self._parallel_resets)
        if not requests:
            return None
        self._resets, self._parallel_resets = [], []
        if self.paced:
            return self.send(_reset_frame(requests, kind), [r[0] for r in requests])
        return self.send(_reset_frame(requests, kind))

    def queue(self, instance: int, flags: int, action: bytes) -> None:
        self._queued.append((instance, flags, action))

    def queue_cycle(self, instance: int, record: bytes) -> None:
        """Queue a parallel step record (`EnvLayout.parallel_step_struct`) of `instance`."""
        self._cycles.append((instance, record))

    def flush(self) -> Ticket | None:
        """Send the queued steps as one STEP frame (PARALLEL_STEP for cycles on the parallel API); its ticket
        (None when nothing was queued)."""
        if self._queued and self._cycles:
            raise ValueError(f"{self.label}: steps of both APIs queued; flush one kind before queuing the other")
        if self._cycles:
            cycles, self._cycles = self._cycles, []
            data = packed_frame(Kind.PARALLEL_STEP, [record for _, record in cycles])
            return self.send(data, [instance for instance, _ in cycles]) if self.paced else self.send(data)
        if not self._queued:
            return None
        pack = self.layout.step_struct.pack  # zero-pads each action to action_bytes
        queued, self._queued = self._queued, []
        records = [pack(*request) for request in queued]
        if self.paced:
            return self.send(packed_frame(Kind.STEP, records), [request[0] for request in queued])
        return self.send(packed_frame(Kind.STEP, records))

    def collect(self, ticket: Ticket) -> None:
        """Receive a STEP's or RESET's STATE reply (a CYCLE, on the parallel API) and hand each instance what it
        carries (on a paced connection, wait until every instance of the request was answered)."""
        if isinstance(ticket, tuple):  # a paced connection's (`send`)
            self.wait_for(ticket)
            return
        kind, body = self.receive(ticket)
        if kind == Kind.STATE:
            self.apply_state(body)
        elif kind == Kind.CYCLE:
            self.apply_cycles(body)
        else:
            raise RemoteProtocolError(f"{self.label}: expected STATE or CYCLE, got message kind {kind}")

    def apply_state(self, body: memoryview) -> list[int]:
        """Hand each instance of a STATE frame its snapshots. On a paced connection each must be outstanding,
        and all its snapshots together (else RemoteProtocolError); returns the instances, in order (else [])."""
        rows, tail = unpack_records(body, self.layout.snapshot_struct, self.label)
        infos = read_infos(tail, sum(1 for row in rows if row[1] & INFO_JSON), self.label) if tail else []
        envs, previous, info_at = self.envs, None, 0
        outstanding = self.outstanding if self.paced else None
        covered = []
        for row in rows:
            info = None
            if row[1] & INFO_JSON:
                info, info_at = infos[info_at], info_at + 1
            env = envs.get(row[0])
            if not isinstance(env, RemoteEnv):
                raise RemoteProtocolError(f"{self.label}: a snapshot of instance {row[0]}, which was not asked for"
                                          + (" (it is on the parallel API)" if env is not None else ""))
            if row[0] == previous:
                env._later.append((row, info))  # a dead agent's turn, stepped with None by the server
                continue
            if outstanding is not None:
                self._answered(outstanding, row[0], "STATE", "its snapshots were split between STATE frames or "
                               "records")
                covered.append(row[0])
            env._later.clear()
            env._apply(row, info)
            previous = row[0]
        return covered

    def _answered(self, outstanding: dict[int, float], instance: int, kind: str, split: str) -> None:
        """Paced: `instance` is answered; RemoteProtocolError where it was not outstanding."""
        if outstanding.pop(instance, None) is None:
            raise RemoteProtocolError(
                f"{self.label}: a {kind} names instance {instance}, which is not outstanding (no request naming it "
                f"awaits an answer, or {split}); see docs/remote.md, \"Replies at the server's pace\"")

    def apply_cycles(self, body: memoryview) -> list[int]:
        """Hand each instance of a CYCLE frame its record (docs/remote.md, "The parallel API"): what its parallel
        env's reset or step returned. On a paced connection each must be outstanding (else RemoteProtocolError);
        returns the instances, in order (else [])."""
        layout = self.layout
        p = len(layout.agents)
        rows, tail = unpack_records(body, layout.cycle_struct, self.label)
        infos = read_infos(tail, sum(1 for row in rows for f in row[2 + p:2 + 2 * p] if f & CYCLE_INFO_JSON),
                           self.label)
        outstanding = self.outstanding if self.paced else None
        covered, info_at = [], 0
        for row in rows:
            env = self.envs.get(row[0])
            if env is None or isinstance(env, RemoteEnv):
                raise RemoteProtocolError(f"{self.label}: a cycle record of instance {row[0]}, which was not asked "
                                          f"for" + (" (it is on the AEC protocol)" if env is not None else ""))
            if outstanding is not None:
                self._answered(outstanding, row[0], "CYCLE", "it has two records")
                covered.append(row[0])
            n = sum(1 for f in row[2 + p:2 + 2 * p] if f & CYCLE_INFO_JSON)
            env.apply_cycle(row, infos[info_at:info_at + n])
            info_at += n
        return covered

    def reset_many(self, requests: list[tuple[int, int | None, dict | None]]) -> None:
        """Reset instances, `(instance, seed, options)` each, in one frame."""
        data = _reset_frame(requests)
        self.collect(self.send(data, [r[0] for r in requests]) if self.paced else self.send(data))

    def observe_many(self, requests: list[tuple[int, str]]) -> list[tuple[Any, dict]]:
        """(observation, info) of `(instance, agent)` pairs, in one frame."""
        layout = self.layout
        records = np.zeros(len(requests), OBSERVE_RECORD)
        for k, (instance, agent) in enumerate(requests):
            records[k] = (instance, layout.index[agent])
        body = self.request(records_frame(Kind.OBSERVE, records), Kind.OBSERVATION)
        replies, tail = split_records(body, layout.observation, self.label)
        flags = replies["flags"].tolist()
        infos = read_infos(tail, sum(1 for f in flags if f & INFO_JSON), self.label)
        out, info_at = [], 0
        for k, (_, agent) in enumerate(requests):
            extra = None
            if flags[k] & INFO_JSON:
                extra, info_at = infos[info_at], info_at + 1
            out.append((layout.obs[agent].decode(replies["obs"][k]),
                        _info(layout, agent, flags[k], replies["mask"][k], extra)))
        return out

    def close(self) -> None:
        """Close the socket; never raises."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        if self._broken is None:
            self._broken = RemoteEnvError(f"{self.label}: the connection was closed")


def _reset_frame(requests: list[tuple[int, int | None, dict | None]], kind: int = Kind.RESET) -> bytes:
    """A RESET (or PARALLEL_RESET) frame: `(instance, seed, options)` per instance."""
    records = np.zeros(len(requests), RESET_RECORD)
    options = []
    for k, (instance, seed, opts) in enumerate(requests):
        records[k] = (instance, (HAS_SEED if seed is not None else 0) | (HAS_OPTIONS if opts else 0), seed or 0)
        if opts:
            options.append(plain(opts, f"instance {instance}: reset options"))
    return records_frame(kind, records, info_tail(options))


def _info(layout: EnvLayout, agent: str, flags: int, mask: Any, extra: dict | None) -> dict:
    """An agent's info from a record: its JSON part `extra` and, if `flags` say so, the action mask in `mask`
    (any buffer of the record's mask bytes)."""
    info = dict(extra) if extra else {}
    if flags & INFO_MASK:
        info[MASK_KEY] = np.frombuffer(mask, np.int8, layout.masks[agent]).copy()
    return info


class RemoteEnv(AECEnv):
    """An AEC env mirroring one instance served by another process (module docstring).

    With `deferred`, `step` and `reset` only queue their request on the connection; the owner sends the round's
    steps (`Connection.flush`) and resets (`flush_resets`) at once, and `collect`s the replies before the env's
    state is read again."""

    def __init__(self, connection: Connection, instance: int = 0, *, deferred: bool = False,
                 owns: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.connection, self.instance, self.deferred = connection, instance, deferred
        self._owns = owns
        layout = self.layout = connection.layout
        self.metadata = {"name": connection.name, "render_modes": [], "is_parallelizable": False}
        self.render_mode = None
        self.possible_agents = list(layout.agents)
        self._names = self.possible_agents
        self.observation_spaces = dict(layout.observation_spaces)
        self.action_spaces = dict(layout.action_spaces)
        self.agents: list[str] = []
        self.rewards: dict[str, float] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.infos: dict[str, dict] = {}
        self.agent_selection: str | None = None
        self._order: tuple[int, ...] | None = None
        self._in_order = False
        self._identity = tuple(range(len(self._names)))
        self._obs_row: bytes | None = None
        self._obs_value: Any = None
        self._later: deque = deque()

    def observation_space(self, agent: str) -> Any:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self.action_spaces[agent]

    def forget(self) -> None:
        """Show nothing until the next reset (the instance is served afresh)."""
        self._order, self.agents, self.agent_selection, self.infos = None, [], None, {}
        self._later.clear()

    def apply_cycle(self, row: tuple, infos: list[dict]) -> None:
        raise RemoteProtocolError(f"{self.connection.label}: a cycle record of instance {self.instance}, which is on "
                                  f"the AEC protocol")

    def _apply(self, row: tuple, info: dict | None) -> None:
        """Show a snapshot: a record unpacked by `EnvLayout.snapshot_struct` (instance, flags, selection,
        n_agents, P agents, P rewards, P cumulative rewards, P terminations, P truncations, obs bytes, mask
        bytes), the last four by agent index."""
        flags, selection, n = row[1], row[2], row[3]
        names, p = self._names, len(self._names)
        order = row[4:4 + n]
        if order != self._order:
            self._order = order
            self._in_order = order == self._identity[:n]
            self.agents = [names[i] for i in order]
            old = self.infos
            self.infos = {a: old.get(a, {}) for a in self.agents}
        agents = self.agents
        r, c, t, u = 4 + p, 4 + 2 * p, 4 + 3 * p, 4 + 4 * p
        if self._in_order:  # agent k at index k: each field is a slice of the record
            self.rewards = dict(zip(agents, row[r:r + n]))
            self._cumulative_rewards = dict(zip(agents, row[c:c + n]))
            self.terminations = dict(zip(agents, row[t:t + n]))
            self.truncations = dict(zip(agents, row[u:u + n]))
        else:
            self.rewards = {a: row[r + i] for a, i in zip(agents, order)}
            self._cumulative_rewards = {a: row[c + i] for a, i in zip(agents, order)}
            self.terminations = {a: row[t + i] for a, i in zip(agents, order)}
            self.truncations = {a: row[u + i] for a, i in zip(agents, order)}
        agent = self.agent_selection = names[selection] if selection != NO_AGENT else None
        self._obs_value = None
        if flags & NO_OBS:
            self._obs_row = None
        elif agent is None:
            raise RemoteProtocolError(f"{self.connection.label}: a snapshot of instance {self.instance} carries an "
                                      f"observation but selects no agent")
        else:
            self._obs_row = row[-2]
            self.infos[agent] = (_info(self.layout, agent, flags, row[-1], info) if flags & (INFO_JSON | INFO_MASK)
                                 else {})

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._order, self.infos = None, {}
        self._later.clear()
        if self.deferred:
            self.connection.queue_reset(self.instance, seed, options)
        else:
            self.connection.reset_many([(self.instance, seed, options)])

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self._later:
            if action is not None:
                raise ValueError(f"agent {agent!r} is dead (terminated or truncated): the only valid action is None")
            self._apply(*self._later.popleft())
            return
        if action is None:
            flags, data = NONE_ACTION, b""
        elif agent is None:
            raise ValueError(f"{self}: step({action!r}) with no agent selected (reset first)")
        else:
            flags, data = 0, self.layout.actions[agent].encode(action)
        connection = self.connection
        connection.queue(self.instance, flags, data)
        if not self.deferred:
            ticket = connection.flush()
            assert ticket is not None, "a step was just queued"
            connection.collect(ticket)

    def observe(self, agent: str) -> Any:
        if agent == self.agent_selection and self._obs_row is not None:
            if self._obs_value is None:
                self._obs_value = self.layout.obs[agent].decode(self._obs_row)
            return self._obs_value
        observation, info = self.connection.observe_many([(self.instance, agent)])[0]
        if agent in self.infos:
            self.infos[agent] = info
        return observation

    def state(self) -> np.ndarray:
        raise NotImplementedError(f"{self.connection.label}: state() is not part of remote env protocol {VERSION}")

    def render(self) -> None:
        return None

    def close(self) -> None:
        if self._owns is not None:
            owns, self._owns = self._owns, None
            owns()

    def __str__(self) -> str:
        return f"RemoteEnv({self.connection.name!r} at {self.connection.address}, instance {self.instance})"


def connect(address: str, *, timeout_s: float = 60.0, instance: int = 0, instances: int | None = None) -> RemoteEnv:
    """An AEC env served at `address`: unix:///path, tcp://host:port, or cmd:TEMPLATE (one server launched
    for it, with `instances` as its {instances}, stopped by `close`). Its `close` also closes the connection."""
    connection, owns = open_connection(address, timeout_s=timeout_s, instances=instances)
    try:
        env = connection.env(instance)
    except BaseException:
        owns()
        raise
    env._owns = owns
    return env


def open_connection(address: str, *, timeout_s: float = 60.0,
                    instances: int | None = None) -> tuple[Connection, Callable[[], None]]:
    """A connection to the server at `address` (one launched for a cmd: template), and what closes it (and stops
    the server launched)."""
    if address.startswith("cmd:"):
        (server,) = launch(address, 1, timeout_s=timeout_s, instances=instances)
        try:
            connection = Connection(server.address, timeout_s, describe_end=server.describe_end, label=server.label)
        except BaseException:
            server.close()
            raise

        def owns() -> None:
            connection.close()
            server.close()
    else:
        connection = Connection(address, timeout_s)
        owns = connection.close
    return connection, owns
