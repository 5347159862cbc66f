"""The Ray backend on a simulated multi-node cluster (`ray.cluster_utils.Cluster`, loopback only): learners
placed on nodes other than the actor's, and a learner's node removed mid-run."""

from __future__ import annotations

import threading
import time

import pytest
from ray_helpers import confined_ray, needs_ray, ray
from test_ray_backend import C4, _check_exactly_once, _expected

from pzasync import AsyncRunner, RunConfig

if ray is not None:
    from ray.cluster_utils import Cluster

pytestmark = [needs_ray, pytest.mark.slow]


@pytest.fixture
def cluster():
    """A head node (the driver's) and two worker nodes offering the custom resource 'learner_node'; the second
    also offers 'actor_node'."""
    with confined_ray():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            workers = [c.add_node(num_cpus=2, resources={"learner_node": 1, **({"actor_node": 1} if i else {})})
                       for i in range(2)]
            c.wait_for_nodes()
            ray.init(address=c.address, log_to_driver=False)
            yield c, workers
        finally:
            ray.shutdown()
            c.shutdown()


@pytest.mark.timeout(240)
def test_learners_on_other_nodes_get_every_transition_once(cluster, tmp_path):
    c, workers = cluster
    steps, seed = 600, 5
    config = RunConfig(seed=seed, backend="ray", ray_address=c.address, backpressure=True,
                       ray_learner_resources={"learner_node": 1})
    result = AsyncRunner(C4, ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)}), config).run(
        agent_steps=steps)
    head = ray.get_runtime_context().get_node_id()
    nodes = {r.learner_node for r in result.agents.values()}
    assert head not in nodes and len(nodes) == 2, "one learner on each worker node, none on the actor's"
    assert {r.learner_transport for r in result.agents.values()} == {"object_store"}
    _check_exactly_once(result, tmp_path, _expected(steps, seed))


@pytest.mark.timeout(240)
def test_removing_a_learners_node_mid_run_restarts_it_elsewhere(cluster):
    c, workers = cluster
    config = RunConfig(seed=0, backend="ray", ray_address=c.address, ray_learner_resources={"learner_node": 1},
                       restart_backoff_s=0.1, heartbeat_timeout_s=10)
    runner = AsyncRunner(C4, {"player_0": ("dqn", {"learning_starts": 100}), "player_1": "random"}, config)
    removed = []

    def remove_learner_node():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            host, actor = runner.host, runner.actor
            if host is not None and actor is not None and "player_0" in host.learners and actor.total_steps > 2000:
                break
            time.sleep(0.05)
        learner_node = runner.host.learners["player_0"].node
        victim = next(w for w in workers if w.node_id == learner_node)
        c.remove_node(victim, allow_graceful=False)
        removed.append(victim.node_id)

    killer = threading.Thread(target=remove_learner_node)
    killer.start()
    result = runner.run(seconds=20)
    killer.join()
    r = result.agents["player_0"]
    assert removed, "the learner's node was removed"
    assert r.restarts == 1 and "the learner actor died" in r.error
    assert r.learner_node != removed[0], "restarted on the other node"
    # Trained on after the restart (a fresh Ray worker imports torch first: 42 updates on a loaded 2-core machine)
    assert r.updates > 30 and r.published_version > 2
    assert result.stopped_because == "time budget reached" and result.agent_steps > 4000




@pytest.mark.timeout(240)
def test_the_actor_itself_can_run_on_another_node_beside_one_of_its_learners(cluster, tmp_path):
    """ray_actor_resources: the whole run goes to the worker node offering 'actor_node'. Of its two learners
    (one per worker node), the one on the actor's node uses shared memory, the other the object store, and
    both still read exactly the actor's transitions."""
    c, workers = cluster
    steps, seed = 600, 9
    config = RunConfig(seed=seed, backend="ray", ray_address=c.address, backpressure=True,
                       ray_learner_resources={"learner_node": 1}, ray_actor_resources={"actor_node": 1})
    result = AsyncRunner(C4, ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)}), config).run(
        agent_steps=steps)
    assert result.actor_node == workers[1].node_id, "the actor ran on the node offering 'actor_node'"
    by_transport = {r.learner_transport: r.learner_node for r in result.agents.values()}
    assert by_transport == {"shm": workers[1].node_id, "object_store": workers[0].node_id}
    _check_exactly_once(result, tmp_path, _expected(steps, seed))
