"""The remote env protocol, version 1 (docs/remote.md): frames, message kinds, spaces as JSON, and the fixed
byte layouts of observations, masks, actions and replies.

Every frame is `u32 length` (little-endian, the bytes that follow) then `u8 kind` then the body. Whatever is
on the hot path (reset, step, state) is an array of fixed-size records whose layout both sides derive from the
env's spaces, decoded with one `np.frombuffer`; JSON only in the handshake, errors and optional infos.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
from gymnasium import spaces

from pzasync.errors import RemoteProtocolError, RemoteSpaceError

VERSION = 1
MAGIC = b"PZAS"
#: The largest frame either side accepts: anything longer is malformed (a stray writer, a wrong protocol).
MAX_FRAME = 1 << 28
MASK_KEY = "action_mask"
NO_AGENT = 0xFFFF


class Kind(IntEnum):
    """Message kinds: the byte after a frame's length."""

    HELLO = 1        # client -> server: MAGIC, u16 version
    WELCOME = 2      # server -> client: u16 version, JSON env description
    RESET = 3        # client -> server: u32 count, RESET_RECORD * count, options tail
    STEP = 4         # client -> server: u32 count, step records
    STATE = 5        # server -> client (answers RESET and STEP): u32 count, snapshot records, info tail
    OBSERVE = 6      # client -> server: u32 count, OBSERVE_RECORD * count
    OBSERVATION = 7  # server -> client (answers OBSERVE): u32 count, observation records, info tail
    PING = 8         # client -> server: u64 token
    PONG = 9         # server -> client: the same u64 token
    ERROR = 10       # server -> client, in place of a reply: JSON {"code", "message", ...}
    # The parallel API (a server whose WELCOME says "parallel": true): a whole cycle of an instance at a time.
    PARALLEL_RESET = 11  # client -> server: as RESET; answered by CYCLE
    PARALLEL_STEP = 12   # client -> server: u32 count, parallel step records
    CYCLE = 13           # server -> client (answers both): u32 count, cycle records, info tail


# Snapshot flags (u16).
INFO_JSON = 1   # the info (less its action mask) follows in the tail
INFO_MASK = 2   # the info carries an action mask, in the record's mask bytes
NO_OBS = 4      # the selected agent is not among `agents`: no observation was taken
# Reset and step record flags (u8).
HAS_SEED = 1
HAS_OPTIONS = 2  # the reset's options follow, as JSON, in the tail
NONE_ACTION = 1
# Cycle record flags: one u8 per possible agent, saying which of the step's (or reset's) dicts name the agent.
CYCLE_OBS = 1           # observations (the bytes are in the agent's observation field)
CYCLE_REWARD = 2        # rewards
CYCLE_TERMINATION = 4   # terminations
CYCLE_TRUNCATION = 8    # truncations
CYCLE_INFO = 16         # infos
CYCLE_INFO_JSON = 32    # the info (less its action mask) follows in the tail
CYCLE_INFO_MASK = 64    # the info carries an action mask, in the agent's mask field
# Parallel step record: one u8 per possible agent.
ACTS = 1                # the agent acts: its action is in its action field

RESET_RECORD = np.dtype([("instance", "<u4"), ("flags", "u1"), ("seed", "<i8")])
OBSERVE_RECORD = np.dtype([("instance", "<u4"), ("agent", "<u2")])
_HEADER = struct.Struct("<IB")
_COUNT = struct.Struct("<I")
_I64 = struct.Struct("<q")
_I8_DTYPE = np.dtype("<i8")


# ---------------------------------------------------------------------------------------------- frames
def frame(kind: int, body: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame: length, kind, body."""
    return _HEADER.pack(len(body) + 1, kind) + bytes(body)


def records_frame(kind: int, records: np.ndarray, tail: bytes = b"") -> bytes:
    """A frame whose body is a record count, the records and a tail."""
    body = records.tobytes()
    return _HEADER.pack(_COUNT.size + len(body) + len(tail) + 1, kind) + _COUNT.pack(len(records)) + body + tail


def json_frame(kind: int, value: Any, prefix: bytes = b"") -> bytes:
    return frame(kind, prefix + json.dumps(value, default=_json_default).encode())


def error_frame(code: str, message: str, **context: Any) -> bytes:
    """An ERROR frame: `code` names the kind of failure, `message` says it in words."""
    return json_frame(Kind.ERROR, {"code": code, "message": message, **context})


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return repr(value)


def parse_header(head: bytes | bytearray, source: str) -> int:
    """The body length (kind included) a frame header announces, checked."""
    (length,) = struct.unpack("<I", head)
    if not 1 <= length <= MAX_FRAME:
        raise RemoteProtocolError(f"{source}: malformed frame (announced length {length}, at most {MAX_FRAME}); "
                                  f"is this a pzasync remote env endpoint speaking protocol {VERSION}?")
    return length


def recv_exact(sock: socket.socket, n: int, deadline: float | None, source: str) -> bytearray:
    """Exactly `n` bytes from `sock`, before `deadline` (time.monotonic); EOFError when the peer closes."""
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{source}: no complete reply before the deadline")
            sock.settimeout(left)
        try:
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout:
            raise TimeoutError(f"{source}: no complete reply before the deadline") from None
        if k == 0:
            raise EOFError(f"{source}: connection closed")
        got += k
    return out


def read_frame(sock: socket.socket, deadline: float | None, source: str) -> tuple[int, memoryview]:
    """The next frame from a blocking socket: (kind, body)."""
    length = parse_header(bytes(recv_exact(sock, 4, deadline, source)), source)
    data = recv_exact(sock, length, deadline, source)
    return data[0], memoryview(data)[1:]


def _records_end(body: memoryview, size: int, source: str) -> tuple[int, int]:
    """(the record count, where the records end) of a body that starts with a count of `size`-byte records;
    RemoteProtocolError where the body is too short for them."""
    if len(body) < 4:
        raise RemoteProtocolError(f"{source}: malformed frame: {len(body)} bytes, too short for a record count")
    (count,) = _COUNT.unpack_from(body)
    end = 4 + count * size
    if end > len(body):
        raise RemoteProtocolError(
            f"{source}: malformed frame: {count} records of {size} bytes need {end - 4} bytes, the frame "
            f"has {len(body) - 4}; do both sides derive the same layouts from the spaces (docs/remote.md)?")
    return count, end


def split_records(body: memoryview, dtype: np.dtype, source: str) -> tuple[np.ndarray, memoryview]:
    """(the records, the tail after them) of a body that starts with a count."""
    count, end = _records_end(body, dtype.itemsize, source)
    return np.frombuffer(body, dtype, count, 4), body[end:]


def unpack_records(body: memoryview, record: struct.Struct, source: str) -> tuple[list[tuple], memoryview]:
    """(the records as tuples, the tail after them) of a body that starts with a count: `split_records` with a
    `struct` format, one C call for the whole array."""
    count, end = _records_end(body, record.size, source)
    return list(record.iter_unpack(body[4:end])) if count else [], body[end:]


def packed_frame(kind: int, records: list[bytes], tail: bytes = b"") -> bytes:
    """A frame whose body is a record count, the records (each already packed) and a tail: one join."""
    size = sum(map(len, records))
    return b"".join((_HEADER.pack(_COUNT.size + size + len(tail) + 1, kind), _COUNT.pack(len(records)), *records,
                     tail))


def read_infos(tail: memoryview, wanted: int, source: str) -> list[dict]:
    """The `wanted` JSON infos of a tail (each u32 length, then UTF-8 JSON)."""
    infos, at = [], 0
    for _ in range(wanted):
        if at + 4 > len(tail):
            raise RemoteProtocolError(f"{source}: malformed frame: the info tail ends early")
        (n,) = _COUNT.unpack_from(tail, at)
        if at + 4 + n > len(tail):
            raise RemoteProtocolError(f"{source}: malformed frame: an info of {n} bytes runs past the frame")
        try:
            infos.append(json.loads(bytes(tail[at + 4:at + 4 + n])))
        except ValueError as exc:
            raise RemoteProtocolError(f"{source}: malformed info JSON: {exc}") from None
        at += 4 + n
    if at != len(tail):
        raise RemoteProtocolError(f"{source}: malformed frame: {len(tail) - at} stray bytes after the infos")
    return infos


def info_tail(infos: list[dict]) -> bytes:
    """A tail of JSON values, each already plain (json_values.py)."""
    parts = []
    for info in infos:
        data = json.dumps(info).encode()
        parts.append(_COUNT.pack(len(data)) + data)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------- spaces as JSON
def _bound(values: np.ndarray) -> Any:
    """A Box bound as JSON: one number when all agree, else a flat list; infinities as "inf"/"-inf"."""
    flat = [float(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf") for v in np.asarray(values, float).ravel()]
    return flat[0] if flat and all(v == flat[0] for v in flat) else flat


def _unbound(value: Any, shape: tuple, dtype: np.dtype) -> np.ndarray:
    values = np.array([float(v) for v in (value if isinstance(value, list) else [value])], dtype=np.float64)
    if values.size == 1:
        values = np.full(shape, values[0])
    return values.reshape(shape).astype(dtype) if np.issubdtype(dtype, np.floating) else values.reshape(shape)


def space_to_json(space: spaces.Space, where: str = "space") -> dict:
    """A gymnasium space as the protocol's JSON (docs/remote.md, "Spaces")."""
    if isinstance(space, spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": np.dtype(space.dtype).name,
                "low": _bound(space.low), "high": _bound(space.high)}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": [[key, space_to_json(sub, f"{where}/{key}")]
                                           for key, sub in space.spaces.items()]}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(sub, f"{where}/{i}") for i, sub in enumerate(space.spaces)]}
    raise RemoteSpaceError(f"{where}: {space!r} cannot be served; the protocol carries Box, Discrete, MultiDiscrete "
                           f"and MultiBinary spaces, nested in Dict and Tuple")


def space_from_json(data: Any, where: str = "space") -> spaces.Space:
    """The gymnasium space a protocol JSON description names; RemoteSpaceError, naming `where`, if malformed."""
    try:
        kind = data["type"]
        if kind == "Box":
            shape, dtype = tuple(int(d) for d in data["shape"]), np.dtype(data["dtype"])
            return spaces.Box(_unbound(data["low"], shape, dtype), _unbound(data["high"], shape, dtype), shape, dtype)
        if kind == "Discrete":
            return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
        if kind == "MultiDiscrete":
            return spaces.MultiDiscrete(np.array(data["nvec"], dtype=np.int64))
        if kind == "MultiBinary":
            return spaces.MultiBinary(data["n"])
        if kind == "Dict":
            # In the order listed (a plain dict would be sorted by gymnasium): the order of the leaves' bytes.
            return spaces.Dict(OrderedDict((str(k), space_from_json(v, f"{where}/{k}")) for k, v in data["spaces"]))
        if kind == "Tuple":
            return spaces.Tuple([space_from_json(v, f"{where}/{i}") for i, v in enumerate(data["spaces"])])
    except RemoteSpaceError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteSpaceError(f"{where}: malformed space description {data!r} ({type(exc).__name__}: {exc})") from None
    raise RemoteSpaceError(f"{where}: unknown space type {data.get('type')!r} in {data!r}")


# ---------------------------------------------------------------------------------------------- fixed layouts
@dataclass(frozen=True)
class Leaf:
    path: tuple
    shape: tuple[int, ...]
    dtype: np.dtype

    nbytes: int = 0
    count: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", int(np.prod(self.shape, dtype=np.int64)))
        object.__setattr__(self, "nbytes", self.count * self.dtype.itemsize)


def leaves(space: spaces.Space, path: tuple = ()) -> list[Leaf]:
    """A space's arrays in protocol order (Dict in its key order, Tuple in order), little-endian."""
    if isinstance(space, spaces.Box):
        return [Leaf(path, tuple(int(d) for d in space.shape), np.dtype(space.dtype).newbyteorder("<"))]
    if isinstance(space, spaces.Discrete):
        return [Leaf(path, (), np.dtype("<i8"))]
    if isinstance(space, spaces.MultiDiscrete):
        return [Leaf(path, tuple(np.asarray(space.nvec).shape), np.dtype("<i8"))]
    if isinstance(space, spaces.MultiBinary):
        return [Leaf(path, tuple(int(d) for d in np.atleast_1d(space.n)), np.dtype("i1"))]
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in leaves(sub, (*path, key))]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in leaves(sub, (*path, i))]
    raise RemoteSpaceError(f"{space!r} has no fixed layout in protocol {VERSION}")


class SpaceCodec:
    """A space's values as the fixed bytes of its leaves, and back."""

    def __init__(self, space: spaces.Space, where: str) -> None:
        self.space, self.where = space, where
        self.leaves = leaves(space)
        self.nbytes = sum(leaf.nbytes for leaf in self.leaves)
        self._single = len(self.leaves) == 1 and self.leaves[0].path == ()
        self._scalar = self._single and self.leaves[0].shape == ()
        self._tuples = {leaf.path[:i] for leaf in self.leaves for i in range(len(leaf.path))
                        if isinstance(leaf.path[i], int)}

    def encode_into(self, value: Any, out: np.ndarray) -> None:
        """Write `value` into the byte array `out` (at least `nbytes` long); RemoteSpaceError if it does not
        fit the space's layout."""
        at = 0
        for leaf in self.leaves:
            part = value
            try:
                for key in leaf.path:
                    part = part[key]
                array = np.asarray(part, dtype=leaf.dtype)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise RemoteSpaceError(f"{self._at(leaf)}: {type(exc).__name__}: {exc} (the value disagrees with "
                                       f"the space {self.space!r})") from None
            if array.shape != leaf.shape:
                raise RemoteSpaceError(f"{self._at(leaf)}: shape {array.shape}, but the space says {leaf.shape} "
                                       f"(value disagrees with {self.space!r})")
            out[at:at + leaf.nbytes] = array.reshape(-1).view(np.uint8)
            at += leaf.nbytes

    def encode(self, value: Any) -> bytes:
        """`value` as the space's bytes. The hot path: a leaf that already is an array of the leaf's dtype and
        shape (or, for an i64 scalar, a Python or numpy integer) is copied as is; anything else goes through
        `encode_into`, which converts it and names the leaf where it disagrees with the space."""
        parts = []
        for leaf in self.leaves:
            part = value
            try:
                for key in leaf.path:
                    part = part[key]
            except (KeyError, IndexError, TypeError, ValueError):
                return self._encode_checked(value)
            if type(part) is np.ndarray and part.dtype == leaf.dtype and part.shape == leaf.shape:
                parts.append(part.tobytes())
            elif leaf.dtype == _I8_DTYPE and leaf.shape == () and isinstance(part, (int, np.integer)) \
                    and -(1 << 63) <= part < (1 << 63):
                parts.append(_I64.pack(part))
            else:
                return self._encode_checked(value)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _encode_checked(self, value: Any) -> bytes:
        out = np.zeros(self.nbytes, np.uint8)
        self.encode_into(value, out)
        return out.tobytes()

    def decode(self, data: Any) -> Any:
        """The value stored in the bytes `data` (any buffer: bytes, a memoryview, a uint8 array), as a fresh,
        writable value: arrays are views of one private copy of the bytes (copied again where a leaf would
        be misaligned), scalars numpy scalars."""
        if self._scalar:
            leaf = self.leaves[0]
            return np.frombuffer(data, leaf.dtype, 1)[0]
        copy = bytearray(memoryview(data).cast("B")[:self.nbytes])
        if self._single:
            leaf = self.leaves[0]
            return np.frombuffer(copy, leaf.dtype, leaf.count).reshape(leaf.shape)
        out: dict = {}
        at = 0
        for leaf in self.leaves:
            array = np.frombuffer(copy, leaf.dtype, leaf.count, at)
            if not array.flags.aligned:
                array = array.copy()
            at += leaf.nbytes
            node = out
            for key in leaf.path[:-1]:
                node = node.setdefault(key, {})
            node[leaf.path[-1]] = array[0] if leaf.shape == () else array.reshape(leaf.shape)
        return self._rebuild(out, ()) if self._tuples else out

    def _rebuild(self, node: Any, path: tuple) -> Any:
        if not isinstance(node, dict):
            return node
        items = {k: self._rebuild(v, (*path, k)) for k, v in node.items()}
        return tuple(items[i] for i in range(len(items))) if path in self._tuples else items

    def _at(self, leaf: Leaf) -> str:
        return f"{self.where}" + (f" at {'/'.join(map(str, leaf.path))!r}" if leaf.path else "")


def mask_size(action_space: spaces.Space) -> int:
    """Bytes of an action mask carried in `info` (one u8 per action; 0 where masks make no sense)."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    return 0


class EnvLayout:
    """The fixed record layouts of one env, derived from its possible agents and their spaces: what both
    sides of a connection compute, and check against each other at the handshake."""

    def __init__(self, possible_agents: list[str], observation_spaces: dict[str, spaces.Space],
                 action_spaces: dict[str, spaces.Space]) -> None:
        self.agents = list(possible_agents)
        if not self.agents or len(self.agents) >= NO_AGENT:
            raise RemoteSpaceError(f"the protocol carries 1 to {NO_AGENT - 1} possible agents, not {len(self.agents)}")
        self.index = {a: i for i, a in enumerate(self.agents)}
        #: Agent indices 0..P-1: the order of a snapshot whose agents are all the possible agents, in order.
        self.identity = tuple(range(len(self.agents)))
        self.observation_spaces, self.action_spaces = observation_spaces, action_spaces
        self.obs = {a: SpaceCodec(observation_spaces[a], f"agent {a!r}: observation") for a in self.agents}
        self.actions = {a: SpaceCodec(action_spaces[a], f"agent {a!r}: action") for a in self.agents}
        self.masks = {a: mask_size(action_spaces[a]) for a in self.agents}
        p = len(self.agents)
        self.obs_bytes = max(c.nbytes for c in self.obs.values())
        self.mask_bytes = max(self.masks.values())
        self.action_bytes = max(c.nbytes for c in self.actions.values())
        self.snapshot = np.dtype([
            ("instance", "<u4"), ("flags", "<u2"), ("selection", "<u2"), ("n_agents", "<u2"), ("agents", "<u2", (p,)),
            ("rewards", "<f8", (p,)), ("cumulative", "<f8", (p,)), ("terminations", "u1", (p,)),
            ("truncations", "u1", (p,)), ("obs", "u1", (self.obs_bytes,)), ("mask", "u1", (self.mask_bytes,))])
        self.step = np.dtype([("instance", "<u4"), ("flags", "u1"), ("action", "u1", (self.action_bytes,))])
        self.observation = np.dtype([("instance", "<u4"), ("agent", "<u2"), ("flags", "<u2"),
                                     ("obs", "u1", (self.obs_bytes,)), ("mask", "u1", (self.mask_bytes,))])
        #: The same snapshot and step records as `struct` formats, for the hot path: one call packs or unpacks a
        #: whole record (a snapshot as the flat tuple instance, flags, selection, n_agents, P agents, P rewards,
        #: P cumulative rewards, P terminations, P truncations, obs bytes, mask bytes).
        self.snapshot_struct = struct.Struct(f"<IHHH{p}H{p}d{p}d{p}?{p}?{self.obs_bytes}s{self.mask_bytes}s")
        self.step_struct = struct.Struct(f"<IB{self.action_bytes}s")
        assert self.snapshot_struct.size == self.snapshot.itemsize and self.step_struct.size == self.step.itemsize
        #: The parallel API's records (docs/remote.md, "The parallel API"), by agent index: a cycle record as the flat
        #: tuple instance, n_agents, P agents, P flags, P rewards, P terminations, P truncations, P observations
        #: (obs_bytes each), P masks (mask_bytes each); a parallel step record as instance, P flags, P actions.
        self.cycle_struct = struct.Struct(f"<IH{p}H{p}B{p}d{p}?{p}?" + f"{self.obs_bytes}s" * p
                                          + f"{self.mask_bytes}s" * p)
        self.parallel_step_struct = struct.Struct(f"<I{p}B" + f"{self.action_bytes}s" * p)

    def sizes(self) -> dict[str, int]:
        """The record sizes a WELCOME states, so that a client refuses a server that computed others."""
        return {"obs_bytes": self.obs_bytes, "mask_bytes": self.mask_bytes, "action_bytes": self.action_bytes,
                "snapshot_bytes": self.snapshot.itemsize, "step_bytes": self.step.itemsize,
                "observation_bytes": self.observation.itemsize}

    def parallel_sizes(self) -> dict[str, int]:
        """The parallel API's record sizes, which a WELCOME that says `"parallel": true` states beside `layout`."""
        return {"cycle_bytes": self.cycle_struct.size, "parallel_step_bytes": self.parallel_step_struct.size}

    def describe(self) -> dict:
        """The env part of a WELCOME: agents, their spaces as JSON, and the record sizes."""
        return {"possible_agents": self.agents,
                "spaces": {a: {"observation": space_to_json(self.observation_spaces[a], f"agent {a!r}: observation"),
                               "action": space_to_json(self.action_spaces[a], f"agent {a!r}: action")}
                           for a in self.agents},
                "layout": self.sizes()}

    @classmethod
    def from_description(cls, data: dict, source: str) -> EnvLayout:
        """The layout a WELCOME describes, checked against the record sizes it states (those of the parallel API
        too, where it offers it)."""
        try:
            agents = [str(a) for a in data["possible_agents"]]
            described = data["spaces"]
            obs = {a: space_from_json(described[a]["observation"], f"{source}: agent {a!r}: observation")
                   for a in agents}
            act = {a: space_from_json(described[a]["action"], f"{source}: agent {a!r}: action") for a in agents}
        except (KeyError, TypeError) as exc:
            raise RemoteProtocolError(f"{source}: malformed env description ({type(exc).__name__}: {exc})") from None
        layout = cls(agents, obs, act)
        stated = dict(data.get("layout", {}))
        ours = layout.sizes()
        if data.get("parallel") is True:
            stated.update(data.get("parallel_layout", {}))
            ours.update(layout.parallel_sizes())
        wrong = {k: (v, ours.get(k)) for k, v in stated.items() if ours.get(k) != v}
        if wrong:
            raise RemoteSpaceError(
                f"{source}: the record sizes the server states disagree with its spaces: "
                + ", ".join(f"{k} {v[0]} (the spaces give {v[1]})" for k, v in wrong.items())
                + "; see docs/remote.md, \"Fixed layouts\"")
        return layout
