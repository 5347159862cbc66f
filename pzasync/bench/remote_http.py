"""The HTTP/1.1 + JSON baseline of `pzasync bench --remote`: the remote env protocol's messages carried the
way the designs this project follows started, one HTTP request per message with a JSON body, so the binary
protocol's cost can be read beside it (docs/remote.md, "Speed").

`HttpEnvServer` puts an `EnvServer` (listening nowhere) behind the standard library's `http.server`;
`HttpConnection` is a `Connection` that sends each request as a POST and waits for its response (HTTP/1.1 on a
kept-alive connection, no pipelining). Each side translates between its binary records and JSON with the
values spelled out (observations and actions as nested lists, rewards and flags by agent name), so both
pay what an HTTP+JSON client and server pay: header parsing, JSON encoding and decoding, and turning lists
back into arrays. The translation also packs and unpacks the binary records on each side, a few
microseconds per agent step that a native HTTP+JSON server would not pay.

    python -m pzasync.bench.remote_http ENV_ID --address tcp://127.0.0.1:0 [--instances N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import socket
import struct
from collections import deque
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable

import numpy as np

from pzasync.errors import RemoteEnvError, RemoteProtocolError
from pzasync.logs import logger
from pzasync.remote.address import Address
from pzasync.remote.client import Connection
from pzasync.remote.protocol import (
    HAS_OPTIONS,
    HAS_SEED,
    INFO_JSON,
    INFO_MASK,
    MAGIC,
    NO_AGENT,
    NO_OBS,
    NONE_ACTION,
    OBSERVE_RECORD,
    RESET_RECORD,
    VERSION,
    EnvLayout,
    Kind,
    info_tail,
    packed_frame,
    read_infos,
    records_frame,
    split_records,
    unpack_records,
)
from pzasync.remote.server import EnvServer

_PATHS: dict[int, str] = {Kind.HELLO: "/hello", Kind.RESET: "/reset", Kind.STEP: "/step", Kind.OBSERVE: "/observe"}


def to_json(value: Any) -> Any:
    """A space's value (arrays, numpy scalars, dicts, tuples) as plain JSON values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------- the server
class HttpEnvServer:
    """An `EnvServer`'s messages over HTTP/1.1 + JSON at a TCP `address` (module docstring)."""

    def __init__(self, env_fn: Callable[[], Any], address: str, instances: int = 16) -> None:
        where = Address.parse(address)
        if where.path is not None or where.host is None or where.port is None:
            raise ValueError(f"the HTTP baseline serves TCP addresses, not {address!r}")
        self.env_server = EnvServer(env_fn, None, instances)
        self.layout = self.env_server.layout
        self.http = HTTPServer((where.host, where.port), self._handler())
        self.address = Address(host=where.host, port=self.http.server_address[1])

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                self.session = owner.env_server.session(str(self.client_address))

            def finish(self) -> None:
                owner.env_server.end(self.session)
                super().finish()

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, reply = owner.answer(self.session, self.path, request)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                pass

        return Handler

    def answer(self, session: Any, path: str, request: dict) -> tuple[int, dict]:
        """(HTTP status, JSON reply) to one request: translated to the binary message, answered by the
        `EnvServer`, and its reply translated back."""
        layout = self.layout
        kind: int
        if path == "/hello":
            kind, body = Kind.HELLO, MAGIC + struct.pack("<HH", request.get("version", VERSION), 0)
        elif path == "/step":
            steps = [layout.step_struct.pack(instance, NONE_ACTION if agent is None else 0,
                                             b"" if agent is None else layout.actions[agent].encode(action))
                     for instance, agent, action in request["steps"]]
            kind, body = Kind.STEP, packed_frame(Kind.STEP, steps)[5:]
        elif path == "/reset":
            resets = np.zeros(len(request["resets"]), RESET_RECORD)
            options = []
            for k, (instance, seed, opts) in enumerate(request["resets"]):
                resets[k] = (instance, (HAS_SEED if seed is not None else 0) | (HAS_OPTIONS if opts else 0), seed or 0)
                if opts:
                    options.append(opts)
            kind, body = Kind.RESET, records_frame(Kind.RESET, resets, info_tail(options))[5:]
        elif path == "/observe":
            observes = np.array([(i, layout.index[a]) for i, a in request["observe"]], OBSERVE_RECORD)
            kind, body = Kind.OBSERVE, records_frame(Kind.OBSERVE, observes)[5:]
        else:
            return 404, {"code": "malformed", "message": f"no such message: {path}"}
        reply, _ = self.env_server.answer(session, kind, memoryview(body))
        assert reply is not None, "an EnvServer without workers answers every frame at once"
        reply_kind, reply_body = reply[4], memoryview(reply)[5:]
        if reply_kind == Kind.ERROR:
            return 500, json.loads(bytes(reply_body))
        if reply_kind == Kind.WELCOME:
            return 200, json.loads(bytes(reply_body[2:]))
        if reply_kind == Kind.STATE:
            return 200, {"states": _states_json(layout, reply_body)}
        return 200, {"observations": _observations_json(layout, reply_body)}

    def serve_forever(self) -> None:
        """Answer until SIGTERM or SIGINT."""
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            self.http.serve_forever(poll_interval=0.25)
        except KeyboardInterrupt:
            pass
        finally:
            self.http.server_close()
            self.env_server.close()


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _states_json(layout: EnvLayout, body: memoryview) -> list[dict]:
    rows, tail = unpack_records(body, layout.snapshot_struct, "http")
    infos = iter(read_infos(tail, sum(1 for r in rows if r[1] & INFO_JSON), "http"))
    names, p = layout.agents, len(layout.agents)
    out = []
    for row in rows:
        flags, selection, n = row[1], row[2], row[3]
        order = row[4:4 + n]
        agent = names[selection] if selection != NO_AGENT else None
        state = {"instance": row[0], "agents": [names[i] for i in order], "selection": agent,
                 "rewards": {names[i]: row[4 + p + i] for i in order},
                 "cumulative": {names[i]: row[4 + 2 * p + i] for i in order},
                 "terminations": {names[i]: row[4 + 3 * p + i] for i in order},
                 "truncations": {names[i]: row[4 + 4 * p + i] for i in order}}
        if not flags & NO_OBS:
            if agent is None:
                raise RemoteProtocolError(f"http: a snapshot of instance {row[0]} carries an observation but selects "
                                          f"no agent")
            state["observation"] = to_json(layout.obs[agent].decode(row[-2]))
            if flags & INFO_MASK:
                state["action_mask"] = list(row[-1][:layout.masks[agent]])
            if flags & INFO_JSON:
                state["info"] = next(infos)
        out.append(state)
    return out


def _observations_json(layout: EnvLayout, body: memoryview) -> list[dict]:
    replies, tail = split_records(body, layout.observation, "http")
    infos = iter(read_infos(tail, sum(1 for f in replies["flags"].tolist() if f & INFO_JSON), "http"))
    out = []
    for instance, agent_index, flags, obs, mask in replies.tolist():
        agent = layout.agents[agent_index]
        item = {"instance": instance, "agent": agent, "observation": to_json(layout.obs[agent].decode(obs))}
        if flags & INFO_MASK:
            item["action_mask"] = list(mask[:layout.masks[agent]])
        if flags & INFO_JSON:
            item["info"] = next(infos)
        out.append(item)
    return out


# ---------------------------------------------------------------------------------------------- the client
class HttpConnection(Connection):
    """A `Connection` to an `HttpEnvServer`: each request a POST with a JSON body, answered before the next is
    sent (its reply is kept for `receive`, as the binary frame it stands for)."""

    def __init__(self, address: str | Address, timeout_s: float = 60.0,
                 describe_end: Callable[[bool], str] | None = None, label: str | None = None) -> None:
        self.address = Address.parse(address) if isinstance(address, str) else address
        if self.address.host is None:
            raise ValueError(f"the HTTP baseline is reached at a TCP address, not {self.address}")
        self.timeout_s, self.describe_end = timeout_s, describe_end
        self.label = label or f"HTTP server {self.address}"
        self.envs = {}
        self._sent = self._read = 0
        self._stash = {}
        self._queued, self._resets = [], []
        self._cycles, self._parallel_resets = [], []
        self.parallel = False  # the baseline carries the AEC protocol's messages only
        self._broken = None
        self.lost = False
        self.paced, self.outstanding, self.answered = False, {}, deque()  # the baseline answers every request whole
        self.http = http.client.HTTPConnection(self.address.host, self.address.port, timeout=timeout_s)
        self.http.connect()
        self.sock = self.http.sock
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        status, self.description = self._post("/hello", {"version": VERSION})
        if status != 200:
            raise RemoteProtocolError(f"{self.label}: refused the handshake: {self.description}")
        self.layout = EnvLayout.from_description(self.description, self.label)
        self.name = str(self.description.get("name", self.address))
        self.max_instances = int(self.description.get("max_instances", 1))

    def _post(self, path: str, request: dict) -> tuple[int, dict]:
        data = json.dumps(request).encode()
        self.http.request("POST", path, data, {"Content-Type": "application/json"})
        response = self.http.getresponse()
        return response.status, json.loads(response.read())

    def send(self, data: bytes, instances: list[int] | None = None) -> int:
        """Send the request the binary frame `data` stands for, as JSON, and keep its reply as a frame (the
        baseline's server answers in full: `instances` changes nothing)."""
        if self._broken is not None:
            raise self._broken
        kind, body = data[4], memoryview(data)[5:]
        request = self._request(kind, body)
        try:
            status, reply = self._post(_PATHS[kind], request)
        except (OSError, http.client.HTTPException) as exc:
            raise self.failure(f"closed the connection ({type(exc).__name__}: {exc})") from None
        if status != 200:
            self._stash[self._sent] = (Kind.ERROR, memoryview(json.dumps(reply).encode()))
        elif "states" in reply:
            self._stash[self._sent] = (Kind.STATE, self._state_body(reply["states"]))
        else:
            self._stash[self._sent] = (Kind.OBSERVATION, self._observation_body(reply["observations"]))
        self._sent += 1
        return self._sent - 1

    def _request(self, kind: int, body: memoryview) -> dict:
        layout = self.layout
        if kind == Kind.STEP:
            steps = []
            for instance, flags, action in unpack_records(body, layout.step_struct, self.label)[0]:
                agent = None if flags & NONE_ACTION else getattr(self.envs[instance], "agent_selection", None)
                decoded = None if agent is None else to_json(layout.actions[agent].decode(action))
                steps.append([instance, agent, decoded])
            return {"steps": steps}
        if kind == Kind.RESET:
            records, tail = split_records(body, RESET_RECORD, self.label)
            rows = records.tolist()
            options = iter(read_infos(tail, sum(1 for _, f, _ in rows if f & HAS_OPTIONS), self.label))
            return {"resets": [[i, seed if f & HAS_SEED else None, next(options) if f & HAS_OPTIONS else None]
                               for i, f, seed in rows]}
        if kind == Kind.OBSERVE:
            records = split_records(body, OBSERVE_RECORD, self.label)[0]
            return {"observe": [[i, layout.agents[a]] for i, a in records.tolist()]}
        raise RemoteProtocolError(f"{self.label}: the HTTP baseline carries no message of kind {kind}")

    def _state_body(self, states: list[dict]) -> memoryview:
        layout = self.layout
        p, index = len(layout.agents), layout.index
        records, infos = [], []
        for state in states:
            order = [index[a] for a in state["agents"]]
            fields: list = [0.0] * (2 * p) + [False] * (2 * p)
            for agent, i in zip(state["agents"], order):
                fields[i], fields[p + i] = state["rewards"][agent], state["cumulative"][agent]
                fields[2 * p + i], fields[3 * p + i] = state["terminations"][agent], state["truncations"][agent]
            agent = state["selection"]
            flags, obs, mask = NO_OBS, b"", b""
            if "observation" in state:
                flags, obs = 0, layout.obs[agent].encode(state["observation"])
                if "action_mask" in state:
                    flags, mask = flags | INFO_MASK, bytes(state["action_mask"])
                if "info" in state:
                    flags |= INFO_JSON
                    infos.append(state["info"])
            records.append(layout.snapshot_struct.pack(
                state["instance"], flags, index.get(agent, NO_AGENT), len(order), *order, *[0] * (p - len(order)),
                *fields, obs, mask))
        return memoryview(packed_frame(Kind.STATE, records, info_tail(infos)))[5:]

    def _observation_body(self, observations: list[dict]) -> memoryview:
        layout = self.layout
        records = np.zeros(len(observations), layout.observation)
        infos = []
        for k, item in enumerate(observations):
            agent = item["agent"]
            flags = 0
            records["obs"][k][:layout.obs[agent].nbytes] = np.frombuffer(layout.obs[agent].encode(item["observation"]),
                                                                         np.uint8)
            if "action_mask" in item:
                flags |= INFO_MASK
                records["mask"][k][:len(item["action_mask"])] = item["action_mask"]
            if "info" in item:
                flags |= INFO_JSON
                infos.append(item["info"])
            record = records[k]
            record["instance"], record["agent"], record["flags"] = item["instance"], layout.index[agent], flags
        return memoryview(records_frame(Kind.OBSERVATION, records, info_tail(infos)))[5:]

    def has_reply(self, ticket: int) -> bool:
        """Whether `ticket` was answered: always, once sent (HTTP/1.1 answers before the next request)."""
        return ticket in self._stash

    def close(self) -> None:
        """Close the HTTP connection; never raises."""
        if self.sock is not None:
            self.http.close()
            self.sock = None
        if self._broken is None:
            self._broken = RemoteEnvError(f"{self.label}: the connection was closed")


def main() -> None:
    """`python -m pzasync.bench.remote_http ENV_ID --address tcp://HOST:PORT [--instances N] [--env-arg K=V]`."""
    from pzasync.core.environments import make_env
    from pzasync.specs import parse_key_value

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env_id")
    parser.add_argument("--address", default="tcp://127.0.0.1:0")
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--env-arg", action="append", default=[], help="KEY=VALUE: an env keyword argument")
    args = parser.parse_args()
    kwargs = dict(parse_key_value(item, f"--env-arg {item!r}: expected KEY=VALUE") for item in args.env_arg)
    server = HttpEnvServer(lambda: make_env(args.env_id, **kwargs), args.address, args.instances)
    logger.info(f"remote: serving {server.env_server.name} over HTTP+JSON at {server.address} (up to "
                f"{args.instances} instances per connection)")
    server.serve_forever()


if __name__ == "__main__":
    main()
