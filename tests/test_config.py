"""Options declared once (pzasync/config): every RunConfig and BenchSettings field reaches its command's --help,
a configuration survives --print-config -> --config and run.json unchanged, flags override the file, and a bad
value in the file is refused with the option named."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from pzasync.bench.settings import BenchSettings
from pzasync.cli import main
from pzasync.cli.options import flag
from pzasync.config import GROUPS, Check, RunConfig, declared, spec_of
from pzasync.config.toml import tomllib
from pzasync.errors import ConfigError

TTT = "pettingzoo.classic.tictactoe_v3"
C4 = "pettingzoo.classic.connect_four_v3"
ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def printed(*args: str) -> str:
    code, output = invoke("train", TTT, "--print-config", *args)
    assert code == 0, output
    return output


def config_of(text: str) -> RunConfig:
    return RunConfig(**RunConfig.toml_values(text)).validate()


# ------------------------------------------------------------------------------------------- declarations
def test_every_field_is_declared_once_in_exactly_one_group():
    names = [f.name for group in GROUPS for f in fields(group)]
    assert len(names) == len(set(names)), "a field declared in two groups"
    assert sorted(names) == sorted(f.name for f in fields(RunConfig)) and len(names) == 55
    for f in [*fields(RunConfig), *fields(BenchSettings)]:
        spec = spec_of(f)
        assert spec.doc and spec.doc.endswith((".", ")")), f.name
        assert spec.refusal(getattr(RunConfig() if f in fields(RunConfig) else BenchSettings(), f.name)) is None, \
            f"the default of {f.name} fails its own check"


def test_every_run_option_is_a_train_flag_and_every_bench_setting_a_bench_option():
    code, text = invoke("train", "--help")
    assert code == 0, text
    missing = [f.name for f in fields(RunConfig) if not re.search(rf"{flag(f.name)}(?![\w-])", text)]
    assert not missing, f"not in `pzasync train --help`: {missing}"
    for alias in ("--vs", "--out", "--publish", "--group", "--league", "--league-trainee", "--eval-every",
                  "--final-episodes", "--config", "--print-config"):
        assert re.search(rf"{alias}(?![\w-])", text), alias
    for group in GROUPS:
        assert f"{group.TITLE}:" in text
    code, text = invoke("bench", "--help")
    assert code == 0, text
    missing = [f.name for f, spec in declared(BenchSettings) if not (
        f"[{f.name.upper()}]" in text if spec.argument else re.search(rf"{flag(f.name)}(?![\w-])", text))]
    assert not missing, f"not in `pzasync bench --help`: {missing}"


def test_checks_are_generic_and_keep_the_messages_of_before():
    assert Check(int, ge=1, also=("auto",)).describe() == "must be an integer >= 1 or 'auto'"
    assert Check(float, ge=0, optional=True, what="a number of GPUs").describe() == \
        "must be a number of GPUs >= 0 or None"
    assert not Check(int).accepts(True) and Check(float).accepts(3) and not Check(float).accepts(float("nan"))
    for options, message in [({"seed": "x"}, "option seed='x': must be an integer"),
                             ({"eval_episodes": 0}, "option eval_episodes=0: must be an integer >= 1"),
                             ({"checkpoint_every_s": -1}, "option checkpoint_every_s=-1: must be a number >= 0"),
                             ({"ray_learner_cpus": -1}, "option ray_learner_cpus=-1: must be a number of CPUs >= 0"),
                             ({"nonfinite": "warn"}, "option nonfinite='warn': must be 'count' or 'raise'"),
                             ({"env_workers": 3, "envs_per_actor": 2}, "option env_workers=3: must be at most")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            RunConfig(**options).validate()


# ---------------------------------------------------------------------------------------------- TOML
ODD = RunConfig(seed=3, out_dir="runs/x", envs_per_actor="auto", env_workers=0, actors=2, replay_ratio=0.5,
                devices={"player_1": "cuda:1"}, agent_groups={"all": ["player_*"]}, eval_vs="negamax,depth=2",
                league={}, league_trainee_weights={}, ray_learner_resources={"learner_node": 1.5},
                ray_learner_gpus=None, checkpoint_every_s=float("inf"), max_episode_steps=9)


def test_a_config_round_trips_through_toml_and_run_json():
    assert config_of(ODD.to_toml()) == ODD
    league = RunConfig(league={"players": {"latest": 0.5, "negamax,depth=2": 0.5}, "*": "latest=1"},
                       league_trainee_weights={"player_1": 4.0}, ray_actor_resources={}, backend="ray")
    assert config_of(league.to_toml()) == league
    text = json.dumps(ODD.as_dict())  # run.json stays flat: one key per option
    assert set(json.loads(text)) == {f.name for f in fields(RunConfig)}
    assert RunConfig.from_dict(json.loads(text)) == ODD


def test_the_tables_are_the_declared_groups_and_flat_keys_are_accepted():
    data = tomllib.loads(RunConfig().to_toml())
    assert list(data) == [group.TABLE for group in GROUPS]
    for group in GROUPS:
        assert list(data[group.TABLE]) == [f.name for f in fields(group)]
    assert RunConfig.toml_values("seed = 4\n[acting]\nenvs_per_actor = 8\n") == {"seed": 4, "envs_per_actor": 8}


@pytest.mark.parametrize("text, message", [
    ("[run]\nseed = 'x'\n", "cfg.toml: option seed='x': must be an integer"),
    ("[acting]\nenvs_per_actor = 0\n", "cfg.toml: option envs_per_actor=0: must be an integer >= 1 or 'auto'"),
    ("[learning]\nseed = 1\n", "cfg.toml: option 'seed' belongs in [run], not [learning]"),
    ("[acting]\nenv_copies = 8\n", "cfg.toml: unknown option 'env_copies' in [acting]"),
    ("[turbo]\nx = 1\n", "cfg.toml: unknown option 'turbo'"),
    ("league = { '*' = 'latest=1' }\n", "[league] is a table of options: write league = ... inside it"),
    ("[run\n", "cfg.toml: not valid TOML"),
])
def test_a_bad_file_is_refused_naming_the_option(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        RunConfig.toml_values(text, "cfg.toml")


# ---------------------------------------------------------------------------------------- the train command
def test_print_config_then_config_gives_the_same_run_options(tmp_path):
    first = printed("--vs", "random", "--eval-every", "0", "--group", "all=player_*", "--devices", "all=cuda:1",
                    "--replay-ratio", "0.5", "--ray-learner-resources", "node=2", "--no-check-rewards")
    config = config_of(first)
    assert (config.eval_vs, config.agent_groups, config.devices, config.replay_ratio) == (
        None, {"all": ["player_*"]}, {"all": "cuda:1"}, 0.5)
    assert config.ray_learner_resources == {"node": 2} and config.check_rewards is False
    path = tmp_path / "run.toml"
    path.write_text(first)
    assert config_of(printed("--config", str(path))) == config
    path.write_text(printed())  # the recipe's self-play, as resolved, comes back the same from the file
    assert config_of(printed("--config", str(path))) == config_of(printed())
    assert "\n# progress = false  (on in a terminal)\n" in printed(), "left to the terminal unless given"
    assert "\nprogress = true\n" in printed("--progress")


def test_print_config_writes_every_learner_option_and_config_reads_them_back(tmp_path):
    from pzasync.learners.dqn import DQNOptions
    from pzasync.training.learner_file import learners_of

    first = printed("--learner", "dqn,lr=0.002,hidden=[32]")
    learners = learners_of(first)
    (name, (learner, options)), = learners.items()
    assert (name, learner) == ("*", "dqn") and set(options) == set(DQNOptions.names())
    assert options["lr"] == 0.002 and options["hidden"] == [32] and options["gamma"] == 0.99, "defaults filled in"
    assert "# Adam's learning rate.\nlr = 0.002\n" in first, "each option under its doc"
    path = tmp_path / "run.toml"
    path.write_text(first)
    assert printed("--config", str(path)) == first, "the file runs again the same way"
    assert learners_of(printed("--config", str(path), "--learner", "ppo")) == {"*": ("ppo", learners_of(
        printed("--learner", "ppo"))["*"][1])}, "--learner replaces the file's learners"
    path.write_text(first.replace("lr = 0.002", "lr = -1"))
    code, output = invoke("train", TTT, "--config", str(path), "--steps", "10", "--out", str(tmp_path / "runs"))
    assert code == 2 and "DQNLearner option lr=-1: must be a number > 0" in output, output
    path.write_text('[learners."*"]\nlr = 0.1\n')
    code, output = invoke("train", TTT, "--config", str(path), "--print-config")
    assert code == 2 and 'needs learner = "NAME"' in output, output


def test_flags_override_the_file_and_the_recipe_fills_what_neither_gives(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("seed = 5\n[learning]\npublish_every = 7\n[evaluation]\neval_episodes = 30\n")
    config = config_of(printed("--config", str(path), "--publish-every", "9", "--eval-episodes", "40"))
    assert (config.seed, config.publish_every, config.eval_episodes) == (5, 9, 40)
    assert config.agent_groups == {"players": ["*"]} and config.envs_per_actor == 8, "tictactoe's recipe"
    assert config.league == {"*": "latest=0.5;snapshot=0.5"} and config.eval_vs == "perfect"
    code, output = invoke("train", TTT, "--config", str(path), "--league", "none", "--vs", "none",
                          "--envs-per-actor", "2", "--print-config")
    config = config_of(output)
    assert (config.league, config.eval_vs, config.envs_per_actor) == ({}, None, 2)


def test_a_bad_value_in_the_file_stops_train_in_one_line(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[reliability]\nmax_learner_restarts = -1\n")
    code, output = invoke("train", TTT, "--config", str(path), "--steps", "10", "--out", str(tmp_path / "runs"))
    assert code == 2 and "Traceback" not in output, output
    assert f"{path}: option max_learner_restarts=-1: must be an integer >= 0" in " ".join(output.split())
    assert not (tmp_path / "runs").exists()


def test_eval_episodes_is_the_evaluators_and_final_episodes_the_final_evaluations():
    config = config_of(printed("--eval-episodes", "12", "--final-episodes", "0"))
    assert config.eval_episodes == 12
    code, output = invoke("train", TTT, "--final-episodes", "-1", "--print-config")
    assert code == 2 and "--final-episodes -1: must be >= 0" in output


# ---------------------------------------------------------------------------------------- the bench command
def bench_printed(*args: str) -> str:
    code, output = invoke("bench", "--print-config", *args)
    assert code == 0, output
    return output


def bench_settings_of(text: str) -> BenchSettings:
    return BenchSettings(**BenchSettings.toml_values(text)).validate()


def test_bench_print_config_then_config_gives_the_same_settings(tmp_path):
    first = bench_printed(C4, "--learner", "dqn,lr=0.001", "--learner-for", "player_1=random", "--steps", "900",
                          "--configs", "bare_policy,sequential", "--envs-per-actor", "1,4", "--option",
                          "publish_every=20", "--group", "first=player_0", "--target", "0.4")
    settings = bench_settings_of(first)
    assert settings.learners == {"*": ("dqn", {"lr": 0.001}), "player_1": "random"}
    assert (settings.agent_steps, settings.configs, settings.envs_per_actor, settings.target) == (
        900, ("bare_policy", "sequential"), (1, 4), 0.4)
    assert settings.run_options == {"publish_every": 20, "agent_groups": {"first": ["player_0"]}}
    path = tmp_path / "bench.toml"
    path.write_text(first)
    assert bench_printed("--config", str(path)) == first


def test_bench_flags_override_the_file(tmp_path):
    path = tmp_path / "bench.toml"
    path.write_text('[bench]\nseeds = 3\nagent_steps = 500\nlearners = "ppo"\n')
    settings = bench_settings_of(bench_printed("--config", str(path), "--steps", "700", "--learner-for",
                                               "player_1=random"))
    assert (settings.seeds, settings.agent_steps) == (3, 700)
    assert settings.learners == {"*": "ppo", "player_1": "random"}, "--learner-for on top of the file's learner"


def test_a_bad_bench_file_is_refused_naming_the_setting(tmp_path):
    path = tmp_path / "bench.toml"
    path.write_text("[bench]\nseeds = 0\n")
    code, output = invoke("bench", "--config", str(path), "--print-config")
    assert code == 2 and "Traceback" not in output, output
    assert "seeds=0" in output and str(path) in " ".join(output.split())


# ------------------------------------------------------------------------------------------------- docs
def test_every_run_option_has_a_row_in_the_docs_table():
    text = (ROOT / "docs" / "running.md").read_text()
    table = text[text.index("### RunConfig"):text.index("### Agent groups")]
    rows = {name for line in table.splitlines() if line.startswith("| `")
            for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert not [f.name for f in fields(RunConfig) if f.name not in rows], "docs/running.md, RunConfig table"
    assert "[acting]" in text and "--print-config" in text and "--config FILE" in text


def test_the_docs_example_file_is_a_valid_configuration():
    text = (ROOT / "docs" / "running.md").read_text()
    example = text[text.index("```toml\n# connect_four.toml") + 8:]
    values = RunConfig.toml_values(example[:example.index("```")], "docs example")
    config = RunConfig(**values, agent_groups={"players": ["*"]}).validate()
    assert config.envs_per_actor == 16 and config.league["players"].endswith("negamax,depth=2=0.1")
