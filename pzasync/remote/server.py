"""`serve(env_fn, address, instances=N)`: any PettingZoo AEC env served over the remote env protocol
(docs/remote.md) to any number of connections, each with up to N instances of its own.

One thread, one `selectors` loop: a connection's frames are answered in order, one batch at a time. After
every step (and reset) the server steps the dead agents whose turn it is with None, as PettingZoo's AEC loop
does, and sends one snapshot per step, so the client replays those turns without a round trip each.

An env that is simultaneous-move underneath (`env_fn` makes a `ParallelEnv`, or an AEC env made by
`parallel_to_aec`; or a `parallel_fn` is given) is also served through its parallel API (docs/remote.md, "The
parallel API"): the WELCOME says `"parallel": true`, and an instance reset with PARALLEL_RESET is a parallel env
stepped a whole cycle at a time (PARALLEL_STEP, answered by CYCLE).

With `workers=N` the server sets its own pace (docs/remote.md, "Replies at the server's pace"): each
instance's step and reset runs on one of N threads (step_pool.py), and the loop answers with one STATE per
connection of whatever instances have finished, so a slow instance holds up only itself. `pace(instance)`
(seconds slept on the worker before each step of that instance) stands in for an env whose steps take their
own time, for tests and benchmarks.
"""

from __future__ import annotations

import functools
import os
import selectors
import signal
import socket
import struct
import time
import traceback
from typing import Any, Callable

import numpy as np
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from pzasync.errors import RemoteProtocolError, RemoteSpaceError
from pzasync.logs import logger
from pzasync.remote.address import Address
from pzasync.remote.parallel import as_parallel
from pzasync.remote.protocol import (
    ACTS,
    HAS_OPTIONS,
    HAS_SEED,
    MAGIC,
    NONE_ACTION,
    OBSERVE_RECORD,
    RESET_RECORD,
    VERSION,
    EnvLayout,
    Kind,
    SpaceCodec,
    error_frame,
    frame,
    info_tail,
    json_frame,
    read_infos,
    records_frame,
    split_records,
    unpack_records,
)
from pzasync.remote.snapshots import Cycles, EnvStates, Snapshots, UnfitValue, info_parts
from pzasync.remote.step_pool import StepPool
from pzasync.remote.stream import FrameStream

_SEND_TIMEOUT_S = 60.0
_I64 = struct.Struct("<q")


class _Refused(Exception):
    """A request the server answers with an ERROR frame; `close` also ends the connection."""

    def __init__(self, code: str, message: str, close: bool = False, **context: Any) -> None:
        super().__init__(message)
        self.code, self.close, self.context = code, close, context


class Session:
    """One client's instances on a server and its handshake: what `EnvServer.answer` answers frames for. A
    connection of the server's own has one, with its socket's `FrameStream`; another transport makes its own
    with `EnvServer.session`."""

    def __init__(self, peer: str, sock: socket.socket | None = None) -> None:
        self.sock, self.peer = sock, peer
        self.stream = FrameStream(sock, f"client {peer}") if sock is not None else None
        self.greeted = False
        #: Instance -> its env: an AEC env (`envs`, reset by RESET) or a parallel env (`cycles`, by PARALLEL_RESET).
        self.envs: dict[int, Any] = {}
        self.cycles: dict[int, Any] = {}
        #: Paced: instances being stepped or reset on a worker thread; whether the session still runs.
        self.busy: set[int] = set()
        self.open = True


class EnvServer:
    """The server behind `serve`; `run` answers until `stop` is called (or SIGTERM/SIGINT under `serve`).

    With `address` None it listens nowhere: another transport hands it frames (`session`, `answer`, `end`).
    With `workers` >= 1 it is paced (module docstring): instances are stepped on that many threads and answered
    as they finish; `pace(instance)`, if given, is slept on the worker before each step of `instance`.
    `parallel_fn` makes the env's parallel form, for an env that `env_fn` makes as an AEC env of another kind
    (PettingZoo's `parallel_env()` beside `env()`): its agents and spaces must be the AEC env's."""

    def __init__(self, env_fn: Callable[[], Any], address: str | None, instances: int = 16,
                 name: str | None = None, *, workers: int = 0, pace: Callable[[int], float] | None = None,
                 parallel_fn: Callable[[], Any] | None = None) -> None:
        if instances < 1:
            raise ValueError(f"instances must be >= 1, got {instances}")
        if workers < 0 or (pace is not None and workers < 1):
            raise ValueError(f"workers must be >= 0, and >= 1 with a pace (its steps run on the workers); got "
                             f"workers={workers}")
        if workers and address is None:
            raise ValueError("a paced server (workers >= 1) sends its replies itself: give it an address")
        probe = env_fn()
        if isinstance(probe, ParallelEnv):  # served through both APIs: the AEC one by parallel_to_aec
            make_parallel = env_fn
            parallel_fn = parallel_fn or make_parallel
            env_fn, probe = (lambda: parallel_to_aec(make_parallel())), parallel_to_aec(probe)
        elif parallel_fn is None and as_parallel(probe) is not None:
            make_aec = env_fn
            parallel_fn = lambda: as_parallel(make_aec())  # noqa: E731
        self.env_fn, self.parallel_fn, self.max_instances = env_fn, parallel_fn, instances
        self.spare: list[Any] = [probe]
        #: Parallel envs not in use (instances reset through the parallel API take them).
        self.spare_parallel: list[Any] = []
        self.name = name or str(getattr(probe, "metadata", {}).get("name") or type(probe).__name__)
        agents = list(probe.possible_agents)
        self.layout = EnvLayout(agents, {a: probe.observation_space(a) for a in agents},
                                {a: probe.action_space(a) for a in agents})
        self.to_env = {a: _action_decoder(probe.action_space(a), self.layout.actions[a]) for a in agents}
        if parallel_fn is not None:
            self.spare_parallel.append(self._parallel_probe(parallel_fn, probe))
        self.pace = pace
        parallel = {"parallel": True, "parallel_layout": self.layout.parallel_sizes()} if parallel_fn else {}
        self.welcome = json_frame(Kind.WELCOME, {"protocol": VERSION, "name": self.name,
                                                 "max_instances": instances, **self.layout.describe(),
                                                 **({"paced": True} if workers else {}), **parallel},
                                  prefix=struct.pack("<H", VERSION))
        self.listener: socket.socket | None = None
        self.address: Address | str = f"of {self.name}"
        self.selector = selectors.DefaultSelector()
        if address is not None:
            self.listener, self.address = Address.parse(address).listen()
            self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.connections: list[Session] = []
        self.states = EnvStates()  # where each env's state attributes are read
        self._stopping = False
        self.pool: StepPool | None = None
        if workers:
            self.pool = StepPool(workers)
            self.selector.register(self.pool.wake, selectors.EVENT_READ, self.pool)

    def _parallel_probe(self, parallel_fn: Callable[[], Any], probe: Any) -> Any:
        """A parallel env of `parallel_fn`, checked to have the AEC env's agents and spaces."""
        env = parallel_fn()
        agents = list(self.layout.agents)
        differ = [a for a in agents if env.observation_space(a) != probe.observation_space(a)
                  or env.action_space(a) != probe.action_space(a)] if list(env.possible_agents) == agents else agents
        if differ:
            env.close()
            raise ValueError(f"env {self.name!r}: its parallel form disagrees with its AEC form on the agents or the "
                             f"spaces of {differ}: the parallel API must serve the same agents and spaces")
        return env

    # ------------------------------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Answer connections until `stop`; then close everything (the Unix socket file included)."""
        if self.listener is None:
            raise ValueError("this EnvServer listens nowhere (address None): hand it frames with `answer`")
        try:
            while not self._stopping:
                for key, _ in self.selector.select(0.25):
                    if key.data is None:
                        self._accept()
                    elif self.pool is not None and key.data is self.pool:
                        self._finished(self.pool)
                    else:
                        self._readable(key.data)
        finally:
            self.close()

    def stop(self) -> None:
        self._stopping = True

    def _unix_path(self) -> str | None:
        """The Unix socket file this server listens on; None for TCP, or where it listens nowhere."""
        return self.address.path if isinstance(self.address, Address) else None

    def _accept(self) -> None:
        listener = self.listener
        assert listener is not None, "run() listens before it accepts"
        sock, peer = listener.accept()
        if self._unix_path() is None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Session(str(peer) or "unix peer", sock)
        self.connections.append(conn)
        self.selector.register(sock, selectors.EVENT_READ, conn)

    def _readable(self, conn: Session) -> None:
        """Answer every complete frame that has arrived on `conn`, in order."""
        stream = conn.stream
        assert stream is not None, "a connection of the server's own (`_accept`) has a stream"
        try:
            if not stream.fill():
                return
        except (EOFError, OSError):
            self._drop(conn)
            return
        while True:
            try:
                found = stream.next_frame()
            except RemoteProtocolError as exc:
                self._reply(conn, error_frame("malformed", str(exc)))
                self._drop(conn)
                return
            if found is None:
                return
            reply, close = self.answer(conn, *found)
            if reply is not None and not self._reply(conn, reply):
                return
            if close:
                self._drop(conn)
                return

    def _reply(self, conn: Session, data: bytes) -> bool:
        stream = conn.stream
        assert stream is not None, "a connection of the server's own (`_accept`) has a stream"
        try:
            stream.send(data, time.monotonic() + _SEND_TIMEOUT_S)
            return True
        except OSError:  # TimeoutError included: a client that stopped reading
            self._drop(conn)
            return False

    def _drop(self, conn: Session) -> None:
        if conn in self.connections:
            sock = conn.sock
            assert sock is not None, "a connection of the server's own (`_accept`) has a socket"
            self.connections.remove(conn)
            self.selector.unregister(sock)
            sock.close()
        self.end(conn)

    def session(self, peer: str) -> Session:
        """A session for a client reached by another transport (named `peer` in errors); `end` it when done."""
        return Session(peer)

    def end(self, session: Session) -> None:
        """Take back a session's envs (for later sessions; those on a worker thread once they are back)."""
        session.open = False
        self.spare.extend(env for instance, env in session.envs.items() if instance not in session.busy)
        self.spare_parallel.extend(env for instance, env in session.cycles.items() if instance not in session.busy)
        session.envs = {i: env for i, env in session.envs.items() if i in session.busy}
        session.cycles = {i: env for i, env in session.cycles.items() if i in session.busy}

    def close(self) -> None:
        for conn in list(self.connections):
            self._drop(conn)
        if self.pool is not None:
            self.pool.close()
        for env in self.spare + self.spare_parallel:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self.spare.clear()
        self.spare_parallel.clear()
        self.selector.close()
        if self.listener is None:
            return
        self.listener.close()
        path = self._unix_path()
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    # ------------------------------------------------------------------------------------------ messages
    def answer(self, session: Session, kind: int, body: memoryview) -> tuple[bytes | None, bool]:
        """The reply frame to a `session`'s frame (`kind`, `body`: what follows the kind byte), an ERROR frame
        where it is refused; and whether the session must end (a frame that breaks the protocol). A paced
        server answers a STEP or RESET later (None now): its instances go to the worker threads."""
        try:
            return self._answer(session, kind, body), False
        except _Refused as exc:
            return error_frame(exc.code, str(exc), **exc.context), exc.close

    def _answer(self, conn: Session, kind: int, body: memoryview) -> bytes | None:
        if not conn.greeted:
            if kind != Kind.HELLO or len(body) < 6 or bytes(body[:4]) != MAGIC:
                raise _Refused("malformed", f"server {self.address}: the first frame must be HELLO ({MAGIC!r}, "
                               f"u16 version); got kind {kind} of {len(body)} bytes", close=True)
            (version,) = struct.unpack_from("<H", body, 4)
            if version != VERSION:
                raise _Refused("version", f"server {self.address} speaks protocol version {VERSION}, the client "
                               f"{version}", close=True, server_version=VERSION)
            conn.greeted = True
            return self.welcome
        source, pool = f"client {conn.peer}", self.pool
        try:
            if kind == Kind.STEP:
                steps = unpack_records(body, self.layout.step_struct, source)[0]
                if pool is None:
                    return self._step(conn, steps)
                self._dispatch_steps(pool, conn, steps)
                return None
            if kind == Kind.RESET:
                resets, tail = split_records(body, RESET_RECORD, source)
                if pool is None:
                    return self._reset(conn, resets, tail)
                self._dispatch_resets(pool, conn, resets, tail)
                return None
            if kind == Kind.PARALLEL_STEP or kind == Kind.PARALLEL_RESET:
                return self._parallel_request(conn, kind, body, source)
            if kind == Kind.OBSERVE:
                return self._observe(conn, split_records(body, OBSERVE_RECORD, source)[0])
            if kind == Kind.PING:
                return frame(Kind.PONG, body)
        except RemoteProtocolError as exc:
            raise _Refused("malformed", str(exc), close=True) from None
        raise _Refused("malformed", f"server {self.address}: unknown message kind {kind}", close=True)

    def _parallel_request(self, conn: Session, kind: int, body: memoryview, source: str) -> bytes | None:
        """A PARALLEL_STEP or PARALLEL_RESET: the CYCLE reply (None on a paced server: it follows)."""
        if self.parallel_fn is None:
            raise _Refused("malformed", f"server {self.address} does not offer the parallel API (its WELCOME did not "
                           f"say \"parallel\": true); message kind {kind} is not served", close=True)
        pool = self.pool
        if kind == Kind.PARALLEL_STEP:
            steps = unpack_records(body, self.layout.parallel_step_struct, source)[0]
            if pool is None:
                return self._step(conn, steps, parallel=True)
            self._dispatch_steps(pool, conn, steps, parallel=True)
            return None
        resets, tail = split_records(body, RESET_RECORD, source)
        if pool is None:
            return self._reset(conn, resets, tail, parallel=True)
        self._dispatch_resets(pool, conn, resets, tail, parallel=True)
        return None

    def _env(self, conn: Session, instance: int, create: bool, parallel: bool = False) -> Any:
        """The env of `instance` (made, with `create`, by a reset: a parallel env for the parallel API's)."""
        if instance in conn.busy:
            raise _Refused("instance", f"instance {instance} is named while a request naming it is not answered "
                           f"yet", instance=instance)
        mine, other = (conn.cycles, conn.envs) if parallel else (conn.envs, conn.cycles)
        env = mine.get(instance)
        if env is None:
            if instance >= self.max_instances:
                raise _Refused("instance", f"server {self.address} serves instances 0..{self.max_instances - 1} per "
                               f"connection; instance {instance} was asked for", instance=instance)
            if not create:
                api = ("it was reset through the AEC protocol (RESET), not the parallel API" if parallel else
                       "it was reset through the parallel API (PARALLEL_RESET): step it with PARALLEL_STEP")
                raise _Refused("instance", f"instance {instance} was stepped before it was reset (or after its env "
                               f"raised)" + (f"; {api}" if instance in other else ""), instance=instance)
            if instance in other:  # reset through the other API: its env goes back
                (self.spare if parallel else self.spare_parallel).append(other.pop(instance))
            spare = self.spare_parallel if parallel else self.spare
            make = self.parallel_fn if parallel else self.env_fn
            assert make is not None, "the parallel API is asked for only where the server offers it"
            env = mine[instance] = spare.pop() if spare else make()
        return env

    def _failed(self, conn: Session, instance: int, env: Any, exc: Exception) -> _Refused:
        """An env's exception as an ERROR reply; its instance must be reset again."""
        conn.envs.pop(instance, None)
        conn.cycles.pop(instance, None)
        return _env_error(instance, env, exc)

    def _reset(self, conn: Session, records: np.ndarray, tail: memoryview, parallel: bool = False) -> bytes:
        """Reset each (instance, flags, seed) record's env; the STATE reply (CYCLE, `parallel`)."""
        out = Cycles(self.layout) if parallel else Snapshots(self.layout, self.states)
        for instance, seed, options in self._resets_of(conn, records, tail):
            env = self._env(conn, instance, create=True, parallel=parallel)
            try:
                self._reset_one(out, instance, env, seed, options)
            except UnfitValue as exc:
                raise _Refused("space", str(exc), instance=exc.instance, agent=exc.agent) from None
            except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
                raise self._failed(conn, instance, env, exc) from None
        return out.frame()

    def _resets_of(self, conn: Session, records: np.ndarray, tail: memoryview) -> list[tuple[int, Any, Any]]:
        """(instance, seed, options) of each reset record, its options read from the tail."""
        rows = records.tolist()
        options = iter(read_infos(tail, sum(1 for _, flags, _ in rows if flags & HAS_OPTIONS), f"client {conn.peer}"))
        return [(instance, seed if flags & HAS_SEED else None, next(options) if flags & HAS_OPTIONS else None)
                for instance, flags, seed in rows]

    def _step(self, conn: Session, records: list[tuple], parallel: bool = False) -> bytes:
        """Step each record's env (a step record: instance, flags, action bytes; a parallel step record, with
        `parallel`); the STATE reply (CYCLE)."""
        out = Cycles(self.layout) if parallel else Snapshots(self.layout, self.states)
        for record in records:
            instance = record[0]
            env = self._env(conn, instance, create=False, parallel=parallel)
            try:
                self._step_one(out, instance, env, record)
            except UnfitValue as exc:
                raise _Refused("space", str(exc), instance=exc.instance, agent=exc.agent) from None
            except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
                raise self._failed(conn, instance, env, exc) from None
        return out.frame()

    def _reset_one(self, out: Snapshots | Cycles, instance: int, env: Any, seed: int | None,
                   options: dict | None) -> None:
        """Reset one instance's env and add what the client sees after it to `out`."""
        if isinstance(out, Cycles):
            observations, infos = env.reset(seed=seed, options=options)
            out.add(instance, list(env.agents), observations, infos)
        else:
            env.reset(seed=seed, options=options)
            out.chain(env, instance)

    def _step_one(self, out: Snapshots | Cycles, instance: int, env: Any, record: tuple) -> None:
        """Step one instance's env with its record and add what the client sees after it to `out`: the snapshots
        of the step and of the dead agents' turns after it, or (a parallel step record) the cycle's results."""
        if isinstance(out, Cycles):
            p, agents = len(self.layout.agents), self.layout.agents
            actions = {agents[i]: self.to_env[agents[i]](data)
                       for i, (acts, data) in enumerate(zip(record[1:1 + p], record[1 + p:])) if acts & ACTS}
            observations, rewards, terminations, truncations, infos = env.step(actions)
            out.add(instance, list(env.agents), observations, infos, rewards, terminations, truncations)
        else:
            _, flags, data = record
            env.step(None if flags & NONE_ACTION else self.to_env[self.states.owner(env).agent_selection](data))
            out.chain(env, instance)

    def _observe(self, conn: Session, records: np.ndarray) -> bytes:
        layout = self.layout
        replies = np.zeros(len(records), layout.observation)
        infos: list[dict] = []
        for k, (instance, agent_index) in enumerate(records.tolist()):
            env = self._env(conn, instance, create=False)
            if agent_index >= len(layout.agents):
                raise _Refused("malformed", f"OBSERVE names agent {agent_index}; the env has {len(layout.agents)}",
                               close=True)
            agent = layout.agents[agent_index]
            try:
                observation = env.observe(agent)
                rec = replies[k]
                rec["instance"], rec["agent"] = instance, agent_index
                layout.obs[agent].encode_into(observation, replies["obs"][k])
                rec["flags"], mask = info_parts(layout, agent, env.infos.get(agent), infos)
                replies["mask"][k][:len(mask)] = np.frombuffer(mask, np.uint8)
            except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
                raise self._failed(conn, instance, env, exc) from None
        return records_frame(Kind.OBSERVATION, replies, info_tail(infos))

    # ------------------------------------------------------------------------------------------ paced
    def _dispatch_steps(self, pool: StepPool, conn: Session, records: list[tuple], parallel: bool = False) -> None:
        """Hand each record's step to a worker thread (all checked first); its reply follows when it is done."""
        jobs, seen = [], set()
        for record in records:
            instance = record[0]
            if instance in seen:
                raise _Refused("instance", f"a STEP names instance {instance} twice", instance=instance)
            seen.add(instance)
            jobs.append((instance, self._env(conn, instance, create=False, parallel=parallel), record))
        for instance, env, record in jobs:
            conn.busy.add(instance)
            pool.submit(functools.partial(self._job, conn, instance, env, parallel, functools.partial(
                self._paced_step, instance, env, record)))

    def _dispatch_resets(self, pool: StepPool, conn: Session, records: np.ndarray, tail: memoryview,
                         parallel: bool = False) -> None:
        """Hand each record's reset to a worker thread (all checked first); its reply follows when it is done."""
        jobs, seen = [], set()
        for instance, seed, options in self._resets_of(conn, records, tail):
            if instance in seen:
                raise _Refused("instance", f"a RESET names instance {instance} twice", instance=instance)
            seen.add(instance)
            jobs.append((instance, self._env(conn, instance, create=True, parallel=parallel), seed, options))
        for instance, env, seed, options in jobs:
            conn.busy.add(instance)
            pool.submit(functools.partial(self._job, conn, instance, env, parallel, functools.partial(
                self._reset_one, instance=instance, env=env, seed=seed, options=options)))

    def _paced_step(self, instance: int, env: Any, record: tuple, out: Snapshots | Cycles) -> None:
        """On a worker thread: sleep the instance's pace, then step it."""
        if self.pace is not None:
            delay = self.pace(instance)
            if delay > 0:
                time.sleep(delay)
        self._step_one(out, instance, env, record)

    def _job(self, conn: Session, instance: int, env: Any, parallel: bool,
             work: Callable[[Snapshots | Cycles], None]) -> tuple[Any, ...]:
        """On a worker thread: one instance's step or reset (`work`, adding to the reply it is given), as what
        `_finished` takes back: (conn, instance, env, parallel, the reply's part or what refused it, whether the
        env raised)."""
        out = Cycles(self.layout) if parallel else Snapshots(self.layout, self.states)
        try:
            work(out)
        except UnfitValue as exc:
            return conn, instance, env, parallel, _Refused("space", str(exc), instance=exc.instance,
                                                           agent=exc.agent), False
        except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
            return conn, instance, env, parallel, _env_error(instance, env, exc), True
        return conn, instance, env, parallel, out, False

    def _finished(self, pool: StepPool) -> None:
        """Send what the worker threads finished: per connection one STATE of the instances done (and one CYCLE
        of those on the parallel API), then an ERROR for each that failed."""
        replies: dict[Session, tuple[Snapshots, Cycles, list[bytes]]] = {}
        for conn, instance, env, parallel, outcome, raised in pool.finished():
            conn.busy.discard(instance)
            mine = conn.cycles if parallel else conn.envs
            if not conn.open:  # the client left meanwhile: its env serves later sessions
                mine.pop(instance, None)
                if not raised:
                    (self.spare_parallel if parallel else self.spare).append(env)
                continue
            states, cycles, errors = replies.setdefault(conn, (Snapshots(self.layout, self.states),
                                                               Cycles(self.layout), []))
            if isinstance(outcome, _Refused):
                if raised:
                    mine.pop(instance, None)  # it must be reset again
                errors.append(error_frame(outcome.code, str(outcome), **outcome.context))
            else:
                into = cycles if parallel else states
                into.records.extend(outcome.records)
                into.infos.extend(outcome.infos)
        for conn, (states, cycles, errors) in replies.items():
            data = b"".join([part.frame() for part in (states, cycles) if part.records] + errors)
            if conn.open and data:
                self._reply(conn, data)


def _env_error(instance: int, env: Any, exc: Exception) -> _Refused:
    """An env's exception (being handled) as an ERROR reply naming the instance, the agent and the type."""
    code = "space" if isinstance(exc, RemoteSpaceError) else "env"
    return _Refused(code, f"{type(exc).__name__}: {exc}", instance=instance,
                    agent=getattr(env, "agent_selection", None),
                    type=f"{type(exc).__module__}:{type(exc).__qualname__}",
                    traceback=traceback.format_exc())


def _action_decoder(space: Any, codec: SpaceCodec) -> Callable[[bytes], Any]:
    """A step record's action bytes as `env.step` takes the action in process: a Python int for Discrete."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return lambda data: _I64.unpack_from(data)[0]
    return codec.decode


def serve(env_fn: Callable[[], Any], address: str, instances: int = 16, *, name: str | None = None,
          workers: int = 0, pace: Callable[[int], float] | None = None,
          parallel_fn: Callable[[], Any] | None = None) -> None:
    """Serve the env `env_fn()` builds (AEC, or parallel) at `address` (unix:///path or tcp://host:port; port 0
    picks one), up to `instances` instances per connection, until SIGTERM or SIGINT. Logs one line naming the
    address (`pzasync: remote: serving NAME at ADDRESS ...` on stderr by default). `workers` >= 1: paced, each
    instance stepped on one of that many threads and answered when it is done; `pace(instance)`: seconds
    slept there before each of its steps; `parallel_fn`: the env's parallel form, served through the parallel
    API (`EnvServer`)."""
    server = EnvServer(env_fn, address, instances, name, workers=workers, pace=pace, parallel_fn=parallel_fn)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda *_: server.stop())
    try:
        paced = f"; paced, {workers} worker threads" if workers else ""
        parallel = "; parallel API offered" if server.parallel_fn is not None else ""
        logger.info(f"remote: serving {server.name} at {server.address} (up to {instances} instances per "
                    f"connection{paced}{parallel})")
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
