"""Issue 15, rough edges a new user met: learner option values checked before spawn, budgets and output folders
refused in one line, --env-arg and --group on train and bench, and no multiprocessing semaphore left behind."""

from __future__ import annotations

import gc
import json
import multiprocessing as mp

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import own_semaphores

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.cli import main
from pzasync.errors import ConfigError
from pzasync.learners import Learner, Option
from pzasync.learners.dqn import DQNLearner
from pzasync.learners.players import FixedPlayer, RandomPlayer
from pzasync.learners.ppo import PPOLearner

TTT = "pettingzoo.classic.tictactoe_v3"
FORAGE = "pzasync.envs.forage"


class DQNWithNewOptions(DQNLearner):
    """DQN's rules for n_step, dueling, target_tau and torso, checked whether or not DQN's defaults have them yet."""

    defaults = {**DQNLearner.defaults, "n_step": 1, "dueling": False, "target_tau": 1.0, "torso": "auto"}


# ------------------------------------------------------------------------------------- 1. learner option values
@pytest.mark.parametrize("cls, options, message", [
    (DQNLearner, {"lr": "abc"}, r"DQNLearner option lr='abc': must be a number > 0 \(got str\)$"),
    (DQNLearner, {"lr": -1}, r"DQNLearner option lr=-1: must be a number > 0$"),
    (DQNLearner, {"lr": float("nan")}, r"DQNLearner option lr=nan: must be a number > 0$"),
    (DQNLearner, {"batch_size": 0}, r"DQNLearner option batch_size=0: must be an integer >= 1$"),
    (DQNLearner, {"batch_size": 32.0}, r"DQNLearner option batch_size=32.0: must be an integer >= 1 \(got float\)$"),
    (DQNLearner, {"batch_size": True}, r"DQNLearner option batch_size=True: must be an integer >= 1 \(got bool\)$"),
    (DQNLearner, {"gamma": 1.5}, r"DQNLearner option gamma=1.5: must be a number in \[0, 1\]$"),
    (DQNLearner, {"epsilon_decay_steps": -3}, r"DQNLearner option epsilon_decay_steps=-3: must be an integer >= 0$"),
    (DQNLearner, {"epsilon_end": 2}, r"DQNLearner option epsilon_end=2: must be a number in \[0, 1\]$"),
    (DQNLearner, {"learning_starts": -1}, r"DQNLearner option learning_starts=-1: must be an integer >= 0$"),
    (DQNLearner, {"target_update_interval": 0}, r"option target_update_interval=0: must be an integer >= 1$"),
    (DQNLearner, {"hidden": [64, 0]}, r"option hidden=\[64, 0\]: must be a list of integers >= 1$"),
    (DQNLearner, {"hidden": 64}, r"option hidden=64: must be a list of integers >= 1 \(got int\)$"),
    (DQNLearner, {"double": 1}, r"DQNLearner option double=1: must be True or False \(got int\)$"),
    (DQNLearner, {"activation": "gelu"}, r"option activation='gelu': must be one of 'relu', 'tanh'$"),
    (DQNWithNewOptions, {"n_step": 0}, r"option n_step=0: must be an integer >= 1$"),
    (DQNWithNewOptions, {"dueling": "yes"}, r"option dueling='yes': must be True or False \(got str\)$"),
    (DQNWithNewOptions, {"target_tau": 0}, r"option target_tau=0: must be a number in \(0, 1\]$"),
    (DQNWithNewOptions, {"target_tau": 1.5}, r"option target_tau=1.5: must be a number in \(0, 1\]$"),
    (DQNWithNewOptions, {"torso": "rnn"}, r"option torso='rnn': must be one of 'auto', 'mlp', 'cnn'$"),
    (PPOLearner, {"lr": 0}, r"PPOLearner option lr=0: must be a number > 0$"),
    (PPOLearner, {"clip": -0.2}, r"PPOLearner option clip=-0.2: must be a number > 0$"),
    (PPOLearner, {"gae_lambda": 1.01}, r"PPOLearner option gae_lambda=1.01: must be a number in \[0, 1\]$"),
    (PPOLearner, {"epochs": 0}, r"PPOLearner option epochs=0: must be an integer >= 1$"),
    (PPOLearner, {"minibatch_size": "64"}, r"option minibatch_size='64': must be an integer >= 1 \(got str\)$"),
    (PPOLearner, {"ent_coef": -0.01}, r"PPOLearner option ent_coef=-0.01: must be a number >= 0$"),
    (PPOLearner, {"normalize_advantages": None}, r"option normalize_advantages=None: must be True or False"),
    (PPOLearner, {"torso": "rnn"}, r"PPOLearner option torso='rnn': must be one of 'auto', 'mlp', 'cnn'$"),
    (FixedPlayer, {"checkpoint": 3}, r"FixedPlayer option checkpoint=3: must be a file path or None \(got int\)$"),
])
def test_bad_learner_option_values_are_one_line_naming_agent_option_value_and_range(cls, options, message):
    with pytest.raises(ConfigError, match=r"^agent 'player_1': .*" + message) as info:
        cls.validate_config("player_1", options)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("cls, options", [
    (DQNLearner, {"lr": 1}),  # an int where a float is expected
    (DQNLearner, {"lr": np.float32(1e-3), "batch_size": np.int64(32), "hidden": (32,), "learning_starts": 0}),
    (DQNLearner, {"gamma": 1.0, "epsilon_decay_steps": 0, "hidden": []}),
    (DQNWithNewOptions, {"n_step": 3, "dueling": True, "target_tau": 1, "torso": "cnn"}),
    (PPOLearner, {"init_log_std": -3, "ent_coef": 0, "activation": "relu"}),
    (RandomPlayer, {}),
])
def test_good_learner_option_values_pass_unchanged(cls, options):
    assert cls.validate_config("player_1", options) == {**cls.defaults, **options}


def test_every_builtin_default_passes_its_own_schema():
    for cls in (DQNLearner, DQNWithNewOptions, PPOLearner, RandomPlayer):
        assert cls.validate_config("a", {}) == cls.defaults
    assert FixedPlayer.option_rules().keys() >= {"checkpoint", "batch_size", "learning_starts"}


class Base(Learner):
    defaults = {"alpha": 0.5, "mode": "fast", "batch_size": 8}
    schema = {"alpha": Option(float, gt=0, lt=1), "mode": Option(str, choices=("fast", "slow")),
              "not_an_option_here": Option(int, ge=1)}  # a rule for a key missing from defaults is skipped


class Child(Base):
    defaults = {**Base.defaults, "depth": None}
    schema = {"depth": Option(int, ge=1, optional=True), "alpha": Option(float, ge=0, le=1)}


@pytest.mark.parametrize("cls, options, message", [
    (Base, {"alpha": 1.0}, r"agent 'x': Base option alpha=1.0: must be a number in \(0, 1\)$"),
    (Base, {"mode": "medium"}, r"agent 'x': Base option mode='medium': must be one of 'fast', 'slow'$"),
    (Base, {"batch_size": -8}, r"agent 'x': Base option batch_size=-8: must be an integer >= 1$"),  # Learner's
    (Child, {"alpha": 1.5}, r"agent 'x': Child option alpha=1.5: must be a number in \[0, 1\]$"),  # overridden
    (Child, {"mode": 3}, r"agent 'x': Child option mode=3: must be one of 'fast', 'slow' \(got int\)$"),  # inherited
    (Child, {"depth": 0}, r"agent 'x': Child option depth=0: must be an integer >= 1 or None$"),
])
def test_custom_learner_schemas_are_inherited_and_checked(cls, options, message):
    with pytest.raises(ConfigError, match=message):
        cls.validate_config("x", options)


def test_custom_learner_schema_accepts_good_values_and_skips_rules_without_defaults():
    assert Child.validate_config("x", {"alpha": 1.0, "depth": None}) == {
        "alpha": 1.0, "mode": "fast", "batch_size": 8, "depth": None}
    assert Child.validate_config("x", {"depth": 4})["depth"] == 4


@pytest.mark.parametrize("option, message", [
    ("lr=abc", r"DQNLearner option lr='abc': must be a number > 0 \(got str\)"),
    ("lr=-1", r"DQNLearner option lr=-1: must be a number > 0"),
    ("batch_size=0", r"DQNLearner option batch_size=0: must be an integer >= 1"),
    ("gamma=1.5", r"DQNLearner option gamma=1.5: must be a number in \[0, 1\]"),
    ("epsilon_decay_steps=-3", r"DQNLearner option epsilon_decay_steps=-3: must be an integer >= 0"),
])
def test_train_refuses_bad_learner_values_in_one_line_before_anything_starts(option, message, tmp_path):
    result = CliRunner().invoke(main, ["train", TTT, "--learner", f"dqn,{option}", "--steps", "10",
                                       "--out", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "training" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: agent 'player_1': ")
    assert __import__("re").search(message, line), line
    assert list(tmp_path.iterdir()) == [], "nothing may be written before the options are checked"


# ------------------------------------------------------------------------------------------- 2. run budgets
@pytest.mark.parametrize("args, message", [
    (["--minutes", "0"], "error: --minutes 0: must be > 0"),
    (["--minutes", "-2.5"], "error: --minutes -2.5: must be > 0"),
    (["--steps", "-5"], "error: --steps -5: must be >= 1 agent steps"),
    (["--steps", "0", "--minutes", "1"], "error: --steps 0: must be >= 1 agent steps"),
])
def test_train_refuses_budgets_that_cannot_be_met(args, message, tmp_path):
    result = CliRunner().invoke(main, ["train", TTT, *args, "--out", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.output.strip() == message
    assert list(tmp_path.iterdir()) == [], "no run directory for a refused budget"


@pytest.mark.parametrize("budget, message", [
    ({"seconds": 0}, r"^seconds=0: must be a number > 0, or None$"),
    ({"seconds": -1.0}, r"^seconds=-1.0: must be a number > 0, or None$"),
    ({"agent_steps": -5}, r"^agent_steps=-5: must be an integer >= 1, or None$"),
    ({"agent_steps": 10.5}, r"^agent_steps=10.5: must be an integer >= 1, or None$"),
])
def test_runners_refuse_budgets_before_writing_anything(budget, message, tmp_path):
    runner = SequentialRunner(TTT, "random", RunConfig(out_dir=str(tmp_path / "runs")))
    with pytest.raises(ConfigError, match=message):
        runner.run(**budget)
    assert not (tmp_path / "runs").exists() and runner.actor is None


# ------------------------------------------------------------------------------------------ 3. output folder
@pytest.mark.parametrize("out", ["/proc/forbidden", "{tmp}/a_file/runs"])
def test_train_refuses_an_unusable_output_folder_in_one_line(out, tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    out = out.format(tmp=tmp_path)
    result = CliRunner().invoke(main, ["train", TTT, "--steps", "50", "--learner", "random", "--out", out],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: option out_dir={out!r}: cannot write run directories there (")
    assert "Traceback" not in result.output and "training" not in result.output


def test_a_runner_with_an_unusable_output_folder_fails_before_allocating(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    runner = AsyncRunner(TTT, "dqn", RunConfig(out_dir=str(tmp_path / "a_file" / "runs")))
    with pytest.raises(ConfigError, match=r"cannot write run directories there \(NotADirectoryError"):
        runner.run(agent_steps=10)
    assert runner.actor is None and all(p.buffer is None for p in runner.plan.agents.values())


# ------------------------------------------------------------------------------------ 4. --env-arg and --group
def test_train_takes_env_args_and_agent_groups(tmp_path):
    result = CliRunner().invoke(main, [
        "train", FORAGE, "--env-arg", "n_agents=2", "--env-arg", "max_cycles=20", "--group", "pack=forager_*",
        "--learner", "dqn,learning_starts=20,batch_size=8,hidden=[16]", "--runner", "sequential", "--steps", "200",
        "--out", str(tmp_path), "--final-episodes", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "forager_0, forager_1 (2 agents): dqn, group pack;" in result.output
    assert "forager_2" not in result.output  # n_agents=2 reached the env
    (run_dir,) = list(tmp_path.iterdir())
    info = json.loads((run_dir / "run.json").read_text())
    assert info["env_kwargs"] == {"n_agents": 2, "max_cycles": 20}
    assert info["config"]["agent_groups"] == {"pack": ["forager_*"]}
    agents = json.loads((run_dir / "result.json").read_text())["agents"]
    assert sorted(agents) == ["forager_0", "forager_1"] and {a["group"] for a in agents.values()} == {"pack"}
    assert (run_dir / "checkpoints" / "pack.pt").exists()
    evaluated = CliRunner().invoke(main, ["eval", str(run_dir), "--episodes", "2"], env={"COLUMNS": "300"})
    assert evaluated.exit_code == 0, evaluated.output
    assert "forager_1" in evaluated.output and "forager_2" not in evaluated.output


@pytest.mark.parametrize("group, message", [
    ("pack", r"--group 'pack': expected NAME=PATTERN\[,PATTERN...\]"),
    ("=forager_*", r"--group '=forager_\*': expected NAME=PATTERN"),
    ("pack=,", r"--group 'pack=,': expected NAME=PATTERN"),
])
def test_train_refuses_malformed_groups(group, message, tmp_path):
    result = CliRunner().invoke(main, ["train", FORAGE, "--group", group, "--steps", "10", "--out", str(tmp_path)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2 and __import__("re").search(message, result.output), result.output


def test_bench_passes_env_args_and_groups_to_every_trial(monkeypatch):
    import pzasync.bench.harness

    seen = {}

    def fake_run_bench(settings, **_kwargs):
        seen["settings"] = settings
        raise SystemExit(0)

    monkeypatch.setattr(pzasync.bench.harness, "run_bench", fake_run_bench)
    result = CliRunner().invoke(main, ["bench", FORAGE, "--env-arg", "n_agents=2", "--group",
                                       "pack=forager_0,forager_1", "--option", "publish_every=5", "--configs",
                                       "bare_policy,sequential"])
    assert result.exit_code == 0, result.output
    settings = seen["settings"]
    assert settings.env_kwargs == {"n_agents": 2}
    assert settings.run_options == {"publish_every": 5, "agent_groups": {"pack": ["forager_0", "forager_1"]}}


def test_a_bench_trial_reports_an_agent_group_as_one_learning_unit():
    from pzasync.bench.harness import BenchSettings, TrialSpec, run_trial

    settings = BenchSettings(env=FORAGE, env_kwargs={"n_agents": 2}, agent_steps=200, seeds=1, replay_ratio=0.25,
                             learners={"pack": ("dqn", {"learning_starts": 20, "batch_size": 8, "hidden": [16]})},
                             run_options={"agent_groups": {"pack": ["forager_*"]}}).validate()
    trial = run_trial(TrialSpec("sequential", 0, settings))
    assert trial["agent_steps"] == 200 and set(trial["updates_per_s"]) == {"pack"}
    # The group's updates over both members' 200 steps: about the replay ratio (one member's steps would double it).
    assert 0.15 < trial["updates_per_agent_step"]["pack"] <= 0.26


def test_bench_bare_policy_loop_resolves_groups():
    from pzasync.bench.harness import bare_loop

    # The learner spec names the group: without the groups the plan would not know 'pack'.
    rate = bare_loop(FORAGE, {"pack": "dqn"}, 200, seed=0, groups={"pack": ["forager_*"]})
    assert rate > 0
    with pytest.raises(ConfigError, match="pack"):
        bare_loop(FORAGE, {"pack": "dqn"}, 200, seed=0)


# ------------------------------------------------------------------------------------------ 6. semaphores
def test_the_leak_check_sees_a_queues_semaphores():
    before = own_semaphores()
    queue = mp.get_context("spawn").Queue()
    assert len(own_semaphores() - before) == 3  # what the autouse leak check would report
    queue.close()
    queue.join_thread()
    del queue
    assert own_semaphores() == before


@pytest.mark.slow  # conftest's autouse check does the same (without a collection) after every async test
def test_no_semaphore_outlives_an_async_run():
    before = own_semaphores()
    gc.disable()  # what is released must go when run() returns, not at the next garbage collection
    try:
        runner = AsyncRunner(TTT, {"player_1": "dqn", "player_2": "random"}, RunConfig(seed=0))
        result = runner.run(agent_steps=50)
        left = own_semaphores() - before
    finally:
        gc.enable()
    assert result.agents["player_1"].published_version >= 1  # the learner process ran and published
    assert not left, f"semaphores left in /dev/shm after run(): {sorted(left)}"


# ------------------------------------------------------------------ random play on a Discrete space with a start
def test_random_play_offsets_mask_indices_by_the_action_spaces_start():
    """Mask entry i is action start + i: random play (rollout, eval, bench, check_env) must only send legal actions.
    StartOffsetEnv raises on an illegal one, so before the fix (index 0-2 sent as the action) every step failed."""
    from scripted_env import StartOffsetEnv

    from pzasync.evaluation.evaluate import play, random_actor
    from pzasync.testing import check_env

    env = StartOffsetEnv()
    env.reset()
    act = random_actor(env, seed=0)
    for turn in range(6):
        assert act("solo", env.observe("solo"), env.infos["solo"]["action_mask"].astype(bool)) == 5 + turn % 3
        env.step(5 + turn % 3)
    summaries = play(StartOffsetEnv, {"solo": random_actor(StartOffsetEnv(), seed=1)}, episodes=5, seed=3)
    assert [s.returns["solo"] for s in summaries] == [6.0] * 5
    assert check_env(StartOffsetEnv, agent_steps=60, spawn=False)


# ------------------------------------------------------------------------------- optional extras, 80 columns
def test_a_missing_extra_is_one_line_with_its_install_command_before_anything_runs(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    result = CliRunner().invoke(main, ["bench", TTT, "--steps", "50", "--seeds", "1", "--configs", "sequential",
                                       "--plot", str(tmp_path / "b.png"), "--json", str(tmp_path / "b.json")],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line == ("error: --plot needs the 'plot' extra (matplotlib is not installed): "
                    'pip install "pzasync[plot]"'), line
    assert list(tmp_path.iterdir()) == [], "nothing ran, nothing was written"


def test_the_eval_and_train_tables_wrap_rather_than_cut_a_cell_at_80_columns(tmp_path):
    train = CliRunner().invoke(main, ["train", TTT, "--steps", "300", "--runner", "sequential", "--out",
                                      str(tmp_path), "--eval-every", "0", "--final-episodes", "4"],
                               env={"COLUMNS": "80"})
    assert train.exit_code == 0, train.output
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    result = CliRunner().invoke(main, ["eval", str(run_dir), "--vs", "negamax,depth=4", "--episodes", "4"],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for output in (train.output, result.output):
        assert "…" not in output, output
        table_lines = [line for line in output.splitlines() if set(line) & set("│┃┏┗┡└")]
        assert table_lines and max(len(line) for line in table_lines) <= 80, output
    assert "negamax,depth" in result.output.replace("\n", "").replace("│", "").replace(" ", "") or "depth=4" in \
        result.output
