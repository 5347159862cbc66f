"""Actors 1..M-1 as Ray actors on any node (RunConfig.actors with backend="ray", docs/distributed.md, "Several
actors on several nodes"): the chunk codec (default tier, no Ray), and on a simulated three-node cluster
(`ray.cluster_utils.Cluster`, loopback only): actors placed on every node, every row a learner reads checked
(counter_env.py), a version reaching every node, an actor process killed (restarted, or the run stopped with
one line), SIGTERM to the driver, and nothing left behind (no segment, no Ray process: `confined_ray`)."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from counter_env import LENGTH, CounterEnv, check_rows, is_prefix, missing
from ray_helpers import confined_ray, needs_ray, ray
from test_runners import recorded

from pzasync import AsyncRunner, RunConfig
from pzasync.backends.ray.chunks import AUTO_CHUNK_BYTES, chunk_rows, nbytes, pack, unpack
from pzasync.core.collect import rollout
from pzasync.errors import ConfigError, EnvCrashedError
from pzasync.transport.shm import list_segments

COUNTER = "counter_env:CounterEnv"


# ----------------------------------------------------------------------------------------- chunks (no Ray)
def _rows(tracks, ended, nested=False):
    """Rows whose obs is the previous next_obs of its track unless the track's previous row ended."""
    n = len(tracks)
    state: dict[int, float] = {}
    obs, nxt = np.zeros((n, 3), np.float32), np.zeros((n, 3), np.float32)
    for i, (track, end) in enumerate(zip(tracks, ended)):
        start = state.get(track, 1000.0 * track)
        obs[i], nxt[i] = start, start + 1
        state[track] = 1000.0 * track + 500 if end else start + 1
    rows = {"reward": np.arange(n, dtype=np.float32), "terminated": np.array(ended), "truncated": np.zeros(n, bool),
            "track": np.array(tracks, np.int32), "action": np.arange(n) % 3}
    if nested:
        rows.update({"obs/a": obs, "next_obs/a": nxt, "obs/b": obs[:, :1] * 2, "next_obs/b": nxt[:, :1] * 2})
    else:
        rows.update({"obs": obs, "next_obs": nxt})
    return rows


@pytest.mark.parametrize("nested", [False, True])
def test_a_chunk_sends_each_observation_once_and_unpacks_to_the_same_rows(nested):
    tracks = [0, 1, 0, 0, 1, 2, 0, 1]
    ended = [False, False, True, False, False, False, False, True]
    rows = _rows(tracks, ended, nested)
    rows[("obs/a" if nested else "obs")][6] += 7  # a row whose obs is not its track's last next_obs: sent whole
    packed = pack(rows)
    # Sent whole: each track's first row (0, 1, 5), the row after an episode's end (3), the changed one (6).
    assert np.flatnonzero(packed["obs_from"] < 0).tolist() == [0, 1, 3, 5, 6]
    back = unpack(packed)
    assert set(back) == set(rows)
    for name in rows:
        np.testing.assert_array_equal(back[name], rows[name], err_msg=name)
    assert nbytes(packed) < nbytes({"rows": rows})


def test_auto_chunks_carry_4_mib_of_rows_and_at_least_64():
    """Ray's cost per call is spread over many small rows; large rows still come 64 at a time (each track's first
    row in a chunk sends its observation whole)."""
    assert AUTO_CHUNK_BYTES == 4 << 20
    assert chunk_rows("auto", 194) == (4 << 20) // 194 == 21_620
    assert chunk_rows("auto", 329_066) == 64
    assert chunk_rows(256, 194) == 256
    RunConfig(backend="ray", ray_chunk_rows="auto").validate()
    for bad in (0, "big"):
        with pytest.raises(ConfigError, match="ray_chunk_rows"):
            RunConfig(backend="ray", ray_chunk_rows=bad).validate()


def test_ray_actor_options_are_checked_and_several_actors_are_allowed_on_ray():
    RunConfig(backend="ray", actors=3, ray_actor_pool_resources={"actor_node": 1}).validate()
    with pytest.raises(ConfigError, match="ray_max_actor_restarts"):
        RunConfig(backend="ray", actors=2, ray_max_actor_restarts=-1).validate()
    with pytest.raises(ConfigError, match="ray_actor_pool_cpus"):
        RunConfig(backend="ray", actors=2, ray_actor_pool_cpus=-1.0).validate()


def test_a_detached_plan_allocates_its_own_copy_of_the_runs_memory_elsewhere():
    """What a node's relay does with the plan it is sent: the same layouts and units, none of the driver's
    segments, a run of its own."""
    from pzasync.runtime.allocation import allocate, detached, release
    from pzasync.runtime.plan import RunPlan

    plan = RunPlan(COUNTER, "dqn", RunConfig(actors=2, backend="ray", agent_groups={"both": ["c0", "c1"]}))
    plan.allocate()
    try:
        clone = detached(plan)
        assert clone.stats is None and all(p.buffer is None and p.slot is None
                                           for p in [*clone.agents.values(), *clone.units.values()])
        clone.run_id = "0000beef"
        allocate(clone)
        try:
            group = clone.units["both"]
            assert group.buffer.shards[1].name != plan.units["both"].buffer.shards[1].name
            assert clone.agents["c1"].buffer is group.buffer and len(group.buffer.shards) == 2
            assert plan.units["both"].buffer is not None and plan.stats is not None, "the original keeps its own"
        finally:
            release(clone)
    finally:
        plan.release()


def test_the_row_check_takes_a_cut_episodes_last_row_as_truncated_not_terminated():
    """The rows these tests check end with each actor's cuts (rule 5). A cut between c0's last decision and c1's
    leaves c0's last row truncated, not terminated: the check takes it, and still refuses a row whose flag lies."""
    rows = rollout(CounterEnv(), lambda agent, obs, mask: 0, agent_steps=4 * LENGTH - 1, seed=7)["c0"]
    rows["track"] = np.zeros(len(rows["reward"]), np.int64)
    assert rows["obs"][:, 3].tolist() == [*range(LENGTH), *range(LENGTH)]
    assert rows["terminated"].tolist() == [t == LENGTH - 1 for t in range(LENGTH)] + [False] * LENGTH
    assert rows["truncated"].tolist() == [False] * (2 * LENGTH - 1) + [True]
    assert check_rows(rows, seed=7) == {0: [(e, t) for e in range(2) for t in range(LENGTH)]}
    rows["terminated"][-1] = True
    with pytest.raises(AssertionError, match="both terminated and truncated"):
        check_rows(rows, seed=7)
    rows["terminated"][-1], rows["truncated"][-1] = False, False
    with pytest.raises(AssertionError, match="terminated flag"):
        check_rows(rows, seed=7)


# ----------------------------------------------------------------------------------------- a three-node cluster
if ray is not None:
    from ray.cluster_utils import Cluster


@pytest.fixture(scope="module")
def cluster():
    """The head (the driver's node, where the learners go: 'learner_node') and three worker nodes offering one
    'actor_node' each (two for actors 1 and 2, one spare for a restart after a node is removed)."""
    with confined_ray():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                          "resources": {"learner_node": 2}})
        try:
            workers = [c.add_node(num_cpus=1, resources={"actor_node": 1}) for _ in range(3)]
            c.wait_for_nodes()
            ray.init(address=c.address, log_to_driver=False)
            yield c, workers
        finally:
            ray.shutdown()
            c.shutdown()


def _config(c, **options):
    return RunConfig(seed=7, backend="ray", ray_address=c.address, actors=3, envs_per_actor=2,
                     ray_learner_resources={"learner_node": 1}, ray_actor_pool_resources={"actor_node": 1},
                     **options)


def _runner(c, tmp_path, **options):
    return AsyncRunner(COUNTER, ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)}),
                       _config(c, **options))


def _watch_shards(runner):
    """Each unit's shards (written, dropped, cursor) just before the run's result is assembled."""
    seen: dict[str, list] = {}
    original = runner._result

    def result_then_look(*args, **kwargs):
        for unit in ("c0", "c1"):
            seen[unit] = [(s.written, s.dropped, s.read_cursor) for s in runner.plan.units[unit].buffer.shards]
        return original(*args, **kwargs)

    runner._result = result_then_look
    return seen


def _relay_runs(runner):
    return {r.segments[0] for r in runner.actor_pool.relays.values() if r.segments}


def _no_segments_left(runner, before):
    relays = _relay_runs(runner)
    left = [s for s in list_segments() if s not in before and (s[1] in relays or s[1] == runner.plan.run_id)]
    assert not left, f"segments left behind: {left}"


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_actors_on_every_node_deliver_every_row_once_to_the_learners(cluster, tmp_path):
    c, workers = cluster
    before = set(list_segments())
    runner = _runner(c, tmp_path, backpressure=True, onpolicy_buffer_batches=64)
    seen = _watch_shards(runner)
    result = runner.run(agent_steps=3_000)
    assert result.agent_steps == 3_000 and result.actors == 3

    head = ray.get_runtime_context().get_node_id()
    placed = {row["actor"]: (row["node"], row["transport"]) for row in result.actor_nodes}
    assert placed[0] == (head, "driver")
    assert placed[1][0] != placed[2][0] and {placed[1][0], placed[2][0]} <= {w.node_id for w in workers}, \
        "actors 1 and 2 on two worker nodes"
    assert placed[1][1] == placed[2][1] == "object_store"
    assert {r.learner_node for r in result.agents.values()} == {head}
    nodes = {n["node"]: n for n in runner.actor_pool.node_figures(result.actor_nodes)}
    for node in (placed[1][0], placed[2][0]):
        assert nodes[node]["policy_fetches"] >= 1 and nodes[node]["agent_steps"] > 0
    assert {n["node"] for n in result.nodes} == {head, placed[1][0], placed[2][0]}

    pool = runner.actor_pool
    for i, agent in enumerate(("c0", "c1")):
        rows = recorded(tmp_path, agent)
        assert (rows["obs"][:, 1] == i).all(), "a row of the other agent"
        tracks = check_rows(rows, seed=7)
        assert set(tracks) == set(range(6)), "rows of every copy of every actor reached the learner"
        shards = seen[agent]
        for track in range(2, 6):  # actors 1 and 2, on the worker nodes: every row, once, in order
            assert is_prefix(tracks[track]), f"track {track}: a row lost or read twice"
            assert rows["policy_version"][rows["track"] == track].max() >= 2, f"no new version reached track {track}"
        # Actor 0's shard, on the driver's node, is the local path: under backpressure nothing is dropped there
        # either (the actor waits before writing a round: test_actors.py), and nothing is missing.
        assert missing(tracks[0]) + missing(tracks[1]) == shards[0][1] == 0
        r = result.agents[agent]
        assert pool.dropped(agent) == 0 and shards[1][1] == shards[2][1] == 0
        assert r.transitions_dropped == shards[0][1]
        # Per shard: returned + dropped == cursor <= written, where "returned" is what the learner got, recorded
        # once its batch of 8 was full (a partial batch when the run stopped is read but not recorded).
        unrecorded = 0
        for k, (written, dropped, cursor) in enumerate(shards):
            returned = int(np.isin(rows["track"], [2 * k, 2 * k + 1]).sum())
            assert returned + dropped <= cursor <= written, (k, returned, dropped, cursor, written)
            unrecorded += cursor - dropped - returned
        assert unrecorded < 8
        assert r.transitions_written == sum(w for w, _d, _c in shards) + pool.dropped(agent)
        assert r.transitions_written == r.agent_steps
    _no_segments_left(runner, before)


def _kill_actor_one_when(runner, steps, killed):
    """From a thread: SIGKILL actor 1's Ray worker process once the run has taken `steps` agent steps."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pool, stats = runner.actor_pool, runner.plan.stats
        if pool is not None and stats is not None and pool.acting_since is not None and stats.total_steps > steps:
            life = pool.actors[1].life
            pid = ray.get(life.worker.pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.update(pid=pid, node=life.node)
            return
        time.sleep(0.02)


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_actor_killed_mid_run_is_restarted_and_the_run_completes(cluster, tmp_path):
    c, _workers = cluster
    before = set(list_segments())
    runner = _runner(c, tmp_path, ray_max_actor_restarts=1)
    killed: dict = {}
    killer = threading.Thread(target=_kill_actor_one_when, args=(runner, 1_500, killed))
    killer.start()
    result = runner.run(agent_steps=9_000)
    killer.join()
    assert killed, "actor 1 was killed"
    assert result.agent_steps == 9_000 and result.stopped_because == "agent-step budget reached"
    row = next(r for r in result.actor_nodes if r["actor"] == 1)
    assert row["restarts"] == 1 and len(row["nodes"]) == 2
    for agent in ("c0", "c1"):
        check_rows(recorded(tmp_path, agent), seed=7)  # no torn or misattributed row, across the restart
    _no_segments_left(runner, before)


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_actor_killed_past_its_restart_budget_stops_the_run_with_one_line(cluster, tmp_path):
    c, _workers = cluster
    before = set(list_segments())
    runner = _runner(c, tmp_path)
    killed: dict = {}
    killer = threading.Thread(target=_kill_actor_one_when, args=(runner, 1_500, killed))
    killer.start()
    with pytest.raises(EnvCrashedError) as info:
        runner.run(seconds=120)
    killer.join()
    message = str(info.value)
    assert message.startswith(f"actor 1 (Ray actor on node {killed['node'][:12]}) died (") and "\n" not in message
    assert "ray_max_actor_restarts=0" in message
    _no_segments_left(runner, before)


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum, reason", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "interrupted (SIGINT)")],
                         ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_to_the_driver_stops_every_nodes_actors(cluster, tmp_path, signum, reason):
    c, _workers = cluster
    before = set(list_segments())
    runner = _runner(c, tmp_path)
    seen = _watch_shards(runner)

    def send():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stats = runner.plan.stats
            if runner.actor_pool is not None and runner.actor_pool.acting_since and stats is not None \
                    and stats.total_steps > 1_000:
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.02)

    sender = threading.Thread(target=send)
    sender.start()
    result = runner.run(seconds=240)
    sender.join()
    assert result.stopped_because == reason
    pool = runner.actor_pool
    assert set(pool.done) == {1, 2} and len(result.actor_processes) == 2, "every node's actor stopped and reported"
    assert all(life.over for a in pool.actors.values() for life in a.lives)
    for agent in ("c0", "c1"):  # stopped mid-flight: what the actors wrote reached a shard, or is counted dropped
        assert result.agents[agent].transitions_written == sum(w for w, _d, _c in seen[agent]) + pool.dropped(agent)
    _no_segments_left(runner, before)


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_removing_an_actors_node_restarts_it_on_another_and_counts_what_was_lost(cluster, tmp_path):
    """Last in this module: it removes a node of the module's cluster."""
    c, workers = cluster
    before = set(list_segments())
    runner = _runner(c, tmp_path, ray_max_actor_restarts=1)
    seen = _watch_shards(runner)
    removed: dict = {}

    def remove_actor_ones_node():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pool, stats = runner.actor_pool, runner.plan.stats
            if pool is not None and stats is not None and pool.acting_since is not None and stats.total_steps > 1_500:
                node = pool.actors[1].life.node
                c.remove_node(next(w for w in workers if w.node_id == node), allow_graceful=False)
                removed["node"] = node
                return
            time.sleep(0.02)

    remover = threading.Thread(target=remove_actor_ones_node)
    remover.start()
    result = runner.run(agent_steps=9_000)
    remover.join()
    assert removed, "actor 1's node was removed"
    assert result.agent_steps == 9_000 and result.stopped_because == "agent-step budget reached"
    row = next(r for r in result.actor_nodes if r["actor"] == 1)
    pool = runner.actor_pool
    # On loopback a removed node's processes can outlive it (the raylet goes, the workers may not): actor 1 then
    # either died and came back on the spare node, or finished its budget there (its relay found unreachable,
    # its rows there lost and counted; or still reachable). Killing a process (above) always restarts.
    first = pool.actors[1].lives[0]
    outcome = (row["restarts"], first.reported, pool.relays[removed["node"]].dead)
    assert (row["restarts"] == 1 and row["nodes"][0] == removed["node"] != row["node"]) or \
        (row["restarts"] == 0 and first.reported), outcome
    for agent in ("c0", "c1"):
        check_rows(recorded(tmp_path, agent), seed=7)  # no torn or misattributed row, across the node's loss
        # What reached the shards here, plus what the nodes overwrote or lost with the removed one, is what the
        # actors wrote (the dead life's share as of its last report).
        r = result.agents[agent]
        assert r.transitions_dropped >= pool.dropped(agent) >= 0
        slack = 0 if row["restarts"] == 0 else 600  # a life that died counts what it wrote as of its last report
        assert abs(r.transitions_written - sum(w for w, _d, _c in seen[agent]) - pool.dropped(agent)) <= slack
    _no_segments_left(runner, before)

