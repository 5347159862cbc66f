"""`pzasync bench`: its figures are computed from what it measured, its JSON follows the documented schema,
and it runs end to end on a tiny budget."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch

from pzasync import RunConfig, SequentialRunner
from pzasync.bench.harness import (
    BenchSettings,
    TrialSpec,
    headline,
    plan_trials,
    rescore,
    run_bench,
    run_trial,
    run_trial_in_fresh_process,
    summarize_trials,
    time_to_target,
)
from pzasync.errors import ConfigError

SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "bench-schema.json").read_text())
C4 = "pettingzoo.classic.connect_four_v3"
VS_RANDOM = {"player_0": "dqn", "player_1": "random"}


def fake_trial(config: str, seed: int, rate: float, reached_s: float | None = None, updates: float = 0.0) -> dict:
    """A trial as the bench records it, with figures chosen by the test."""
    trial = {
        "config": config, "seed": seed, "agent_steps": 1000, "wall_seconds": 1000 / rate + 1,
        "startup_seconds": 1.0, "acting_seconds": 1000 / rate, "agent_steps_per_s": rate,
        "updates_per_s": {"p0": updates}, "updates_per_agent_step": {"p0": updates / rate},
        "policy_lag_mean": {"p0": 3.0}, "policy_lag_p95": {"p0": 7.0}, "actor_wait_s": {"p0": 0.0},
        "processes": [{"name": "runner (actor)", "cpu_seconds": 1.0, "cpu_fraction": 0.5, "peak_rss_mb": 100.0}],
        "shm_bytes": 4096, "stopped_because": "agent-step budget reached",
    }
    if config not in ("bare_random", "bare_policy", "async_idle"):
        trial["curve"] = [{"agent_steps": 10, "seconds": 0.1, "updates": {"p0": 0}, "scores": {"p0": 0.1}}]
        trial["target_reached"] = None if reached_s is None else {"seconds": reached_s, "agent_steps": 500,
                                                                  "updates": {"p0": 100}}
    return trial


def test_time_to_target_is_the_first_point_where_every_learning_agent_reaches_it():
    curve = [
        {"agent_steps": 0, "seconds": 0.0, "updates": {}, "scores": {"a": 0.2, "b": 0.9}},
        {"agent_steps": 100, "seconds": 1.5, "updates": {}, "scores": {"a": 0.95, "b": 0.7}},
        {"agent_steps": 200, "seconds": 3.0, "updates": {"a": 7}, "scores": {"a": 0.96, "b": 0.95}},
        {"agent_steps": 300, "seconds": 4.5, "updates": {}, "scores": {"a": 0.99, "b": 0.99}},
    ]
    assert time_to_target(curve, 0.95) == {"seconds": 3.0, "agent_steps": 200, "updates": {"a": 7}}
    assert time_to_target(curve, 0.999) is None


def test_a_target_window_needs_the_score_held_not_one_lucky_evaluation():
    scores = [0.5, 0.93, 0.80, 0.91, 0.93, 0.94, 0.92]
    curve = [{"agent_steps": 10 * i, "seconds": float(i), "updates": {}, "scores": {"a": s}}
             for i, s in enumerate(scores)]
    assert time_to_target(curve, 0.92)["seconds"] == 1.0  # the lucky spike
    # Means of three from each point: .743 .880 .880 .927 ...: first at index 3.
    assert time_to_target(curve, 0.92, window=3)["seconds"] == 3.0
    assert time_to_target(curve, 0.935, window=3) is None  # the last full window (.93 .94 .92) averages .93


def test_rescore_recomputes_time_to_target_from_the_stored_curves():
    curve = [{"agent_steps": 100 * i, "seconds": float(i), "updates": {}, "scores": {"p0": s}}
             for i, s in enumerate([0.1, 0.6, 0.9, 0.95])]
    trials = [dict(fake_trial(c, 0, r), curve=curve) for c, r in (("sequential", 1000), ("async_double_buffer", 2000))]
    report = {"settings": {"target": 0.5, "target_window": 1}, "trials": trials, "summary": {}, "headline": {}}
    again = rescore(report, target=0.92, window=2)
    assert again["settings"]["target"] == 0.92 and report["settings"]["target"] == 0.5  # a copy
    assert [t["target_reached"]["agent_steps"] for t in again["trials"]] == [200, 200]  # (0.9+0.95)/2 >= 0.92
    assert again["summary"]["sequential"]["time_to_target"]["seconds"]["median"] == 2.0


def test_headline_ratios_come_from_the_measured_medians():
    trials = [fake_trial("bare_random", s, r) for s, r in enumerate([9000, 10000, 11000])]
    trials += [fake_trial("bare_policy", s, r) for s, r in enumerate([4000, 5000, 6000])]
    trials += [fake_trial("async_idle", s, r) for s, r in enumerate([4500, 4600, 100])]
    trials += [fake_trial("sequential", s, r, t) for s, (r, t) in enumerate([(1000, 40.0), (1200, 50.0), (900, None)])]
    trials += [fake_trial("async_double_buffer", s, r, t, updates=250.0)
               for s, (r, t) in enumerate([(2500, 20.0), (2400, 22.0), (2600, 30.0)])]
    trials += [fake_trial("async_free", s, r, None, updates=r * 0.1) for s, r in enumerate([3000, 3000, 3000])]
    summary = summarize_trials(trials)
    h = headline(summary)
    assert h["actor_over_bare_policy"] == pytest.approx(4500 / 5000)
    assert h["bare_policy_over_bare_random"] == pytest.approx(5000 / 10000)
    assert h["async_over_sequential_wall"] == {"double_buffer": pytest.approx(1000 / 2500)}
    # Sequential: one seed never reached the target and counts as infinitely slow: median 50 s.
    assert summary["sequential"]["time_to_target"]["reached"] == 2
    assert summary["sequential"]["time_to_target"]["median_seconds_unreached_as_inf"] == 50.0
    assert h["async_over_sequential_time_to_target"] == {"double_buffer": pytest.approx(22.0 / 50.0)}
    assert h["async_free_updates_per_agent_step"] == {"p0": pytest.approx(0.1)}
    assert summary["async_double_buffer"]["agent_steps_per_s"] == {"median": 2500.0, "min": 2400.0,
                                                                   "max": 2600.0, "n": 3}


def test_time_to_target_ratio_is_unknown_when_the_median_seed_never_got_there():
    trials = [fake_trial("sequential", s, 1000, t) for s, t in enumerate([10.0, None, None])]
    trials += [fake_trial("async_snapshot", s, 2000, 5.0) for s in range(3)]
    h = headline(summarize_trials(trials))
    assert h["async_over_sequential_time_to_target"] == {"snapshot": None}


@pytest.mark.parametrize("option, value, message", [
    ("agent_steps", 0, r"bench option agent_steps=0: must be an integer >= 1"),
    ("replay_ratio", -1.0, r"bench option replay_ratio=-1.0: must be a positive number"),
    ("configs", ("sequential", "turbo"), r"bench option configs=.*unknown \['turbo'\]"),
    ("score", "elo", r"bench option score='elo': must be one of"),
    ("cores", 999, r"bench option cores=999: must be between 1 and the \d+ cores"),
    ("run_options", {"publish_evry": 3}, r"unknown run option\(s\) \['publish_evry'\]"),
])
def test_bad_settings_name_the_option(option, value, message):
    with pytest.raises(ConfigError, match=message):
        BenchSettings(**{option: value}).validate()


@pytest.mark.slow  # 3 s
def test_an_error_inside_a_trial_process_is_raised_here_as_the_same_type():
    settings = BenchSettings(env=C4, learners="ppo", agent_steps=100, seeds=1, configs=("async_idle",))
    with pytest.raises(ConfigError, match="bench config 'async_idle' needs off-policy learners") as info:
        run_trial_in_fresh_process(TrialSpec("async_idle", 0, settings))
    assert any("bench trial async_idle (seed 0)" in note for note in getattr(info.value, "__notes__", []))


def test_snapshots_follow_the_run_and_hold_the_acting_policy():
    result = SequentialRunner(C4, VS_RANDOM, RunConfig(seed=0, replay_ratio=0.25, snapshot_every_steps=500)).run(
        agent_steps=2500)
    snaps = result.snapshots
    assert [s.agent_steps // 500 for s in snaps] == list(range(len(snaps)))  # one per 500 steps, at episode ends
    assert len(snaps) >= 5 and all(set(s.vectors) == {"player_0"} for s in snaps)
    assert all(b.seconds > a.seconds and b.updates["player_0"] >= a.updates["player_0"]
               for a, b in zip(snaps, snaps[1:]))
    assert snaps[-1].updates["player_0"] > 0 and snaps[-1].versions["player_0"] > snaps[0].versions["player_0"]
    assert not np.array_equal(snaps[0].vectors["player_0"], snaps[-1].vectors["player_0"])  # it learned
    assert "snapshots" not in result.to_dict()  # vectors stay out of result.json


@pytest.mark.slow  # 18 s; the vector configurations test runs the same path (schema, curves, headline) cheaply
def test_run_bench_end_to_end_matches_the_schema_and_its_own_figures(tmp_path):
    settings = BenchSettings(env=C4, learners=VS_RANDOM, agent_steps=400, seeds=1, target=0.5, eval_every=200,
                             eval_episodes=4, target_window=1, run_options={"publish_every": 5})
    # Trials run in this process (seven fresh interpreters cost more than the trials): the fresh-process path
    # is covered by the bench command test below and by the error-in-a-trial-process test above.
    threads = torch.get_num_threads()
    try:
        report = run_bench(settings, runner=run_trial)
    finally:
        torch.set_num_threads(threads)  # the bare trials set one thread
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(report)))
    configs = [t["config"] for t in report["trials"]]
    assert configs == ["bare_random", "bare_policy", "async_idle", "sequential", "async_double_buffer",
                       "async_snapshot", "async_free"]
    by_config = {t["config"]: t for t in report["trials"]}
    for t in report["trials"]:
        assert t["agent_steps"] == 400 and t["agent_steps_per_s"] > 0
        assert math.isclose(t["agent_steps_per_s"], t["agent_steps"] / t["acting_seconds"], rel_tol=1e-6)
    assert by_config["async_idle"]["updates_per_s"] == {"player_0": 0.0}
    assert len(by_config["async_double_buffer"]["processes"]) == 2  # the actor and player_0's learner
    curve = by_config["sequential"]["curve"]
    assert curve and curve[0]["scores"].keys() == {"player_0"}
    assert by_config["sequential"]["target_reached"] == time_to_target(curve, 0.5)
    h = report["headline"]
    assert h["actor_over_bare_policy"] == pytest.approx(
        by_config["async_idle"]["agent_steps_per_s"] / by_config["bare_policy"]["agent_steps_per_s"])
    assert h["async_over_sequential_wall"]["snapshot"] == pytest.approx(
        by_config["sequential"]["agent_steps_per_s"] / by_config["async_snapshot"]["agent_steps_per_s"])


@pytest.mark.slow  # the CLI path; run_bench, its report and plot are covered by the end-to-end test
def test_bench_command_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = subprocess.run(
        [sys.executable, "-m", "pzasync.cli", "bench", C4, "--learner-for", "player_1=random", "--steps", "300",
         "--seeds", "1", "--configs", "bare_random,sequential,async_double_buffer", "--target", "0.5",
         "--eval-every", "150", "--eval-episodes", "4", "--json", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert [t["config"] for t in report["trials"]] == ["bare_random", "sequential", "async_double_buffer"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "async (double_buffer) / sequential, wall time for the same agent steps" in proc.stdout


def test_bench_command_rejects_an_unknown_configuration():
    from click.testing import CliRunner

    from pzasync.cli import main

    result = CliRunner().invoke(main, ["bench", "--configs", "sequential,warp"])
    assert result.exit_code == 2
    assert "bench option configs=('sequential', 'warp'): unknown ['warp']" in result.stderr


def test_vector_configurations_are_labelled_and_held_against_the_single_env_references(tmp_path):
    """envs_per_actor x env_workers: each runner configuration runs per pair (workers <= copies), labelled
    config@N(wW); the headline holds each against the bare loops and its one-copy self; the plot draws them."""
    from pzasync.bench.report import plot_report

    settings = BenchSettings(env=C4, learners=VS_RANDOM, agent_steps=300, seeds=1, envs_per_actor=(1, 2),
                             env_workers=(0, 2), configs=("bare_random", "bare_policy", "sequential"), target=0.5,
                             eval_every=150, eval_episodes=4, target_window=1)
    assert [s.label for s in plan_trials(settings)] == ["bare_random", "bare_policy", "sequential", "sequential@2",
                                                        "sequential@2w2"]
    threads = torch.get_num_threads()
    try:
        report = run_bench(settings, runner=run_trial)
    finally:
        torch.set_num_threads(threads)
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(report)))
    rate = {t["config"]: t["agent_steps_per_s"] for t in report["trials"]}
    assert all(t["agent_steps"] == 300 for t in report["trials"])
    vector = report["headline"]["vector"]
    assert set(vector) == {"sequential@2", "sequential@2w2"}
    assert vector["sequential@2w2"]["env_workers"] == 2
    assert vector["sequential@2"]["over_one_env"] == pytest.approx(rate["sequential@2"] / rate["sequential"])
    assert vector["sequential@2w2"]["over_bare_policy"] == pytest.approx(rate["sequential@2w2"] / rate["bare_policy"])
    for t in report["trials"][2:]:  # runner trials carry learning curves, scored after the run
        assert t["curve"] and t["curve"][0]["scores"].keys() == {"player_0"}
        assert t["target_reached"] == time_to_target(t["curve"], 0.5)
    assert report["summary"]["sequential@2w2"]["time_to_target"]["reached"] in (0, 1)
    assert plot_report(report, str(tmp_path / "bench.png"))
    with pytest.raises(ConfigError, match="envs_per_actor"):
        BenchSettings(env=C4, run_options={"envs_per_actor": 4}).validate()


def test_actor_counts_are_a_trial_dimension_with_labels_that_round_trip():
    """--actors M[,M...]: every runner configuration runs per M (labelled aM), bare loops once; a vector row
    whose env-alone reference did not run still prints."""
    from pzasync.bench.harness import split_label, trial_label
    from pzasync.bench.report import describe, headline_lines

    settings = BenchSettings(env=C4, learners=VS_RANDOM, agent_steps=300, seeds=1, envs_per_actor=(1, 16),
                             actors=(1, 2), configs=("bare_policy", "async_idle"))
    labels = [s.label for s in plan_trials(settings)]
    assert labels == ["bare_policy", "async_idle", "async_idle@16", "async_idle@1a2", "async_idle@16a2"]
    for label in labels + ["async_idle@16w2a3"]:
        assert trial_label(*split_label(label)) == label
    assert split_label("async_idle@16w2a3") == ("async_idle", 16, 2, 3)
    assert describe("async_idle@16w2a3").endswith("16 envs, 2 workers, 3 actors")
    headline = {"async_idle@1a2": {"over_bare_policy": 1.5, "over_bare_random": None, "over_one_env": 1.2}}
    report = {"summary": {}, "headline": {"vector": headline}}
    assert headline_lines(report) == [f"{describe('async_idle@1a2')} / single-env bare loop with the same "
                                      f"policies: 1.50x; / one env copy: 1.20x"]
    with pytest.raises(ConfigError, match="bench option actors"):
        BenchSettings(env=C4, actors=(0,)).validate()


def test_overlap_is_the_better_limit_over_the_async_wall():
    """async_idle at 1,000 steps/s: the actor alone takes 1 ms a step. Sequential at 400/s: 2.5 ms, so the
    learner alone takes 1.5 ms and binds. An async run at 500/s (2 ms a step) is 0.75 of that limit; one at
    600/s would be 0.9."""
    from pzasync.bench.harness import headline

    def rates(**configs):
        return {c: {"agent_steps_per_s": {"median": r}} for c, r in configs.items()}

    h = headline(rates(async_idle=1000.0, sequential=400.0, async_double_buffer=500.0, async_snapshot=600.0))
    assert h["async_overlap"] == pytest.approx({"double_buffer": 0.75, "snapshot": 0.9})
    assert h["async_limit"] == {"double_buffer": "learner", "snapshot": "learner"}
    actor_bound = headline(rates(async_idle=1000.0, sequential=900.0, async_double_buffer=800.0))
    assert actor_bound["async_limit"] == {"double_buffer": "actor"}
    assert actor_bound["async_overlap"]["double_buffer"] == pytest.approx(0.8)
    assert h["async_learner_alone_from"] == {"double_buffer": "sequential less actor",
                                             "snapshot": "sequential less actor"}
    assert headline(rates(sequential=400.0, async_double_buffer=500.0))["async_overlap"] == {}, \
        "without the idle actor's figure there is no limit to compare with"


def test_overlap_takes_the_learner_alone_from_the_learner_process_cpu_time():
    """The async run's learner process spent 1.8 ms of CPU per agent step (start-up excluded): that is the
    learner alone, whatever sequential's wall says (here an overstated 2.5 ms). At 500 steps/s (2 ms a
    step) the run is 0.9 of its learner-bound limit. Trials whose learners ran in the runner's process report
    no learner CPU and fall back to the sequential estimate."""
    from pzasync.bench.harness import headline, learner_cpu_per_agent_step, summarize_trials

    def trial(config, rate, learner_cpu=None):
        processes = [{"name": "runner (actor)", "cpu_seconds": 5.0, "peak_rss_mb": 1.0}]
        if learner_cpu is not None:
            processes.append({"name": "learner player_0", "cpu_seconds": learner_cpu, "peak_rss_mb": 1.0})
            processes.append({"name": "learner player_1", "cpu_seconds": learner_cpu / 2, "peak_rss_mb": 1.0})
        return {"config": config, "agent_steps": 1000, "agent_steps_per_s": rate, "acting_seconds": 1000 / rate,
                "startup_seconds": 1.0, "updates_per_s": {}, "updates_per_agent_step": {}, "policy_lag_mean": {},
                "policy_lag_p95": {}, "processes": processes, "shm_bytes": 0}

    trials = [trial("async_idle", 1000.0, 0.1), trial("sequential", 400.0),
              trial("async_double_buffer", 500.0, 1.8)]
    assert learner_cpu_per_agent_step(trials[2]) == pytest.approx(0.0018), "the busiest learner process"
    assert learner_cpu_per_agent_step(trials[1]) is None
    h = headline(summarize_trials(trials))
    assert h["async_overlap"]["double_buffer"] == pytest.approx(0.9)
    assert h["async_limit"]["double_buffer"] == "learner"
    assert h["async_learner_alone_from"]["double_buffer"] == "learner CPU"


def test_bare_parallel_runs_where_the_env_has_a_parallel_api_and_is_refused_by_name_where_asked_without_one():
    from pzasync.bench.settings import CONFIGS

    turn_based = BenchSettings(env=C4, learners=VS_RANDOM)
    assert "bare_parallel" in CONFIGS and "bare_parallel" not in {t.config for t in plan_trials(turn_based)}
    spread = BenchSettings(env="mpe2.simple_spread_v3", learners="dqn")
    assert "bare_parallel" in {t.config for t in plan_trials(spread)}
    with pytest.raises(ConfigError, match="bare_parallel: env 'pettingzoo.classic.connect_four_v3' has no parallel"):
        BenchSettings(env=C4, learners=VS_RANDOM, configs=("bare_policy", "bare_parallel")).validate()
