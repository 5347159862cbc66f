"""Servers that set their own pace (docs/remote.md, "Replies at the server's pace"): a STEP or RESET answered in
several STATE frames, each covering any subset of the instances awaiting an answer. The actor acts on whichever
instances are answered while the others are still being stepped; a STATE for an instance that awaits nothing is
refused; the Node.js reference server paces its replies with --paced."""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest
from pettingzoo.test import api_test
from test_remote import C4, NODE_ID, c4_welcome, fake_server, needs_node, python_server, remote_actor

from pzasync.core.environments import make_env
from pzasync.errors import RemoteProtocolError
from pzasync.remote import Connection, EnvServer, connect
from pzasync.remote.protocol import MAGIC, EnvLayout, Kind, frame, packed_frame, read_frame

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_remote_server_left")]


def recording(monkeypatch) -> list[tuple[str, tuple[int, ...]]]:
    """The client's view of every connection, in order: ("STEP", instances) for each STEP frame sent, ("STATE",
    instances) for each STATE applied."""
    seen: list[tuple[str, tuple[int, ...]]] = []
    send, apply_state = Connection.send, Connection.apply_state

    def recording_send(self, data, *args):
        if data[4] == Kind.STEP:
            count = struct.unpack_from("<I", data, 5)[0]
            size = self.layout.step_struct.size
            seen.append(("STEP", tuple(struct.unpack_from("<I", data, 9 + k * size)[0] for k in range(count))))
        return send(self, data, *args)

    def recording_apply(self, body):
        covered = apply_state(self, body)
        seen.append(("STATE", tuple(covered)))
        return covered

    monkeypatch.setattr(Connection, "send", recording_send)
    monkeypatch.setattr(Connection, "apply_state", recording_apply)
    return seen


def test_the_actor_answers_the_fast_instances_while_a_slow_one_is_still_being_stepped(monkeypatch):
    """Instance 0's first three steps are held by the server until the other instances have taken four more
    steps, more than the three that went out with it: they can only take them if the actor answers their
    replies while instance 0's STEP is outstanding. The frames show it: after each STEP naming instance 0, a
    STEP naming only other instances goes out before the STATE that answers instance 0, and STATE frames answer
    subsets of what is outstanding."""
    actor, writers, _ = remote_actor(python_server(C4, "--workers 4 --hold 0"), 4, timeout_s=60)
    seen = recording(monkeypatch)
    try:
        taken = actor.run(agent_steps=400, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert taken == 400
    held = [i for i, (kind, instances) in enumerate(seen) if kind == "STEP" and 0 in instances][:3]
    assert len(held) == 3, seen[:40]
    for start in held:
        answer = next(i for i in range(start + 1, len(seen)) if seen[i][0] == "STATE" and 0 in seen[i][1])
        between = [instances for kind, instances in seen[start + 1:answer] if kind == "STEP"]
        assert between and all(0 not in instances for instances in between), seen[start:answer + 1]
    assert any(kind == "STATE" and 0 not in instances for kind, instances in seen[held[0]:]), seen[:40]


def _snapshot(layout: EnvLayout, instance: int) -> bytes:
    """A connect four snapshot record of `instance` right after a reset (player_0 to move, an empty board)."""
    mask = bytes([1] * layout.mask_bytes)
    return layout.snapshot_struct.pack(instance, 2, 0, 2, 0, 1, 0.0, 0.0, 0.0, 0.0, False, False, False, False,
                                       bytes(layout.obs_bytes), mask)


@pytest.mark.parametrize("reply, message", [
    ([1], r"a STATE names instance 1, which is not outstanding"),
    ([0, 0], r"a STATE names instance 0, which is not outstanding"),
], ids=["never-asked", "answered-twice"])
def test_a_state_for_an_instance_that_awaits_no_answer_is_refused_at_once(tmp_path, reply, message):
    """A paced server resets instance 0 (of two on the connection) and answers with a STATE for instance 1, or
    answers instance 0 in two STATE frames: the client refuses with a RemoteProtocolError naming the instance,
    never waiting for an answer that cannot come."""
    env = make_env(C4)
    layout = EnvLayout(env.possible_agents, {a: env.observation_space(a) for a in env.possible_agents},
                       {a: env.action_space(a) for a in env.possible_agents})
    env.close()
    welcome = json.loads(bytes(c4_welcome()[7:]))
    welcome["paced"] = True
    states = b"".join(packed_frame(Kind.STATE, [_snapshot(layout, i)]) for i in reply)
    address, listener, thread = fake_server(tmp_path, [frame(Kind.WELCOME, struct.pack("<H", 1) + json.dumps(
        welcome).encode()), states])
    try:
        connection = Connection(address, timeout_s=5)
        try:
            assert connection.paced
            connection.env(0, deferred=True), connection.env(1, deferred=True)
            with pytest.raises(RemoteProtocolError, match=message):
                connection.reset_many([(0, 0, None)])
                connection.next_answered()  # the second STATE for instance 0 is read here
            assert connection.broken is not None
        finally:
            connection.close()
    finally:
        listener.close()
        thread.join(5)


def test_a_paced_server_refuses_to_step_an_instance_whose_last_step_is_not_answered(tmp_path):
    release = threading.Event()
    server = EnvServer(lambda: make_env(C4), f"unix://{tmp_path}/paced.sock", 2, workers=2,
                       pace=lambda instance: release.wait(20) and 0.0)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(20)
            sock.connect(str(server.address)[len("unix://"):])
            sock.sendall(frame(Kind.HELLO, MAGIC + struct.pack("<HH", 1, 0)))
            kind, body = read_frame(sock, None, "test")
            assert kind == Kind.WELCOME and json.loads(bytes(body[2:]))["paced"] is True
            sock.sendall(frame(Kind.RESET, struct.pack("<I", 1) + struct.pack("<IBq", 0, 1, 0)))
            kind, body = read_frame(sock, None, "test")
            assert kind == Kind.STATE and struct.unpack_from("<II", body) == (1, 0)
            step = frame(Kind.STEP, struct.pack("<I", 1) + struct.pack("<IBq", 0, 0, 3))
            sock.sendall(step + step)  # the first is held by the pace: the second names a busy instance
            kind, body = read_frame(sock, None, "test")
            assert kind == Kind.ERROR
            refused = json.loads(bytes(body))
            assert refused["code"] == "instance" and refused["instance"] == 0, refused
            assert "not answered yet" in refused["message"]
            release.set()
            kind, body = read_frame(sock, None, "test")
            assert kind == Kind.STATE and struct.unpack_from("<II", body) == (1, 0)
    finally:
        release.set()
        server.stop()
        thread.join(10)


@needs_node
def test_the_node_server_paces_its_replies_and_the_actor_trains_on_it(monkeypatch):
    """`server.js --paced` answers each instance in a STATE of its own, later for higher instances: api_test
    through `connect`, then the actor on 5 copies of it (STATE frames of one instance each, several of which
    may be answered in one STEP when they came in together)."""
    env = connect(f"{NODE_ID} --paced")
    try:
        assert env.connection.paced
        api_test(env, num_cycles=60)
    finally:
        env.close()
    actor, writers, _ = remote_actor(f"{NODE_ID} --paced", 5)
    seen = recording(monkeypatch)
    try:
        taken = actor.run(agent_steps=600, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert taken == 600
    assert sum(len(w.rows) for w in writers.values()) > 400
    states = [instances for kind, instances in seen if kind == "STATE"]
    assert states and all(len(instances) == 1 for instances in states)
