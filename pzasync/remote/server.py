"""`serve(env_fn, address, instances=N)`: any PettingZoo AEC env served over the remote env protocol
(docs/remote.md) to any number of connections, each with up to N instances of its own.

One thread, one `selectors` loop: a connection's frames are answered in order, one batch at a time. After
every step (and reset) the server steps the dead agents whose turn it is with None, as PettingZoo's AEC loop
does, and sends one snapshot per step, so the client replays those turns without a round trip each.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import traceback
from typing import Any, Callable

import numpy as np

from pzasync.errors import RemoteProtocolError, RemoteSpaceError
from pzasync.logs import logger
from pzasync.remote.address import Address
from pzasync.remote.json_values import plain
from pzasync.remote.protocol import (HAS_OPTIONS, HAS_SEED, INFO_JSON, INFO_MASK, MAGIC, MASK_KEY, NO_AGENT, NO_OBS, NONE_ACTION,
                                     OBSERVE_RECORD, RESET_RECORD, VERSION, EnvLayout, Kind, error_frame, frame,
                                     info_tail, json_frame, parse_header, read_infos, records_frame,
                                     split_records)

#: Dead turns stepped with None in a row before the server calls the env broken (an env that never moves on).
MAX_DEAD_TURNS = 100_000
_SEND_TIMEOUT_S = 60.0


class _Refused(Exception):
    """A request the server answers with an ERROR frame; `close` also ends the connection."""

    def __init__(self, code: str, message: str, close: bool = False, **context: Any) -> None:
        super().__init__(message)
        self.code, self.close, self.context = code, close, context


class _Connection:
    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock, self.peer = sock, peer
        self.buffer = bytearray()
        self.greeted = False
        self.envs: dict[int, Any] = {}


class EnvServer:
    """The server behind `serve`; `run` answers until `stop` is called (or SIGTERM/SIGINT under `serve`)."""

    def __init__(self, env_fn: Callable[[], Any], address: str, instances: int = 16, name: str | None = None) -> None:
        if instances < 1:
            raise ValueError(f"instances must be >= 1, got {instances}")
        self.env_fn, self.max_instances = env_fn, instances
        probe = env_fn()
        self.spare: list[Any] = [probe]
        self.name = name or str(getattr(probe, "metadata", {}).get("name") or type(probe).__name__)
        agents = list(probe.possible_agents)
        self.layout = EnvLayout(agents, {a: probe.observation_space(a) for a in agents},
                                {a: probe.action_space(a) for a in agents})
        self.to_env = {a: _action_converter(probe.action_space(a)) for a in agents}
        self.welcome = json_frame(Kind.WELCOME, {"protocol": VERSION, "name": self.name,
                                                 "max_instances": instances, **self.layout.describe()},
                                  prefix=struct.pack("<H", VERSION))
        self.listener, self.address = Address.parse(address).listen()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.connections: list[_Connection] = []
        self.states: dict[int, _State] = {}  # per env (by id): where its state attributes are read
        self._stopping = False

    # ------------------------------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Answer connections until `stop`; then close everything (the Unix socket file included)."""
        try:
            while not self._stopping:
                for key, _ in self.selector.select(0.25):
                    if key.data is None:
                        self._accept()
                    else:
                        self._readable(key.data)
        finally:
            self.close()

    def stop(self) -> None:
        self._stopping = True

    def _accept(self) -> None:
        sock, peer = self.listener.accept()
        sock.setblocking(True)
        sock.settimeout(_SEND_TIMEOUT_S)
        if self.address.path is None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(sock, str(peer) or "unix peer")
        self.connections.append(conn)
        self.selector.register(sock, selectors.EVENT_READ, conn)

    def _readable(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buffer += data
        buffer = conn.buffer
        while len(buffer) >= 4:
            try:
                length = parse_header(bytes(buffer[:4]), f"client {conn.peer}")
            except RemoteProtocolError as exc:
                self._reply(conn, error_frame("malformed", str(exc)))
                self._drop(conn)
                return
            if len(buffer) < 4 + length:
                return
            body = memoryview(bytes(buffer[4:4 + length]))
            del buffer[:4 + length]
            try:
                reply = self._answer(conn, body[0], body[1:])
            except _Refused as exc:
                reply = error_frame(exc.code, str(exc), **exc.context)
                if exc.close:
                    self._reply(conn, reply)
                    self._drop(conn)
                    return
            if not self._reply(conn, reply):
                return

    def _reply(self, conn: _Connection, data: bytes) -> bool:
        try:
            conn.sock.sendall(data)
            return True
        except OSError:
            self._drop(conn)
            return False

    def _drop(self, conn: _Connection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)
            self.selector.unregister(conn.sock)
        conn.sock.close()
        self.spare.extend(conn.envs.values())
        conn.envs.clear()

    def close(self) -> None:
        for conn in list(self.connections):
            self._drop(conn)
        for env in self.spare:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self.spare.clear()
        self.selector.close()
        self.listener.close()
        if self.address.path is not None:
            try:
                os.unlink(self.address.path)
            except OSError:
                pass

    # ------------------------------------------------------------------------------------------ messages
    def _answer(self, conn: _Connection, kind: int, body: memoryview) -> bytes:
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
        source = f"client {conn.peer}"
        try:
            if kind == Kind.STEP:
                return self._step(conn, split_records(body, self.layout.step, source)[0])
            if kind == Kind.RESET:
                return self._reset(conn, *split_records(body, RESET_RECORD, source))
            if kind == Kind.OBSERVE:
                return self._observe(conn, split_records(body, OBSERVE_RECORD, source)[0])
            if kind == Kind.PING:
                return frame(Kind.PONG, body)
        except RemoteProtocolError as exc:
            raise _Refused("malformed", str(exc), close=True) from None
        raise _Refused("malformed", f"server {self.address}: unknown message kind {kind}", close=True)

    def _env(self, conn: _Connection, instance: int, create: bool) -> Any:
        env = conn.envs.get(instance)
        if env is None:
            if instance >= self.max_instances:
                raise _Refused("instance", f"server {self.address} serves instances 0..{self.max_instances - 1} per "
                               f"connection; instance {instance} was asked for", instance=instance)
            if not create:
                raise _Refused("instance", f"instance {instance} was stepped before it was reset (or after its env "
                               f"raised)", instance=instance)
            env = conn.envs[instance] = self.spare.pop() if self.spare else self.env_fn()
        return env

    def _failed(self, conn: _Connection, instance: int, env: Any, exc: Exception) -> _Refused:
        """An env's exception as an ERROR reply; its instance must be reset again."""
        conn.envs.pop(instance, None)
        code = "space" if isinstance(exc, RemoteSpaceError) else "env"
        return _Refused(code, f"{type(exc).__name__}: {exc}", instance=instance,
                        agent=getattr(env, "agent_selection", None), type=f"{type(exc).__module__}:{type(exc).__qualname__}",
                        traceback=traceback.format_exc())

    def _reset(self, conn: _Connection, records: np.ndarray, tail: memoryview) -> bytes:
        out = _Snapshots(self.layout, self.states)
        rows = records.tolist()
        options = iter(read_infos(tail, sum(1 for _, flags, _ in rows if flags & HAS_OPTIONS), f"client {conn.peer}"))
        for instance, flags, seed in rows:
            env = self._env(conn, instance, create=True)
            try:
                env.reset(seed=seed if flags & HAS_SEED else None,
                          options=next(options) if flags & HAS_OPTIONS else None)
                out.chain(env, instance)
            except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
                raise self._failed(conn, instance, env, exc) from None
        return out.frame()

    def _step(self, conn: _Connection, records: np.ndarray) -> bytes:
        out = _Snapshots(self.layout, self.states)
        codecs, to_env = self.layout.actions, self.to_env
        actions = records["action"]
        for k, (instance, flags) in enumerate(zip(records["instance"].tolist(), records["flags"].tolist())):
            env = self._env(conn, instance, create=False)
            try:
                if flags & NONE_ACTION:
                    action = None
                else:
                    agent = env.agent_selection
                    action = to_env[agent](codecs[agent].decode(actions[k]))
                env.step(action)
                out.chain(env, instance)
            except _Refused:
                raise
            except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
                raise self._failed(conn, instance, env, exc) from None
        return out.frame()

    def _observe(self, conn: _Connection, records: np.ndarray) -> bytes:
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
                rec["flags"] = _put_info(layout, agent, env.infos.get(agent), replies["mask"][k], infos)
            except Exception as exc:  # noqa: BLE001 - the client gets it with its instance
                raise self._failed(conn, instance, env, exc) from None
        return records_frame(Kind.OBSERVATION, replies, info_tail(infos))


_STATE = ("agents", "agent_selection", "rewards", "_cumulative_rewards", "terminations", "truncations", "infos")


class _State:
    """An AEC env's state attributes read where they live, past PettingZoo's forwarding wrappers (whose
    `__getattr__` costs about a microsecond per wrapper and name, several times per step). Each read first
    checks that no wrapper above the owner has set one of the names itself; if one has, it reads through the
    wrappers as before."""

    def __init__(self, env: Any) -> None:
        self.env, self.owner, self.skipped = env, env, []
        try:
            from pettingzoo.utils.wrappers import BaseWrapper
        except ImportError:  # pragma: no cover
            return
        obj = env
        while isinstance(obj, BaseWrapper) and "env" in vars(obj) and not any(n in vars(obj) for n in _STATE):
            if any(n in vars(k) for k in type(obj).__mro__ if k is not BaseWrapper and k.__module__.split(".")[0]
                   != "pettingzoo" for n in _STATE):
                break  # a wrapper class of the user's that defines one of the names: read through it
            self.skipped.append(vars(obj))
            obj = vars(obj)["env"]
        self.owner = obj

    def get(self) -> Any:
        """The object to read the state attributes from now."""
        for own in self.skipped:
            if not _NAMES.isdisjoint(own):
                return self.env
        return self.owner


_NAMES = frozenset(_STATE)


class _Snapshots:
    """The STATE reply being built: one snapshot per env step, each agent's state as the env shows it."""

    def __init__(self, layout: EnvLayout, states: dict[int, _State]) -> None:
        self.layout, self.states = layout, states
        self.rows: list[tuple] = []
        self.obs: list[Any] = []
        self.infos: list[dict] = []

    def chain(self, env: Any, instance: int) -> None:
        """Snapshot the env, then step each dead agent whose turn it is with None, snapshotting each step."""
        self.add(env, instance)
        for _ in range(MAX_DEAD_TURNS):
            agent = env.agent_selection
            if not env.agents or not (env.terminations.get(agent) or env.truncations.get(agent)):
                return
            env.step(None)
            self.add(env, instance)
        raise RuntimeError(f"{MAX_DEAD_TURNS} dead agents' turns in a row: the env never selects a live agent")

    def add(self, env: Any, instance: int) -> None:
        layout, index = self.layout, self.layout.index
        p = len(layout.agents)
        state = self.states.get(id(env))
        if state is None or state.env is not env:
            state = self.states[id(env)] = _State(env)
        owner = state.get()
        agents = owner.agents
        try:
            order = [index[a] for a in agents]
        except KeyError as exc:
            raise RemoteSpaceError(f"agent {exc.args[0]!r} is not among possible_agents {layout.agents}; the protocol "
                                   f"needs every agent declared up front") from None
        rewards, cumulative, terms, truncs = [0.0] * p, [0.0] * p, [0] * p, [0] * p
        env_rewards, env_cumulative = owner.rewards, owner._cumulative_rewards
        env_terms, env_truncs = owner.terminations, owner.truncations
        for agent, i in zip(agents, order):
            rewards[i] = env_rewards.get(agent, 0.0)
            cumulative[i] = env_cumulative.get(agent, 0.0)
            terms[i] = env_terms.get(agent, False)
            truncs[i] = env_truncs.get(agent, False)
        selected = owner.agent_selection
        flags = 0
        if selected in index and selected in agents:
            self.obs.append((selected, env.observe(selected), owner.infos.get(selected)))
        else:
            flags = NO_OBS
            self.obs.append(None)
        self.rows.append((instance, flags, index.get(selected, NO_AGENT), len(order), order + [0] * (p - len(order)),
                          rewards, cumulative, terms, truncs))

    def frame(self) -> bytes:
        layout = self.layout
        records = np.zeros(len(self.rows), layout.snapshot)
        if self.rows:
            columns = list(zip(*self.rows))
            for name, column in zip(("instance", "flags", "selection", "n_agents", "agents", "rewards", "cumulative",
                                     "terminations", "truncations"), columns):
                records[name] = column
        obs_bytes, masks, flags = records["obs"], records["mask"], records["flags"]
        for k, seen in enumerate(self.obs):
            if seen is not None:
                agent, observation, info = seen
                try:
                    layout.obs[agent].encode_into(observation, obs_bytes[k])
                    flags[k] |= _put_info(layout, agent, info, masks[k], self.infos)
                except RemoteSpaceError as exc:
                    raise _Refused("space", str(exc), instance=self.rows[k][0], agent=agent) from None
        return records_frame(Kind.STATE, records, info_tail(self.infos))


def _put_info(layout: EnvLayout, agent: str, info: Any, mask_out: np.ndarray, infos: list[dict]) -> int:
    """Put an agent's info in a record (its action mask in `mask_out`, the rest as JSON in `infos`); the flags."""
    if not info:
        return 0
    flags, rest = 0, info
    mask = info.get(MASK_KEY) if isinstance(info, dict) else None
    size = layout.masks[agent]
    if mask is not None and size:
        array = np.asarray(mask).reshape(-1)
        if array.size != size:
            raise RemoteSpaceError(f"agent {agent!r}: info action mask of {array.size} entries, but its action space "
                                   f"{layout.action_spaces[agent]!r} needs {size}")
        mask_out[:size] = array.astype(np.uint8)
        flags |= INFO_MASK
        rest = {k: v for k, v in info.items() if k != MASK_KEY}
    if rest:
        infos.append(plain(rest if isinstance(rest, dict) else {"info": rest}, f"agent {agent!r}: info"))
        flags |= INFO_JSON
    return flags


def _action_converter(space: Any) -> Callable[[Any], Any]:
    """A decoded action as `env.step` takes it in process: a Python int for Discrete."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return int
    return lambda value: value


def serve(env_fn: Callable[[], Any], address: str, instances: int = 16, *, name: str | None = None) -> None:
    """Serve the AEC env `env_fn()` builds at `address` (unix:///path or tcp://host:port; port 0 picks one),
    up to `instances` instances per connection, until SIGTERM or SIGINT. Logs one line naming the address
    (`pzasync: remote: serving NAME at ADDRESS ...` on stderr by default)."""
    server = EnvServer(env_fn, address, instances, name)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda *_: server.stop())
    try:
        logger.info(f"remote: serving {server.name} at {server.address} (up to {instances} instances per "
                    f"connection)")
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
