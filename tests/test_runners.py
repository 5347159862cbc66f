"""Runners (docs/running.md) with plug-in learners: batches, invariants 4 (docs/transitions.md) and 5
(docs/reliability.md), errors, run directories."""

from __future__ import annotations

import dataclasses
import glob
import json
import os

import numpy as np
import pytest
from custom_learners import FirstLegalPolicy
from ray_helpers import RayAsyncRunner, needs_ray

import pzasync
from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.errors import ConfigError, LearnerCrashedError, LearnerStartupError

C4 = "pettingzoo.classic.connect_four_v3"
RUNNERS = [AsyncRunner, SequentialRunner]
#: The async runner on the Ray backend (a local Ray instance per run, seconds to start): with `-m slow`.
ON_RAY = pytest.param(RayAsyncRunner, marks=[pytest.mark.slow, needs_ray], id="RayAsyncRunner")
#: For the heaviest runner tests: the sequential variant (same code paths, inline) runs with `-m slow` only.
ASYNC_FAST_SEQUENTIAL_SLOW = [AsyncRunner,
                              pytest.param(SequentialRunner, marks=pytest.mark.slow, id="SequentialRunner"), ON_RAY]


def recorded(record_dir, agent):
    files = sorted(glob.glob(os.path.join(record_dir, f"{agent}-*.npz")))
    parts = [dict(np.load(f)) for f in files]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", [*RUNNERS, ON_RAY], ids=lambda r: r.__name__)
def test_custom_learner_by_dotted_path_gets_documented_keys(runner, tmp_path):
    result = runner(C4, ("custom_learners:KeysLearner", {"record_dir": str(tmp_path)}), RunConfig(seed=1)).run(
        agent_steps=300)
    assert result.agents["player_0"].updates > 0
    lines = (tmp_path / "player_0-keys.txt").read_text().splitlines()
    keys = {line.split()[0]: line.split(" ", 2)[1:] for line in lines}
    assert set(keys) == {"obs", "action", "reward", "next_obs", "terminated", "truncated", "action_mask",
                         "next_action_mask", "policy_version", "score"}
    assert keys["obs"] == ["int8", "(4, 6, 7, 2)"] and keys["action_mask"] == ["bool", "(4, 7)"]
    assert keys["score"][0] == "float32" and keys["policy_version"][0] == "int64"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", [*RUNNERS, ON_RAY], ids=lambda r: r.__name__)
def test_actor_transitions_equal_rollout(runner, tmp_path):
    """Invariant 4 (docs/transitions.md): with a deterministic policy and seed, the learner receives exactly
    rollout's transitions."""
    steps = 600
    config = RunConfig(seed=11, backpressure=True)
    result = runner(C4, ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)}), config).run(
        agent_steps=steps)
    policy = FirstLegalPolicy()
    expected = pzasync.rollout(C4, lambda a, o, m: int(policy.act({"obs": o[None]}, m[None], False)[0][0]),
                               agent_steps=steps, seed=11)
    for agent in ("player_0", "player_1"):
        got = recorded(tmp_path, agent)
        n = len(got["reward"])
        assert n >= 200, f"too little reached the learner of {agent}: {n}"
        assert result.agents[agent].transitions_dropped == 0, "backpressure must prevent overwrites"
        for key in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "action_mask",
                    "next_action_mask"):
            np.testing.assert_array_equal(got[key], expected[agent][key][:n], err_msg=f"{agent} {key}")
        assert (np.diff(got["policy_version"]) >= 0).all() and got["policy_version"].min() >= 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_actor_keeps_stepping_while_a_learner_sleeps(tmp_path):
    """Invariant 5 (docs/reliability.md): a learner stuck in update() for seconds does not slow the actor down.
    Each learner in its own host process: learners that share a host take turns, so a stuck one holds up its
    host-mates (docs/running.md, Learner hosts)."""
    sleep_s = 4.0
    learners = {"player_0": ("custom_learners:RecordingLearner", {"sleep_s": sleep_s}),
                "player_1": ("custom_learners:RecordingLearner", {})}
    # process_timeout_s is both the start-up barrier (two learner processes importing torch: over 5 s on a slow,
    # loaded 2-core machine) and how long the stop waits for the sleeping learner before terminating it; so the
    # claim is checked on acting time, which excludes both. The 3000 steps took 0.2-0.5 s of acting on a loaded
    # 2-core machine (2026-11-25), so one 4 s sleep outlasts them many times over; the stop then waits out the
    # rest of that sleep (a 30 s sleep made it wait the whole process_timeout_s).
    config = RunConfig(seed=0, process_timeout_s=15, learner_processes=2)
    result = AsyncRunner(C4, learners, config).run(agent_steps=3000)
    assert result.agent_steps == 3000 and result.agents["player_0"].agent_steps > 1000
    assert result.agents["player_0"].updates <= 1, "the sleeping learner finished no more than one update"
    assert result.agents["player_1"].updates > 50
    assert result.acting_seconds < sleep_s, f"the actor did not wait for the sleeping learner ({sleep_s:g} s an update)"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", ASYNC_FAST_SEQUENTIAL_SLOW, ids=lambda r: getattr(r, "__name__", r))
def test_crashed_learner_is_reported_restarted_and_the_actor_carries_on(runner, capfd, tmp_path):
    marker = str(tmp_path / "crashed-once")
    learners = {"player_0": ("custom_learners:RecordingLearner", {"raise_after": 3, "once_file": marker}),
                "player_1": ("custom_learners:RecordingLearner", {})}
    # 20 s on Ray (after Ray is up, ray_helpers.RayAsyncRunner): starting a learner there (a new actor) and
    # restarting it take seconds each on 2 cores. With 6 s the Ray variant ended at 3 updates, below the bar, in
    # about half its runs (2026-11-25: 6 of 14); 10 s held here but not on a slower CI machine (31 agent steps).
    # 4 s otherwise: the async runner's restarted learner made about 1800 updates in 6 s on a loaded 2-core
    # machine (2026-11-25), with 35,000 agent steps, where the test asks for 20 and 5,000.
    seconds = 20 if runner is RayAsyncRunner else 4
    result = runner(C4, learners, RunConfig(seed=0, restart_backoff_s=0.05)).run(seconds=seconds)
    err = capfd.readouterr().err
    assert result.stopped_because == "time budget reached" and result.agent_steps > 5_000
    crashed = result.agents["player_0"]
    assert crashed.error == "RuntimeError: deliberate failure in update 4" and crashed.restarts == 1
    assert crashed.updates > 20, "the restarted learner trains on"
    assert crashed.published_version > 2, "and publishes again"
    assert err.count("Traceback") == 1 and "deliberate failure in update 4" in err
    assert "restarting the learner of agent 'player_0' from its last published weights" in err or runner is \
        SequentialRunner
    assert result.agents["player_1"].error is None and result.agents["player_1"].restarts == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", [*RUNNERS, ON_RAY], ids=lambda r: r.__name__)
def test_a_learner_that_keeps_crashing_stops_the_run_with_a_clear_error(runner, capfd):
    learners = {"player_0": ("custom_learners:RecordingLearner", {"raise_after": 0}), "player_1": "random"}
    config = RunConfig(seed=0, max_learner_restarts=2, restart_backoff_s=0.05)
    with pytest.raises(LearnerCrashedError,
                       match=r"the learner of agent 'player_0' failed 3 times \(restart budget "
                             r"max_learner_restarts=2\); last failure: RuntimeError: deliberate") as info:
        # The run ends at the third crash. The budget is only a backstop: on Ray a restarted learner takes
        # seconds to start on 2 cores, and with 100,000 steps the actor finished before the third crash.
        runner(C4, learners, config).run(agent_steps=2_000_000)
    assert isinstance(info.value, RuntimeError), "raised again as the learner's own exception type"
    assert "in update" in str(info.value.__cause__) and "custom_learners.py" in str(info.value.__cause__), \
        "with the learner's own traceback as its cause"
    assert info.value.result.agents["player_0"].restarts == 2
    assert capfd.readouterr().err.count("Traceback") == 1, "one full traceback, then one line per crash"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", [AsyncRunner, SequentialRunner, ON_RAY], ids=lambda r: getattr(r, "__name__", r))
def test_a_learner_that_cannot_be_built_stops_the_run_before_acting(runner):
    learners = {"player_0": "custom_learners:BrokenLearner", "player_1": "random"}
    run = runner(C4, learners, RunConfig(seed=0))
    with pytest.raises(Exception, match="deliberate failure while building the learner") as info:
        run.run(agent_steps=1000)
    assert run.actor is None, "no actor was built"
    if runner is not SequentialRunner:  # inline learners are built in this process: their own error surfaces
        assert isinstance(info.value, LearnerStartupError)
        assert "learner of agent 'player_0' failed to start: RuntimeError: deliberate" in str(info.value)


@pytest.mark.slow  # the default run covers a host process that dies: test_learner_hosts.py
@pytest.mark.timeout(120)
def test_a_learner_process_that_dies_is_restarted(tmp_path, capfd):
    marker = str(tmp_path / "died-once")
    learners = {"player_0": ("custom_learners:RecordingLearner", {"kill_self_after": 2, "once_file": marker}),
                "player_1": "random"}
    result = AsyncRunner(C4, learners, RunConfig(seed=0, restart_backoff_s=0.05)).run(seconds=8)
    died = result.agents["player_0"]
    assert died.restarts == 1 and died.error == "the learner process died (exit code -9)"
    assert died.updates > 5
    assert "died (exit code -9)" in capfd.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_hung_learner_is_killed_and_restarted(tmp_path, capfd):
    marker = str(tmp_path / "hung-once")
    learners = {"player_0": ("custom_learners:RecordingLearner", {"sleep_s": 60.0, "once_file": marker}),
                "player_1": "random"}
    # A 2 s heartbeat and a 9 s run. A restarted learner is held to process_timeout_s, not to the heartbeat,
    # until its new process runs (runtime/hosts.py), so a slow start (a spawned one imports torch, over 2 s on a
    # slow, loaded 2-core machine) does not get it killed again; spawned, a 7 s run left it no time to train on
    # there (2026-11-25). Forked from the fork server (runtime/processes.py) it starts in tens of milliseconds.
    config = RunConfig(seed=0, heartbeat_timeout_s=2.0, restart_backoff_s=0.05)
    result = AsyncRunner(C4, learners, config).run(seconds=9)
    hung = result.agents["player_0"]
    assert hung.restarts == 1 and "no heartbeat" in hung.error
    assert hung.updates > 5, "the restarted learner trains on"
    assert "hung" in capfd.readouterr().err


@pytest.mark.parametrize(
    "learners, message",
    [
        ("dqm", r"agent 'player_0': unknown learner 'dqm'; known learners: bc, dqn, fixed, mappo, negamax, one_ply, "
                r"perfect, ppo, random.*Did you mean 'dqn'"),
        ({"player_9": "random", "*": "random"}, r"learners given for unknown agent\(s\) \['player_9'\]"),
        ({"player_0": "random"}, r"no learner for agent\(s\) \['player_1'\]"),
        ("custom_learners:Nope", r"agent 'player_0': module 'custom_learners' has no learner class 'Nope'"),
        ("no_such_module_xyz:Learner", r"agent 'player_0': learner 'no_such_module_xyz:Learner' failed to import: "
                                       r"ModuleNotFoundError"),
        (("custom_learners:RecordingLearner", {"bogus": 1}), r"agent 'player_0': learner RecordingLearner has no "
                                                             r"option\(s\) \['bogus'\]"),
    ],
)
def test_bad_learner_specs_fail_before_anything_starts(learners, message):
    with pytest.raises(ConfigError, match=message):
        AsyncRunner(C4, learners, RunConfig())


@pytest.mark.parametrize(
    "options, message",
    [
        ({"publish_every": 0}, r"option publish_every=0: must be an integer >= 1"),
        ({"publish_mode": "triple"}, r"option publish_mode='triple': must be one of"),
        ({"replay_ratio": -1.0}, r"option replay_ratio=-1.0: must be a positive number"),
        ({"device": "tpu"}, r"option device for agent '\*': 'tpu' is not"),
        ({"backend": "dask"}, r"option backend='dask': must be one of \('shm', 'ray'\)"),
        ({"ray_actor_resources": {"a": 1}}, r"option ray_actor_resources=\{'a': 1\}: places the actor on a Ray "
                                            r"cluster: it needs backend='ray'"),
        ({"backend": "ray", "ray_transport": "tcp"}, r"option ray_transport='tcp': must be 'auto' or 'object_store'"),
    ],
)
def test_out_of_range_options_are_named(options, message):
    with pytest.raises(ConfigError, match=message):
        AsyncRunner(C4, "random", RunConfig(**options))


@pytest.mark.timeout(120)
def test_run_directory_holds_metrics_checkpoints_result_and_plot(tmp_path):
    learners = ("custom_learners:RecordingLearner", {})
    result = SequentialRunner(C4, learners, RunConfig(seed=0, out_dir=str(tmp_path))).run(agent_steps=500)
    run_dir = result.run_dir
    assert run_dir and os.path.isdir(run_dir)
    for name in ("run.json", "result.json", "episodes.jsonl", "returns.png", "checkpoints/player_0.pt"):
        assert os.path.exists(os.path.join(run_dir, name)), name
    saved = json.load(open(os.path.join(run_dir, "result.json")))
    assert saved["agent_steps"] == 500 and saved["agents"]["player_1"]["updates"] == result.agents["player_1"].updates
    episodes = [json.loads(line) for line in open(os.path.join(run_dir, "episodes.jsonl"))]
    assert len(episodes) == result.episodes and set(episodes[0]["returns"]) == {"player_0", "player_1"}


@pytest.mark.timeout(120)
def test_async_and_sequential_random_players_play_identical_episodes():
    results = [runner("pettingzoo.classic.tictactoe_v3", "random", RunConfig(seed=21)).run(agent_steps=3000)
               for runner in RUNNERS]
    a, s = results
    assert a.episodes == s.episodes > 100
    for agent in ("player_1", "player_2"):
        assert a.agents[agent].episode_returns == s.agents[agent].episode_returns
    other_seed = SequentialRunner("pettingzoo.classic.tictactoe_v3", "random", RunConfig(seed=22)).run(agent_steps=3000)
    assert other_seed.agents["player_1"].episode_returns != s.agents["player_1"].episode_returns


@pytest.mark.slow  # DQN and PPO side by side: test_compat trains each, test_ray_backend both in one run
@pytest.mark.timeout(180)
@pytest.mark.parametrize("runner", ASYNC_FAST_SEQUENTIAL_SLOW, ids=lambda r: getattr(r, "__name__", r))
def test_heterogeneous_learners_in_one_run(runner):
    learners = {"player_0": ("dqn", {"learning_starts": 200}), "player_1": ("ppo", {"batch_size": 256})}
    result = runner(C4, learners, RunConfig(seed=0, replay_ratio=0.25)).run(agent_steps=4000)
    dqn, ppo = result.agents["player_0"], result.agents["player_1"]
    assert dqn.learner == "dqn" and ppo.learner == "ppo"
    assert dqn.error is None and ppo.error is None
    assert dqn.updates > 100 and "loss" in dqn.last_metrics
    assert ppo.updates >= 3 and "approx_kl" in ppo.last_metrics
    assert dqn.published_version >= 10
    assert ppo.published_version == ppo.updates + 1, "on-policy learners publish after every update"


class RemoteRayRunner(RayAsyncRunner):
    """The Ray backend with its learners' data through the object store, as on another node: the run's
    progress reaches the learner through its status calls, not the shared counters."""

    def __init__(self, env, learners, config=None):
        super().__init__(env, learners, dataclasses.replace(config or RunConfig(), ray_transport="object_store"))


#: The default run keeps one combination (about 5 s); the others take 6-7 s each on 2 cores: with `-m slow`.
LR_SCHEDULE_CASES = [
    pytest.param(runner, budget, id=f"{budget}-{getattr(runner, '__name__', runner)}",
                 marks=[] if (runner, budget) == (AsyncRunner, "agent_steps") else
                 [pytest.mark.slow, *([needs_ray] if runner is RemoteRayRunner else [])])
    for budget in ("agent_steps", "seconds") for runner in (*RUNNERS, RemoteRayRunner)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("runner, budget", LR_SCHEDULE_CASES)
def test_a_linear_lr_schedule_follows_the_runs_budget(tmp_path, runner, budget):
    """The learner reads how much of the run's budget is spent (steps or seconds) before each update: its
    learning rate falls from lr towards 0 through the run, and never rises."""
    learners = {"player_1": ("ppo", {"lr": 1e-3, "lr_schedule": "linear", "batch_size": 64}), "player_2": "random"}
    run = runner("pettingzoo.classic.tictactoe_v3", learners, RunConfig(seed=0, out_dir=str(tmp_path)))
    # 15 s on Ray: its learner actor takes seconds to start (0 updates in 6 s on a slow CI machine, 2026-11-28).
    seconds = 15.0 if runner is RemoteRayRunner else 6.0
    result = run.run(agent_steps=6000) if budget == "agent_steps" else run.run(seconds=seconds)
    ppo = result.agents["player_1"]
    assert ppo.error is None and ppo.updates >= 5
    assert 0.0 <= ppo.last_metrics["lr"] < 0.7e-3, "the last update came late in the run, at a lower rate"
    if runner is SequentialRunner:
        return  # its inline learners' reports feed the live table, not metrics.jsonl
    with open(os.path.join(result.run_dir, "metrics.jsonl")) as f:
        rates = [row["metrics"]["lr"] for row in map(json.loads, f)
                 if row.get("agent") == "player_1" and "lr" in row.get("metrics", {})]
    assert len(rates) >= 2 and rates == sorted(rates, reverse=True) and rates[0] > rates[-1]


@pytest.mark.slow  # 5 s
@pytest.mark.timeout(180)
def test_a_run_resumes_from_its_directory(tmp_path):
    learners = {"player_0": ("dqn", {"learning_starts": 100, "epsilon_decay_steps": 4000}), "player_1": "random"}
    first = SequentialRunner(C4, learners, RunConfig(seed=0, out_dir=str(tmp_path))).run(agent_steps=1500)
    resumed_runner = SequentialRunner.resume(first.run_dir)
    acting = resumed_runner._acting_agents()
    assert acting["player_0"].count.steps == first.agents["player_0"].agent_steps
    assert acting["player_0"].policy.epsilon < 1.0, "exploration continues where it stopped"
    second = resumed_runner.run(agent_steps=1000)
    assert second.run_dir == first.run_dir
    total = lambda r: r.agents["player_0"].agent_steps + r.agents["player_1"].agent_steps  # noqa: E731
    assert total(second) == total(first) + 1000, "agent-step counts continue"
    assert second.agents["player_0"].updates > first.agents["player_0"].updates
    episodes = [json.loads(line) for line in open(os.path.join(first.run_dir, "episodes.jsonl"))]
    assert len(episodes) == first.episodes + second.episodes, "logs are appended to"
