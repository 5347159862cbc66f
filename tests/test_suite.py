"""The learning suite (pzasync/bench/suite.py, `pzasync suite`; docs/benchmarks.md "Learning suite"): every suite
recipe resolves the way `pzasync train` resolves it and trains briefly; the command writes a report that its
schema (docs/suite-schema.json) accepts, a plot per env, and TensorBoard scalars of its evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import pzasync
from pzasync.bench.suite import SuiteSettings, curve_of, over_seeds, plot_title, score_bounds, suite_run, team_returns
from pzasync.cli import main, train_choices
from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.errors import ConfigError
from pzasync.learners.fitting import fit_learners
from pzasync.recipes import SUITE, recipe_for
from pzasync.runners import SequentialRunner
from pzasync.runtime.rundir import RunDirectory

SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "suite-schema.json").read_text())
SMALL = "mpe2.simple_speaker_listener_v4"
#: Brief training per suite env: enough agent steps for one batch of every on-policy learning unit (512 for
#: ppo's default, split between the groups and seats that share them); pistonball with fewer pistons (its
#: env's cost grows with them). Everything else as the recipe has it.
STEPS = 1200
BRIEF = {"pettingzoo.butterfly.pistonball_v6": {"n_pistons": 4}}
#: Agent steps where a recipe's on-policy batch is larger than STEPS (so that it updates once).
BRIEF_STEPS = {"mpe2.simple_spread_v3": 4200, "pettingzoo.sisl.multiwalker_v9": 2400,
               "pettingzoo.butterfly.pistonball_v6": 8400}


@pytest.mark.parametrize("env_id", SUITE, ids=lambda e: e.rsplit(".", 1)[-1])
def test_every_suite_env_has_a_recipe_that_pzasync_train_and_the_suite_resolve_alike(env_id):
    """The suite trains what `pzasync train ENV` would: the same learners (after any fitted to the spaces), run
    options, env arguments and wrappers; and through the API asked for (`--env-api`), which reaches the run."""
    assert recipe_for(env_id) is not None
    run, chosen = suite_run(env_id), train_choices(env_id)
    assert {k: v for k, v in run.config.items() if k != "env_api"} == chosen.config
    assert run.config["env_api"] == "auto" and suite_run(env_id, "aec").config["env_api"] == "aec"
    assert run.env.kwargs == chosen.env_kwargs and run.env.wrappers == chosen.wrappers
    env = EnvSpec.of(env_id, chosen.wrappers, **chosen.env_kwargs)
    assert run.learners == fit_learners(env, chosen.learners, chosen.config["agent_groups"])[0]
    assert run.yardstick == chosen.yardstick


#: The recipes whose brief run takes 3-6 s on 2 cores train with `-m slow`; the default run trains the others.
SLOW_BRIEF = ("pettingzoo.butterfly.pistonball_v6", "pettingzoo.sisl.pursuit_v5",
              "pettingzoo.butterfly.knights_archers_zombies_v11")


@pytest.mark.parametrize("env_id", [pytest.param(e, marks=pytest.mark.slow) if e in SLOW_BRIEF else e for e in SUITE],
                         ids=lambda e: e.rsplit(".", 1)[-1])
def test_every_suite_recipe_trains_briefly(env_id, tmp_path):
    """The recipe's plan is built and run: its learners act and train (on-policy learners update at least once),
    groups share one learner, and run.json records the env as the recipe makes it."""
    run = suite_run(env_id)
    env = EnvSpec.of(run.env, **BRIEF.get(env_id, {}))
    steps = BRIEF_STEPS.get(env_id, STEPS)
    config = RunConfig(**run.config, seed=0, out_dir=str(tmp_path), progress=False, buffer_capacity=max(2000, steps))
    result = SequentialRunner(env, run.learners, config).run(agent_steps=steps)
    assert result.agent_steps >= steps
    expected_name = run.recipe.learner.split(",")[0]
    for agent, r in result.agents.items():
        assert r.learner in (expected_name, "ppo"), agent  # ppo only where fitted to Box actions
        if r.learner in ("ppo", "mappo"):
            assert r.updates >= 1, agent
    for group in run.config["agent_groups"]:
        assert any(r.group == group for r in result.agents.values()), group
    info = RunDirectory(result.run_dir, create=False).read_json("run.json")
    assert info["env_wrappers"] == list(run.recipe.wrappers)
    assert {k: info["env_kwargs"][k] for k in run.recipe.env_kwargs} == dict(run.recipe.env_kwargs)


@pytest.mark.slow
def test_the_suite_command_writes_a_report_its_schema_accepts_and_a_plot(tmp_path):
    """One small env, one seed, a few seconds: suite.json is valid, its curve has rounds scored by the
    evaluator and ends with the final round (the last checkpoint, scored once training stopped), both baselines
    are there, the plot is a PNG, the table is printed, and the run's evaluations
    went to TensorBoard as well."""
    out = tmp_path / "suite"
    result = CliRunner().invoke(main, ["suite", SMALL, "--minutes", "0.1", "--seeds", "1", "--out", str(out),
                                       "--eval-every", "1", "--eval-episodes", "2", "--baseline-episodes", "4"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    report = json.loads((out / "suite.json").read_text())
    jsonschema.validate(report, SCHEMA)
    (entry,) = report["envs"]
    assert entry["env"] == SMALL and entry["metric"] == "mean_return" and entry["recipe"]["learner"] == "mappo"
    assert set(entry["baselines"]) == {"random", "untrained"}
    (run,) = entry["runs"]
    assert run["curve"] and run["final"] == run["curve"][-1]["score"] == entry["final"]["mean"]
    # the evaluator's rounds, then the final round: the last checkpoint scored once training stopped, with the
    # evaluator's episodes and seed (the run's seed, 0, + 9001), at the run's wall time and agent steps
    *during, last = run["curve"]
    assert during and not any(p["final"] for p in during) and last["final"]
    assert last["wall_s"] == pytest.approx(run["wall_seconds"], abs=1e-3) and last["agent_steps"] == run["agent_steps"]
    assert last["wall_s"] > max(p["wall_s"] for p in during)
    again = pzasync.evaluate(run["run_dir"], episodes=2, seed=9001, baselines=False)
    assert last["score"] == pytest.approx(again.results[0].mean) and again.results[0].agent == "team"
    # a cooperative game: the evaluator and both baselines score the team, every seat its own policy
    assert entry["scoring"] == "team"
    assert entry["scored_units"] == {"team": ["listener_0", "speaker_0"]} or \
        entry["scored_units"] == {"team": ["speaker_0", "listener_0"]}
    assert set(run["curve"][0]["scores"]) == {"team"}
    assert all(set(b["units"]) == {"team"} for b in entry["baselines"].values())
    assert Path(entry["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "learning suite" in result.output and "simple_speaker_listener_v4" in result.output
    if _tensorboard_tags is not None:
        assert any(tag.startswith("eval/") for tag in _tensorboard_tags(Path(run["run_dir"]) / "tb"))


try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def _tensorboard_tags(path: Path) -> list[str]:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        return accumulator.Tags()["scalars"]
except ImportError:  # the `tensorboard` extra is not installed
    _tensorboard_tags = None


def test_evaluation_rows_go_to_tensorboard_with_the_extra(tmp_path):
    pytest.importorskip("tensorboard", reason="the `tensorboard` extra (pip install 'pzasync[tensorboard]')")
    rd = RunDirectory(tmp_path / "run")
    rd.open_trackers([])  # TensorBoard, named or not, wherever the extra is installed
    rd.tracker.log_metrics("team", 5, {"loss": 0.5})
    for steps, value in ((100, -80.0), (200, -60.0)):
        rd.tracker.log_eval({"agent": "agent_0", "opponent": "random", "outcomes": False, "mean_return": value,
                             "win_rate": 0.0, "agent_steps": steps})
    rd.tracker.log_eval({"agent": "player_0", "opponent": "one_ply", "outcomes": True, "mean_return": 0.2,
                         "win_rate": 0.6, "agent_steps": 100})
    rd.close()
    accumulator = EventAccumulator(str(tmp_path / "run" / "tb"))
    accumulator.Reload()
    assert set(accumulator.Tags()["scalars"]) == {"team/loss", "eval/agent_0/mean_return",
                                                  "eval/player_0/win_rate_vs_one_ply"}
    assert [(e.step, e.value) for e in accumulator.Scalars("eval/agent_0/mean_return")] == [(100, -80.0),
                                                                                          (200, -60.0)]


def test_a_round_scores_the_mean_over_seats_and_team_returns_are_binned_by_wall_time():
    rows = [{"round": 0, "wall_s": 5.0, "agent_steps": 100, "agent": "a", "win_rate": 0.5, "mean_return": -3.0},
            {"round": 0, "wall_s": 5.5, "agent_steps": 120, "agent": "b", "win_rate": 0.1, "mean_return": -1.0},
            {"round": 1, "wall_s": 9.0, "agent_steps": 300, "agent": "a", "win_rate": 0.7, "mean_return": 2.0,
             "final": True}]
    assert curve_of(rows, "mean_return") == [
        {"round": 0, "wall_s": 5.5, "agent_steps": 120, "score": -2.0, "scores": {"a": -3.0, "b": -1.0},
         "final": False},
        {"round": 1, "wall_s": 9.0, "agent_steps": 300, "score": 2.0, "scores": {"a": 2.0}, "final": True}]
    assert [p["score"] for p in curve_of(rows, "win_rate")] == pytest.approx([0.3, 0.7])
    episodes = [{"wall_s": 1.0, "returns": {"a": -1.0, "b": -2.0}}, {"wall_s": 2.0, "returns": {"a": 0.0, "b": 1.0}},
                {"wall_s": 12.0, "returns": {"a": 4.0}}]  # ended after the budget: the last tenth
    assert team_returns(episodes, 10.0, bins=2) == [{"wall_s": 5.0, "team_return": -1.0, "episodes": 2},
                                                    {"wall_s": 10.0, "team_return": 4.0, "episodes": 1}]


def test_the_interval_over_seeds_is_a_t_interval_and_absent_for_one_seed():
    assert over_seeds([1.0]) == {"mean": 1.0, "ci95": None, "values": [1.0]}
    spread = over_seeds([1.0, 3.0])
    assert spread["mean"] == 2.0 and spread["ci95"] == pytest.approx([2.0 - 12.71, 2.0 + 12.71])
    win_rates = over_seeds([0.9, 0.9, 1.0], score_bounds("win_rate"))
    assert win_rates["ci95"][1] == 1.0 and win_rates["ci95"][0] == pytest.approx(0.79, abs=0.005)
    assert score_bounds("mean_return") is None


def test_a_suite_learner_replaces_each_recipes_learner_and_keeps_the_rest_of_it():
    """`pzasync suite --learner SPEC`: the runs train SPEC's learner with the recipe's groups, env copies and
    wrappers, as `pzasync train ENV --learner SPEC` does."""
    recipe, replaced = suite_run("mpe2.simple_spread_v3"), suite_run("mpe2.simple_spread_v3", learner="ppo,lr=0.001")
    assert recipe.learners[0] == "mappo" and replaced.learners == ("ppo", {"lr": 0.001})
    assert replaced.config == recipe.config and replaced.config["agent_groups"] == {"team": ["agent_*"]}
    assert replaced.env.wrappers == recipe.env.wrappers and replaced.env.kwargs == recipe.env.kwargs


def test_the_plot_title_shows_a_long_learner_spec_whole_on_short_lines():
    """matplotlib does not wrap a title: a long `--learner` spec breaks after its commas, and none of it is lost."""
    entry = {"short": "simple_spread_v3", "recipe": {"learner": "mappo"}}
    spec = "mappo,batch_size=4096,minibatch_size=256,epochs=10,lr_schedule=linear"
    title = plot_title(entry, spec, envs_per_actor=8)
    assert len(title.splitlines()) == 2 and all(len(line) <= 70 for line in title.splitlines())
    assert title.replace("\n", " ").replace(", ", ",") == f"simple_spread_v3: {spec},8 env copies"
    assert plot_title(entry) == "simple_spread_v3: mappo"


def test_suite_env_copies_replace_each_recipes_and_keep_the_rest_of_it():
    """`pzasync suite --envs-per-actor N`: the runs step N env copies with the recipe's learner and groups."""
    recipe, copied = suite_run("mpe2.simple_spread_v3"), suite_run("mpe2.simple_spread_v3", envs_per_actor=3)
    assert recipe.config["envs_per_actor"] == 8 and copied.config["envs_per_actor"] == 3
    assert copied.learners == recipe.learners and copied.config["agent_groups"] == recipe.config["agent_groups"]


def test_first_seed_trains_the_seeds_after_an_earlier_suites(monkeypatch, tmp_path):
    """`pzasync suite --seeds 2 --first-seed 3` trains seeds 3 and 4, in order, one after the other and side by
    side alike (what each run gets is recorded here in place of training it)."""
    from pzasync.bench import suite as suite_module

    trained: list[int] = []
    monkeypatch.setattr(suite_module, "train_one", lambda run, seed, *rest: trained.append(seed) or {"seed": seed})
    monkeypatch.setattr(suite_module, "env_entry", lambda run, runs, settings: [r["seed"] for r in runs])
    settings = SuiteSettings(envs=[SMALL], seeds=2, first_seed=3)
    assert settings.seed_list == [3, 4]
    assert suite_module.env_report(SMALL, settings, tmp_path) == [3, 4] and trained == [3, 4]
    assert SuiteSettings(seeds=3).seed_list == [0, 1, 2], "seeds 0 .. K-1 by default"


@pytest.mark.parametrize("bad, flag", [({"minutes": 0}, "--minutes"), ({"seeds": 0}, "--seeds"),
                                       ({"eval_episodes": 0}, "--eval-episodes"),
                                       ({"eval_every_s": -1}, "--eval-every"),
                                       ({"envs_per_actor": 0}, "--envs-per-actor"),
                                       ({"first_seed": -1}, "--first-seed"),
                                       ({"learner": "ppo,lr_schedule=cosine"}, "--learner"),
                                       ({"learner": "nosuchlearner"}, "--learner")])
def test_bad_suite_settings_are_refused_by_name(bad, flag):
    (name,) = bad
    with pytest.raises(ConfigError, match=name):
        SuiteSettings(**bad).validate()
    result = CliRunner().invoke(main, ["suite", SMALL, flag, str(bad[name])])
    assert result.exit_code == 2 and name in result.output
