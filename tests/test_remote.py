"""Remote envs (docs/remote.md): servers in other processes, `connect`, remote env copies, and the failures a
server can have (death, hang, malformed frames, another protocol version, spaces that disagree with the data)."""

from __future__ import annotations

import glob
import json
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import api_test
from test_vector_actor import FIELDS, Counters, HashedPolicy, ListWriter, hashed_choice, per_copy

import pzasync
from pzasync.core.collect import transitions_to_arrays
from pzasync.core.environments import EnvSpec, make_env
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.errors import RemoteEnvError, RemoteProtocolError, RemoteSpaceError
from pzasync.remote import Connection, EnvServer, connect
from pzasync.remote.protocol import (
    MAGIC,
    EnvLayout,
    Kind,
    frame,
    json_frame,
    read_frame,
    space_from_json,
    space_to_json,
)
from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
from pzasync.runtime.copies.remote import RemoteEnvs

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_remote_server_left")]

SERVER = Path(__file__).with_name("remote_server.py")
C4 = "pettingzoo.classic.connect_four_v3"
FORAGE = "pzasync.envs.forage"


def python_server(env_id: str, *flags: str) -> str:
    """A `cmd:` env id launching tests/remote_server.py (a Python server in its own process)."""
    return f"cmd:{{python}} {SERVER} {env_id} --socket {{socket}} --instances {{instances}} {' '.join(flags)}".strip()


@pytest.fixture
def thread_server(tmp_path):
    """An `EnvServer` on a thread of this process (for the protocol's refusals): `start(env_fn) -> address`."""
    started = []

    def start(env_fn, instances: int = 4) -> str:
        server = EnvServer(env_fn, f"unix://{tmp_path}/s{len(started)}.sock", instances)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        started.append((server, thread))
        return str(server.address)

    yield start
    for server, thread in started:
        server.stop()
        thread.join(5)


def remote_actor(env_id: str, copies: int, timeout_s: float = 30.0, max_episode_steps: int | None = None, **kwargs):
    spec = EnvSpec.of(env_id, **kwargs)
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    writers = {agent: ListWriter() for agent in layouts}
    agents = {agent: ActingAgent(agent, layout, LocalPolicy(HashedPolicy(layout)), learns=False, buffer=writers[agent],
                                 tracks=copies) for agent, layout in layouts.items()}
    actor = Actor(ActorContext(RemoteEnvs(spec, copies, timeout_s), agents, Counters(),
                               max_episode_steps=max_episode_steps))
    return actor, writers, layouts


def assert_same(got: dict, expected: dict, what: str) -> None:
    assert set(got) == set(expected), what
    for agent, arrays in expected.items():
        for name, value in arrays.items():
            if isinstance(value, dict):
                for leaf in value:
                    np.testing.assert_array_equal(got[agent][name][leaf], value[leaf], err_msg=f"{what} {agent} {name}")
            else:
                np.testing.assert_array_equal(got[agent][name], value, err_msg=f"{what} {agent} {name}")
                assert got[agent][name].dtype == value.dtype, f"{what} {agent} {name}"


# ---------------------------------------------------------------------------------------------- equality
PACED = "--workers 2 --pace-ms 1"  # a server that answers instances as they finish, in varying order


@pytest.mark.parametrize("env_id, flags", [(C4, ""), (FORAGE, ""), pytest.param(C4, PACED, marks=pytest.mark.slow)],
                         ids=["c4", "forage", "c4-paced"])
def test_connect_passes_api_test_and_rolls_out_exactly_the_in_process_transitions(env_id, flags):
    """A Python server in its own process (whole replies, or paced): PettingZoo's api_test on `connect`, then
    `rollout` through it equals `rollout` in process, field for field (cut at the budget included: it observes
    every agent)."""
    env = connect(python_server(env_id, flags))
    assert env.connection.paced == bool(flags)
    try:
        api_test(env, num_cycles=60)
        rng_remote, rng_local = np.random.default_rng(3), np.random.default_rng(3)
        got = pzasync.rollout(env, lambda a, o, m: int(rng_remote.choice(np.flatnonzero(m))), agent_steps=700, seed=5)
    finally:
        env.close()
    expected = pzasync.rollout(env_id, lambda a, o, m: int(rng_local.choice(np.flatnonzero(m))), agent_steps=700,
                               seed=5)
    assert_same(got, expected, env_id)


@pytest.mark.parametrize("env_id, copies, servers, flags", [
    (C4, 5, 1, ""), pytest.param(FORAGE, 6, 2, "", marks=pytest.mark.slow),  # 3 s each in the slow tier
    pytest.param(C4, 5, 1, "--workers 4 --pace-ms 2 --hold 0", marks=pytest.mark.slow),
    (FORAGE, 6, 2, PACED)], ids=["c4", "forage", "c4-paced", "forage-paced"])
def test_each_remote_copy_equals_an_independent_rollout_with_seed_plus_k(env_id, copies, servers, flags):
    """The actor over remote env copies (one connection per server, a frame per group of copies, or per reply
    of a paced server) writes copy k's transitions exactly as a rollout seeded seed + k; batches hold several
    copies."""
    actor, writers, layouts = remote_actor(python_server(env_id, flags), copies, servers=servers)
    try:
        taken = actor.run(agent_steps=1200, seed=11, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert taken == 1200
    streams = {agent: per_copy(w, copies) for agent, w in writers.items()}
    decisions = Counter()
    for by_copy in streams.values():
        for k, rows in by_copy.items():
            decisions[k] += len(rows)
    assert sum(decisions.values()) == 1200 and set(decisions) == set(range(copies))
    n = {a: layouts[a].action_space.n for a in layouts}
    for k in range(copies):
        expected = pzasync.rollout(env_id, lambda agent, obs, mask: hashed_choice(obs, mask, n[agent]),
                                   agent_steps=decisions[k], seed=11 + k)
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        for agent, arrays in expected.items():
            for name in FIELDS:
                if name in arrays:
                    np.testing.assert_array_equal(got[agent][name], arrays[name], err_msg=f"copy {k} {agent} {name}")
    assert max(max(a.policy.batch_sizes) for a in actor.agents.values()) > 1


def test_the_copies_whose_episodes_end_in_one_reply_are_reset_with_one_frame(monkeypatch):
    """Episodes cut at 6 decisions end in the same round for every copy of a group: each group's resets go
    out as one RESET frame (at the start too), and each copy's transitions are still rollout's."""
    frames = []
    send = Connection.send

    def counting_send(self, data):
        if data[4] == Kind.RESET:
            frames.append(struct.unpack_from("<I", data, 5)[0])
        return send(self, data)

    starts = []
    actor, writers, layouts = remote_actor(python_server(C4), 8, max_episode_steps=6)
    monkeypatch.setattr(Connection, "send", counting_send)  # after the probe's own reset
    on_start = actor._episode_start
    actor._episode_start = lambda k: (starts.append(k), on_start(k))
    try:
        taken = actor.run(agent_steps=480, seed=3, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert taken == 480
    assert sum(frames) == len(starts) >= 80
    assert frames == [4] * len(frames), frames  # two groups of four copies, every episode 6 decisions long
    streams = {agent: per_copy(w, 8) for agent, w in writers.items()}
    n = {a: layouts[a].action_space.n for a in layouts}
    for k in range(8):
        expected = pzasync.rollout(C4, lambda agent, obs, mask: hashed_choice(obs, mask, n[agent]),
                                   agent_steps=_decisions(streams, k), seed=3 + k, max_episode_steps=6)
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        for agent, arrays in expected.items():
            for name in FIELDS:
                np.testing.assert_array_equal(got[agent][name], arrays[name], err_msg=f"copy {k} {agent} {name}")


def test_a_server_over_tcp_serves_several_connections():
    proc = subprocess.Popen([sys.executable, str(SERVER), C4, "--address", "tcp://127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        address = re.search(r"at (tcp://\S+)", line).group(1)
        first, second = connect(address), connect(address)
        try:
            assert first.connection.ping() < 5
            rng = np.random.default_rng(0)
            got = pzasync.rollout(first, lambda a, o, m: int(rng.choice(np.flatnonzero(m))), agent_steps=200, seed=1)
            second.reset(seed=1)
            assert second.agents == ["player_0", "player_1"]
        finally:
            first.close()
            second.close()
        rng = np.random.default_rng(0)
        assert_same(got, pzasync.rollout(C4, lambda a, o, m: int(rng.choice(np.flatnonzero(m))), agent_steps=200,
                                         seed=1), "tcp")
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()


def test_a_remote_env_id_trains_with_the_runners_and_the_learner_gets_rollouts_transitions(tmp_path):
    """Invariant 4 through a server: the sequential runner's learner records exactly rollout's transitions."""
    from custom_learners import FirstLegalPolicy

    result = pzasync.SequentialRunner(python_server(C4), ("custom_learners:RecordingLearner",
                                                          {"record_dir": str(tmp_path)}),
                                      pzasync.RunConfig(seed=11)).run(agent_steps=300)
    assert result.agent_steps >= 300
    policy = FirstLegalPolicy()
    expected = pzasync.rollout(C4, lambda a, o, m: int(policy.act({"obs": o[None]}, m[None], False)[0][0]),
                               agent_steps=300, seed=11)
    for agent in ("player_0", "player_1"):
        files = sorted(glob.glob(str(tmp_path / f"{agent}-*.npz")))
        got = {k: np.concatenate([np.load(f)[k] for f in files]) for k in ("obs", "action", "reward", "next_obs")}
        n = len(got["reward"])
        assert n >= 100
        for key, value in got.items():
            np.testing.assert_array_equal(value, expected[agent][key][:n], err_msg=f"{agent} {key}")


# ---------------------------------------------------------------------------------------------- failures
def test_a_server_that_dies_mid_run_is_named_with_its_exit_code_and_stderr_and_nothing_leaks():
    actor, writers, _ = remote_actor(python_server(C4, "--exit-after 150"), 4)
    try:
        with pytest.raises(RemoteEnvError) as info:
            actor.run(agent_steps=5000, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    message = str(info.value)
    assert "server 0" in message and "instances 0-3" in message, message
    assert "exited with code 3" in message and "exiting on purpose after 150 steps" in message, message
    assert sum(len(w.rows) for w in writers.values()) > 50, "transitions received before the death are kept"


def _decisions(streams: dict, k: int) -> int:
    return sum(len(by_copy.get(k, [])) for by_copy in streams.values())


def _rollout_of_copy(env_id: str, layouts: dict, seed: int, steps: int) -> dict:
    n = {a: layouts[a].action_space.n for a in layouts}
    return pzasync.rollout(env_id, lambda agent, obs, mask: hashed_choice(obs, mask, n[agent]), agent_steps=steps,
                           seed=seed)


@pytest.mark.parametrize("fault, end", [
    ("--exit-after 150", "exited with code 3"),
    pytest.param("--hang-after 150", "has not answered for 2s", marks=pytest.mark.slow),
    (f"--exit-after 150 {PACED}", "exited with code 3"),
    pytest.param(f"--hang-after 150 {PACED}", "has not answered for 2s", marks=pytest.mark.slow)],
    ids=["dies", "hangs", "paced-dies", "paced-hangs"])
def test_when_one_of_two_servers_fails_the_healthy_copies_are_cut_and_the_failed_ones_invent_nothing(fault, end):
    """Server 0 of two exits (or hangs) mid-run. The run ends with its error; before that, the copies on server
    1 are cut as rule 5 says (each copy's transitions equal a rollout cut after as many decisions), and the
    copies on server 0 keep what they delivered, a prefix of their rollout, with nothing made up for the lost
    turns."""
    episodes = []
    actor, writers, layouts = remote_actor(python_server(C4, f"--index {{index}} {fault} --fault-index 0"), 4,
                                           timeout_s=2.0, servers=2)
    try:
        with pytest.raises(RemoteEnvError) as info:
            actor.run(agent_steps=None, seed=7, keep_going=lambda: True, on_episode=episodes.append)  # no budget cut
    finally:
        actor.close()
    message = str(info.value)
    assert "server 0" in message and "instances 0-1" in message and end in message, message
    streams = {agent: per_copy(w, 4) for agent, w in writers.items()}
    for k in (2, 3):  # server 1: every pending transition completed as truncated, exactly as a cut rollout
        steps = _decisions(streams, k)
        assert steps > 0  # how many depends on how the two servers were scheduled (8 to 60+ seen)
        expected = _rollout_of_copy(C4, layouts, 7 + k, steps)
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        for agent, arrays in expected.items():
            for name in FIELDS:
                np.testing.assert_array_equal(got[agent][name], arrays[name], err_msg=f"copy {k} {agent} {name}")
        # Every decision is in an episode that was reported, ended by the env or cut: none was left open.
        assert sum(e.agent_steps for e in episodes if e.copy == k) == steps
    for k in (0, 1):  # server 0: what was delivered is a prefix of the rollout; the episode in flight is dropped
        rows = {agent: by_copy.get(k, []) for agent, by_copy in streams.items()}
        expected = _rollout_of_copy(C4, layouts, 7 + k, _decisions(streams, k) + 50)
        for agent, transitions in rows.items():
            got = transitions_to_arrays(transitions, {agent: layouts[agent]})[agent] if transitions else None
            assert got is not None and not got["truncated"].any(), f"copy {k} {agent}: nothing cut, nothing made up"
            for name in FIELDS:
                np.testing.assert_array_equal(got[name], expected[agent][name][:len(transitions)],
                                              err_msg=f"copy {k} {agent} {name}")
        assert not [e for e in episodes if e.copy == k and e.cut_by_actor], "no summary for a dropped episode"


@pytest.mark.parametrize("flags", ["", pytest.param(PACED, marks=pytest.mark.slow)], ids=["whole", "paced"])
def test_a_restart_budget_launches_a_dead_server_again_and_its_copies_start_fresh_episodes(capfd, flags):
    """restarts=5: the server exits every 150 env steps; it is launched again each time, its copies start new
    episodes, and the run takes its whole budget. Nothing of the lost episodes is completed."""
    episodes = []
    actor, writers, _ = remote_actor(python_server(C4, f"--exit-after 150 {flags}"), 2, restarts=5)
    try:
        taken = actor.run(agent_steps=400, seed=0, keep_going=lambda: True, on_episode=episodes.append)
    finally:
        actor.close()
    assert taken == 400
    err = capfd.readouterr().err
    relaunches = re.findall(r"server 0 \(\S+, pid \d+\) \(instances 0-1\) closed the connection.*exited with code 3.*"
                            r"\n(?:.*\n)*?.*launching it again \((\d) restarts left\)", err)
    assert relaunches[:2] == ["4", "3"], err
    rows = [t for w in writers.values() for t in w.rows]
    # Only the run's end cuts episodes (two copies, two agents): those lost with a server were dropped.
    assert sum(t.truncated for t in rows) <= 4, "episodes lost with a server are dropped, not cut"
    assert len(rows) < 400 and sum(e.agent_steps for e in episodes) < 400


def test_a_restart_budget_that_runs_out_ends_the_run_with_the_servers_error(capfd):
    actor, writers, _ = remote_actor(python_server(C4, "--exit-after 150"), 2, restarts=1)
    try:
        with pytest.raises(RemoteEnvError, match=r"(?s)server 0 .*\(instances 0-1\).*exited with code 3"):
            actor.run(agent_steps=5000, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert capfd.readouterr().err.count("launching it again (0 restarts left)") == 1


def test_a_hung_server_hits_the_deadline_and_is_stopped():
    actor, writers, _ = remote_actor(python_server(C4, "--hang-after 40"), 2, timeout_s=1.5)
    try:
        with pytest.raises(RemoteEnvError, match=r"(?s)server 0 .*\(instances 0-1\) has not answered for 1.5s.*"
                                                 r"stopped.*hanging on purpose"):
            actor.run(agent_steps=5000, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()


def test_a_server_that_cannot_start_is_reported_with_its_stderr():
    with pytest.raises(RemoteEnvError,
                       match=r"(?s)exited before listening.*exited with code 1.*unknown env 'no_such_env'"):
        connect(python_server("no_such_env"))


def test_an_env_error_comes_back_as_its_type_naming_the_instance_and_agent(thread_server):
    def env_fn():
        env = make_env(C4)
        step = env.step

        def step_then_fail(action):
            step(action)
            if env.agent_selection == "player_1":
                raise KeyError("boom on the server")
        env.step = step_then_fail
        return env

    env = connect(thread_server(env_fn))
    try:
        env.reset(seed=0)
        with pytest.raises(KeyError) as info:
            env.step(3)
    finally:
        env.close()
    assert isinstance(info.value, RemoteEnvError)
    assert "instance 0" in str(info.value) and "boom on the server" in str(info.value)
    assert "raise KeyError" in str(info.value.__cause__)


def test_malformed_frames_and_another_version_are_refused_by_the_server(thread_server):
    address = thread_server(lambda: make_env(C4))
    path = address[len("unix://"):]

    def exchange(data: bytes):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(data)
            kind, body = read_frame(sock, None, "test")
            if kind == Kind.WELCOME:
                kind, body = read_frame(sock, None, "test")
            assert kind == Kind.ERROR
            assert sock.recv(1) == b"", "the server closes a connection that broke the protocol"
            return json.loads(bytes(body))

    assert exchange(b"\xff\xff\xff\xff")["code"] == "malformed"
    assert "must be HELLO" in exchange(frame(Kind.STEP, b"\x00" * 8))["message"]
    refused = exchange(frame(Kind.HELLO, MAGIC + struct.pack("<HH", 99, 0)))
    assert refused["code"] == "version" and "speaks protocol version 1, the client 99" in refused["message"]
    hello = frame(Kind.HELLO, MAGIC + struct.pack("<HH", 1, 0))
    truncated = exchange(hello + frame(Kind.STEP, struct.pack("<I", 5) + b"\x00" * 3))
    assert truncated["code"] == "malformed" and "5 records" in truncated["message"]


def fake_server(tmp_path, replies):
    """A server that answers HELLO with `replies[0]`, the next request with `replies[1]`, ..."""
    path = str(tmp_path / "fake.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)

    def run():
        conn, _ = listener.accept()
        with conn:
            for reply in replies:
                try:
                    read_frame(conn, None, "fake")
                except EOFError:
                    return
                conn.sendall(reply)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return f"unix://{path}", listener, thread


def c4_welcome(version: int = 1, **changes) -> bytes:
    env = make_env(C4)
    layout = EnvLayout(env.possible_agents, {a: env.observation_space(a) for a in env.possible_agents},
                       {a: env.action_space(a) for a in env.possible_agents})
    description = {"protocol": version, "name": "fake", "max_instances": 2, **layout.describe()}
    description["layout"].update(changes)
    return json_frame(Kind.WELCOME, description, prefix=struct.pack("<H", version))


@pytest.mark.parametrize("replies, error, message", [
    ([b"\x00\x00\x00\x00"], RemoteProtocolError, r"malformed frame \(announced length 0"),
    ([c4_welcome(version=2)], RemoteProtocolError, r"speaks protocol version 2; this client speaks 1"),
    ([c4_welcome(obs_bytes=7)], RemoteSpaceError, r"obs_bytes 7 \(the spaces give 91\)"),
    ([c4_welcome(), frame(Kind.STATE, struct.pack("<I", 1) + b"\x00" * 10)], RemoteProtocolError,
     r"1 records of \d+ bytes need \d+ bytes, the frame has 10"),
    ([c4_welcome(), b"\x01\x00"], RemoteEnvError, r"closed the connection"),
], ids=["bad-length", "version", "sizes-disagree-with-spaces", "short-state", "eof-mid-frame"])
def test_a_client_refuses_what_breaks_the_protocol_without_hanging(tmp_path, replies, error, message):
    address, listener, thread = fake_server(tmp_path, replies)
    try:
        with pytest.raises(error, match=message):
            env = connect(address, timeout_s=5)
            env.reset(seed=0)
    finally:
        listener.close()
        thread.join(5)


def test_observations_that_disagree_with_the_space_are_refused_naming_the_agent(thread_server):
    def env_fn():
        env = make_env(C4)
        observe = env.observe
        env.observe = lambda agent: {**observe(agent), "observation": np.zeros((6, 7), np.int8)}
        return env

    env = connect(thread_server(env_fn))
    try:
        with pytest.raises(RemoteSpaceError, match=r"agent 'player_0': observation at 'observation': shape \(6, 7\), "
                                                   r"but the space says \(6, 7, 2\)"):
            env.reset(seed=0)
    finally:
        env.close()


def _c4_with_info(extra):
    def env_fn():
        env = make_env(C4)
        step = env.step

        def step_with_info(action):
            step(action)
            if env.agents:
                env.unwrapped.infos[env.agent_selection] = dict(extra)
        env.step = step_with_info
        return env
    return env_fn


def test_infos_cross_as_json_with_numpy_values_made_plain(thread_server):
    info = {"score": np.float32(1.5), "count": np.int64(3), "flag": np.bool_(True), "grid": np.arange(4).reshape(2, 2),
            "pair": (1, np.float64(2.5)), "nested": {"a": [np.int8(1), "x", None]}, np.int64(7): "key"}
    env = connect(thread_server(_c4_with_info(info)))
    try:
        env.reset(seed=0)
        env.step(3)
        got = env.infos[env.agent_selection]
    finally:
        env.close()
    assert got == {"score": 1.5, "count": 3, "flag": True, "grid": [[0, 1], [2, 3]], "pair": [1, 2.5],
                   "nested": {"a": [1, "x", None]}, "7": "key"}
    assert type(got["count"]) is int and type(got["flag"]) is bool


def test_an_info_value_with_no_json_form_is_refused_naming_the_agent_and_key(thread_server):
    env = connect(thread_server(_c4_with_info({"stats": {"when": object()}})))
    try:
        env.reset(seed=0)
        with pytest.raises(RemoteSpaceError, match=r"agent 'player_1': info\['stats'\]\['when'\] is builtins.object "
                                                   r".*has no JSON form"):
            env.step(3)
    finally:
        env.close()


def test_spaces_round_trip_through_json_nested_included():
    space = spaces.Dict({"a": spaces.Box(-np.inf, 1.0, (2, 3), np.float32), "b": spaces.Tuple(
        [spaces.Discrete(4, start=1), spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(5)])})
    again = space_from_json(json.loads(json.dumps(space_to_json(space))))
    assert again == space
    with pytest.raises(RemoteSpaceError, match="cannot be served"):
        space_to_json(spaces.Text(5))


# ---------------------------------------------------------------------------------------------- Node.js
NODE = shutil.which("node")
NODE_ID = f"cmd:node {Path(__file__).parents[1] / 'examples/remote_node/server.js'} --socket {{socket}} " \
          f"--instances {{instances}}"
needs_node = pytest.mark.skipif(NODE is None, reason="Node.js (`node`) is not installed: the reference server in "
                                                     "examples/remote_node/ cannot run")


@needs_node
def test_the_node_server_passes_api_test_through_connect():
    env = connect(NODE_ID)
    try:
        api_test(env, num_cycles=100)
        assert env.connection.ping() < 5
    finally:
        env.close()


@pytest.mark.slow  # 3 s
@needs_node
def test_the_node_servers_game_trains_end_to_end(tmp_path):
    """DQN on both seats over 4 copies of the JavaScript game (the sequential runner: its learners update
    inline, so a brief run surely updates them)."""
    config = pzasync.RunConfig(seed=0, envs_per_actor=4, out_dir=str(tmp_path))
    result = pzasync.SequentialRunner(NODE_ID, ("dqn", {"learning_starts": 100}), config).run(agent_steps=800)
    assert result.agent_steps >= 800 and result.episodes > 50
    assert all(result.agents[a].updates > 0 for a in ("player_0", "player_1")), result.agents
