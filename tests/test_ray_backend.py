"""The Ray backend (docs/distributed.md) on one local Ray instance: learners as Ray actors on the actor's node,
on shared memory or (`ray_transport="object_store"`) through the object store as if on another node.
tests/test_ray_cluster.py runs the multi-node cases on a simulated cluster.

Every test confines Ray's temp dir to a directory it owns (RAY_TMPDIR; the auth token is the session's, made by
conftest.py in its own temp dir) and checks that
the directory is removed and no Ray process is left running afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest
from custom_learners import FirstLegalPolicy
from ray_helpers import confined_ray, needs_ray, ray
from test_runners import recorded

import pzasync
from pzasync import AsyncRunner, RunConfig
from pzasync.errors import ConfigError, LearnerCrashedError

C4 = "pettingzoo.classic.connect_four_v3"


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module's tests (starting one costs seconds)."""
    with confined_ray() as root:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield root


def _expected(steps: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    policy = FirstLegalPolicy()
    return pzasync.rollout(C4, lambda a, o, m: int(policy.act({"obs": o[None]}, m[None], False)[0][0]),
                           agent_steps=steps, seed=seed)


def _check_exactly_once(result, record_dir, expected):
    """What each learner read is, in order, exactly the actor's transitions of its agent, none twice: with no
    drops a prefix of rollout's; delivered + dropped + still in transit == written."""
    for agent in ("player_0", "player_1"):
        got = recorded(record_dir, agent)
        r = result.agents[agent]
        n = len(got["reward"])
        assert n >= 100, f"too little reached the learner of {agent}: {n}"
        assert r.transitions_dropped == 0, "backpressure and a fast learner: nothing may be lost"
        for key in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "action_mask",
                    "next_action_mask"):
            np.testing.assert_array_equal(got[key], expected[agent][key][:n], err_msg=f"{agent} {key}")
        assert np.isclose(got["reward"].sum(), expected[agent]["reward"][:n].sum()), "rewards conserved"
        assert n <= r.transitions_written
        assert (np.diff(got["policy_version"]) >= 0).all() and got["policy_version"].min() >= 1


@needs_ray
@pytest.mark.timeout(180)
@pytest.mark.slow  # Ray takes 5 s to start on 2 cores, and 7 s more for this test
@pytest.mark.parametrize("transport", ["auto", "object_store"])
def test_ray_learners_get_the_actors_transitions_exactly_once_in_order(transport, local_ray, tmp_path):
    steps, seed = 600, 11
    config = RunConfig(seed=seed, backend="ray", ray_transport=transport, backpressure=True)
    result = AsyncRunner(C4, ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)}), config).run(
        agent_steps=steps)
    assert result.learner_host == "ray" and result.agent_steps == steps
    want = "shm" if transport == "auto" else "object_store"
    assert {r.learner_transport for r in result.agents.values()} == {want}
    assert all(r.published_version > 1 for r in result.agents.values()), "policies came back to the actor"
    _check_exactly_once(result, tmp_path, _expected(steps, seed))


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dqn_and_ppo_train_through_the_object_store(local_ray):
    config = RunConfig(seed=0, backend="ray", ray_transport="object_store", replay_ratio=0.25)
    result = AsyncRunner(C4, {"player_0": ("dqn", {"learning_starts": 200}), "player_1": ("ppo", {"batch_size": 256})},
                         config).run(agent_steps=4000)
    dqn, ppo = result.agents["player_0"], result.agents["player_1"]
    assert dqn.error is None and ppo.error is None
    assert dqn.updates >= 0.25 * (dqn.agent_steps - 200) * 0.8, "the replay ratio holds across the object store"
    assert ppo.updates >= 2 and ppo.published_version >= 2
    assert dqn.policy_lag_mean >= 0 and dqn.published_version > 1


@needs_ray
@pytest.mark.slow  # the shared-memory variant runs by default (test_runners); this one with -m slow
@pytest.mark.timeout(180)
def test_a_ray_learner_that_raises_is_restarted_then_ends_the_run_with_its_own_error_type(local_ray, capfd):
    learners = {"player_0": ("custom_learners:RecordingLearner", {"raise_after": 0}), "player_1": "random"}
    config = RunConfig(seed=0, backend="ray", max_learner_restarts=1, restart_backoff_s=0.05)
    with pytest.raises(LearnerCrashedError, match=r"failed 2 times \(restart budget max_learner_restarts=1\); "
                                                  r"last failure: RuntimeError: deliberate") as info:
        AsyncRunner(C4, learners, config).run(agent_steps=200_000)
    assert isinstance(info.value, RuntimeError), "raised again as the learner's own type"
    assert "deliberate failure" in str(info.value.__cause__), "with the learner's traceback"
    assert info.value.result.agents["player_0"].restarts == 1
    assert "restarting the learner of agent 'player_0'" in capfd.readouterr().err


def test_a_missing_ray_is_one_line_with_the_install_command(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r'^option backend="ray" needs Ray, which is not installed: '
                                          r'pip install "pzasync\[ray\]"$'):
        AsyncRunner(C4, "random", RunConfig(backend="ray"))
