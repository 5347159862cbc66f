"""`pzasync bench --remote` (pzasync/bench/remote.py) and its HTTP+JSON baseline (pzasync/bench/remote_http.py):
the report's shape on tiny runs (never its timings), and the baseline carrying the same messages as the binary
protocol, so that what it measures is the same work."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from click.testing import CliRunner
from test_remote import C4, FORAGE
from test_vector_actor import FIELDS, Counters, HashedPolicy, ListWriter, hashed_choice, per_copy

import pzasync
from pzasync.bench.remote import PATHS, per_frame
from pzasync.bench.remote_http import HttpConnection, HttpEnvServer
from pzasync.cli import main
from pzasync.core.collect import transitions_to_arrays
from pzasync.core.environments import EnvSpec, make_env
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
from pzasync.runtime.copies.remote import RemoteEnvs

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_remote_server_left")]


@pytest.fixture
def http_server():
    """An `HttpEnvServer` on a thread of this process: `start(env_id, instances) -> address`."""
    started = []

    def start(env_id: str, instances: int) -> str:
        server = HttpEnvServer(lambda: make_env(env_id), "tcp://127.0.0.1:0", instances)
        thread = threading.Thread(target=server.http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        return str(server.address)

    yield start
    for server, thread in started:
        server.http.shutdown()
        thread.join(5)
        server.http.server_close()
        server.env_server.close()


@pytest.mark.parametrize("env_id, copies", [(C4, 3), (FORAGE, 4)])
def test_the_http_baseline_carries_the_same_transitions_as_the_env_in_process(http_server, env_id, copies):
    """The actor over HTTP+JSON copies writes copy k's transitions exactly as a rollout seeded seed + k: the
    baseline carries the binary protocol's messages, values and all, only spelled as JSON."""
    address = http_server(env_id, copies)
    probe = make_env(env_id)
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    writers = {agent: ListWriter() for agent in layouts}
    agents = {agent: ActingAgent(agent, layout, LocalPolicy(HashedPolicy(layout)), learns=False, buffer=writers[agent],
                                 tracks=copies) for agent, layout in layouts.items()}
    actor = Actor(ActorContext(RemoteEnvs(EnvSpec.of(address), copies, 30.0, connection=HttpConnection), agents,
                               Counters()))
    try:
        taken = actor.run(agent_steps=300, seed=4, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert taken == 300
    streams = {agent: per_copy(w, copies) for agent, w in writers.items()}
    n = {a: layouts[a].action_space.n for a in layouts}
    for k in range(copies):
        decisions = sum(len(by_copy[k]) for by_copy in streams.values())
        expected = pzasync.rollout(env_id, lambda agent, obs, mask: hashed_choice(obs, mask, n[agent]),
                                   agent_steps=decisions, seed=4 + k)
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        for agent, arrays in expected.items():
            for name in FIELDS:
                if name in arrays and not isinstance(arrays[name], dict):
                    np.testing.assert_array_equal(got[agent][name], arrays[name], err_msg=f"copy {k} {agent} {name}")


@pytest.mark.slow
def test_bench_remote_reports_every_path_at_every_instance_count(tmp_path):
    """`pzasync bench ENV --remote` on a tiny run: a row per path and number of instances (in process first,
    with no server figures), the actor's comparison and the load average, in the table and the JSON report."""
    path = tmp_path / "remote.json"
    result = CliRunner().invoke(main, ["bench", FORAGE, "--remote", "--steps", "40", "--remote-repeats", "1",
                                       "--remote-instances", "1,3", "--remote-actor-copies", "2",
                                       "--remote-paths", "unix,tcp,http,paced", "--json", str(path)])
    assert result.exit_code == 0, result.output
    report = json.loads(path.read_text())
    assert (report["env"], report["steps"], report["repeats"], report["instances"]) == (FORAGE, 40, 1, [1, 3])
    assert [(r["instances"], r["path"]) for r in report["rows"]] == [(n, p) for n in (1, 3) for p in
                                                                      (*PATHS, "paced")]
    for row in report["rows"]:
        assert row["per_frame"] == (None if row["path"] == "paced" else per_frame(row["instances"]))
        assert row["wall_us"] > 0 and row["cpu_client_us"] >= 0
        remote = row["path"] != "local"
        assert (row["cpu_server_us"] is not None, row["cpu_overhead_us"] is not None) == (remote, remote)
    actor = report["actor"]
    assert actor["copies"] == 2 and actor["local_steps_per_s"] > 0 and actor["unix_steps_per_s"] > 0
    assert len(report["load_average_before"]) == len(report["load_average_after"]) == 3
    assert "over a Unix socket" in result.output and "load average" in result.output
    assert per_frame(3) == 2 and per_frame(1) == 1


@pytest.mark.slow
def test_bench_remote_compares_the_parallel_api_with_its_own_in_process_reference(tmp_path):
    """`--remote-paths parallel` with env keyword arguments: rows for the env's parallel API in process and over a
    Unix socket (its overhead against the former), and the actor on both paths."""
    path = tmp_path / "remote.json"
    result = CliRunner().invoke(main, ["bench", "mpe2.simple_spread_v3", "--env-arg", "N=4", "--remote", "--steps",
                                       "48", "--remote-repeats", "1", "--remote-instances", "2",
                                       "--remote-actor-copies", "2", "--remote-paths", "unix,parallel",
                                       "--json", str(path)])
    assert result.exit_code == 0, result.output
    report = json.loads(path.read_text())
    assert report["env_kwargs"] == {"N": 4}
    assert [r["path"] for r in report["rows"]] == ["local", "local_parallel", "unix", "parallel"]
    assert all(r["cpu_overhead_us"] is not None for r in report["rows"][2:])
    assert report["actor"]["parallel_steps_per_s"] > 0 and report["actor"]["parallel_over_aec"] > 0
    assert "through the parallel API" in result.output


def test_bench_remote_refuses_an_unknown_path_naming_the_choices():
    result = CliRunner().invoke(main, ["bench", C4, "--remote", "--remote-paths", "unix,udp"])
    assert result.exit_code == 2
    assert "unix,tcp,http,paced" in result.output and "'unix,udp'" in result.output
