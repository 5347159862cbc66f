"""`pzasync sweep` (pzasync/sweep, docs/sweeps.md) and `pzasync suite --parallel` (bench/side_by_side.py): a sweep
file is checked as a whole before any trial starts, each error naming the key at fault; a tiny sweep trains its
trials side by side, prunes one, and writes sweep.json, sweep.png and a best.toml that `pzasync train --config`
reads; the suite's runs side by side give the report their sequential run gives."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from pzasync.bench.side_by_side import core_slices
from pzasync.cli import main
from pzasync.errors import ConfigError
from pzasync.sweep import SweepFile
from pzasync.sweep.trial import rounds
from pzasync.training import Trainer
from pzasync.training.learner_file import read_config

TICTACTOE = "pettingzoo.classic.tictactoe_v3"
HEAD = f"""
[sweep]
env = "{TICTACTOE}"
minutes = 0.1
trials = 2
"""
SPACE = """
[space]
"learners.dqn.lr" = { log_uniform = [1e-4, 3e-3] }
"""


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    (HEAD.replace("trials = 2", "trials = 0") + SPACE, "[sweep] trials=0: must be an integer >= 1"),
    (HEAD + "trails = 3\n" + SPACE, "unknown option 'trails' in [sweep]"),
    (HEAD.replace("minutes = 0.1", "minutes = \"soon\"") + SPACE,
     "[sweep] minutes='soon': must be a number > 0 or None"),
    (HEAD + "pruner = \"hyperband\"\n" + SPACE, "[sweep] pruner='hyperband': must be one of ('median', 'none')"),
    (HEAD, "needs a [space] table"),
    (HEAD + '[space]\n"learners.dqn.lr" = { log_uniform = [0.0, 1e-3] }\n', "'learners.dqn.lr': log_uniform [0.0, "
                                                                            "0.001]: LOW must be > 0"),
    (HEAD + '[space]\n"learners.dqn.lr" = { uniform = [3e-3, 1e-4] }\n', "LOW must be below HIGH"),
    (HEAD + '[space]\n"learners.dqn.lr" = { normal = [1e-3, 1e-4] }\n', "'learners.dqn.lr': must be a table with one "
                                                                         "of uniform"),
    (HEAD + '[space]\n"run.envs_per_actor" = { int_uniform = [2.0, 8.0] }\n', "int_uniform needs two integers"),
    (HEAD + '[space]\n"lr" = { choice = [1, 2] }\n', "[space] 'lr': a key is 'run.OPTION'"),
    (HEAD + SPACE + "[acting]\nenvs_per_actor = 0\n", "option envs_per_actor=0: must be an integer >= 1 or 'auto'"),
    (HEAD + SPACE + "[run]\nout_dir = \"elsewhere\"\n", "option 'out_dir' is the sweep's to set"),
])
def test_a_sweep_file_that_is_malformed_is_refused_on_reading_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as error:
        SweepFile.read(_file(tmp_path, text))
    assert message in str(error.value) and str(tmp_path / "sweep.toml") in str(error.value)


@pytest.mark.parametrize("space, message", [
    ('"run.envs_per_actr" = { choice = [4, 8] }', "[space] 'run.envs_per_actr': no run option 'envs_per_actr'"),
    ('"learners.dqn.learning_rate" = { choice = [0.1] }', "'learners.dqn.learning_rate': learner dqn has no option "
                                                          "'learning_rate'"),
    ('"learners.ppo.lr" = { choice = [0.1] }', "'learners.ppo.lr': 'ppo' is neither a learner unit of this run"),
    ('"run.envs_per_actor" = { uniform = [4, 16] }', "'run.envs_per_actor': uniform draws numbers with fractions"),
    ('"learners.*.lr" = { choice = [1e-3, -1.0] }', "[space] 'learners.*.lr' can draw -1.0: agent '*': DQNLearner "
                                                    "option lr=-1.0: must be a number > 0"),
    ('"run.env_workers" = { choice = [0, 2] }', "'run.env_workers' can draw 2: option env_workers=2: must be at most "
                                                "envs_per_actor=1"),
    ('"learners.dqn.lr" = { choice = [1e-3] }\n"learners.*.lr" = { choice = [1e-4] }',
     "'learners.*.lr' and 'learners.dqn.lr' both set *.lr"),
])
def test_a_sweep_space_the_run_refuses_is_refused_before_any_trial_naming_the_key(tmp_path, space, message):
    """Checked by the declarations that check `pzasync train --config`: run options (with the file's fixed ones:
    env_workers against envs_per_actor), each learner's options, every value a distribution can draw."""
    text = HEAD + "[space]\n" + space + "\n[acting]\nenvs_per_actor = 1\n"
    with pytest.raises(ConfigError) as error:
        SweepFile.read(_file(tmp_path, text)).check()
    assert message in str(error.value)


def test_the_sweep_command_says_what_is_wrong_in_one_line_and_exits_2(tmp_path):
    path = _file(tmp_path, HEAD + '[space]\n"learners.dqn.lr" = { log_uniform = [-1.0, 1e-3] }\n')
    result = CliRunner().invoke(main, ["sweep", path, "--check"])
    assert result.exit_code == 2
    assert "error:" in result.output and "'learners.dqn.lr'" in result.output and "Traceback" not in result.output


def test_the_baseline_trial_takes_each_searched_option_at_its_unsearched_value(tmp_path):
    """The fixed file's value, else the env's recipe's, else the default; none where the space cannot draw it."""
    text = (HEAD + SPACE + '"run.envs_per_actor" = { choice = [4, 8] }\n'
            '"run.publish_every" = { int_uniform = [5, 20] }\n')
    assert SweepFile.read(_file(tmp_path, text)).baseline_params() == (
        {"learners.dqn.lr": 0.0005, "run.envs_per_actor": 8, "run.publish_every": 10}, "")
    params, why = SweepFile.read(_file(tmp_path, text + "[acting]\nenvs_per_actor = 2\n")).baseline_params()
    assert params is None and why == "run.envs_per_actor = 2 is outside its choice [4, 8]"


def test_each_slot_runs_on_its_own_share_of_the_cores():
    assert core_slices(2, [0, 1, 2, 3]) == [[0, 1], [2, 3]]
    assert core_slices(3, [0, 1, 2, 3]) == [[0], [1], [2]]
    assert core_slices(3, [0, 1]) == [[0], [1], [0]]  # more slots than cores: shared round-robin


def test_a_round_counts_once_it_is_complete(tmp_path):
    """A round's rows are appended one by one: while the run goes on, the last round counts once it has as many
    rows as a complete one; once the run has finished, every round counts."""
    run = tmp_path / "tictactoe_v3-1"
    run.mkdir()
    (run / "run.json").write_text("{}")
    row = {"kind": "eval", "wall_s": 1.0, "agent_steps": 10, "outcomes": True, "win_rate": 0.5, "mean_return": 0.1}
    lines = [dict(row, round=0, agent="player_1"), dict(row, round=0, agent="player_2", win_rate=0.0),
             dict(row, round=1, agent="player_1")]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "eval", "rou')
    assert [(r["round"], r["score"]) for r in rounds(tmp_path, "score")] == [(0, 0.25)]
    assert [r["round"] for r in rounds(tmp_path, "score", finished=True)] == [0, 1]
    assert [r["score"] for r in rounds(tmp_path, "mean_return")] == [pytest.approx(0.1)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_tiny_sweep_prunes_a_trial_and_writes_its_report_and_a_best_toml_that_train_reads(tmp_path):
    """Three trials of tictactoe, two side by side: the first is the baseline (the options unsearched), the second
    is pruned at its first evaluation round (a pruner forced to) and stops as a run stops on Ctrl-C; the others
    complete and are scored by their final evaluation.
    best.toml is read by `pzasync train --config`'s loader and holds the best trial's sampled values."""
    optuna = pytest.importorskip("optuna", reason="the `sweep` extra (pip install 'pzasync[sweep]')")
    from pzasync.sweep import run_sweep

    class PruneTrialOne(optuna.pruners.BasePruner):
        def prune(self, study, trial) -> bool:
            return trial.number == 1

    text = f"""
[sweep]
env = "{TICTACTOE}"
minutes = 0.25
trials = 3
parallel = 2
metric = "mean_return"
final_episodes = 10

[space]
"learners.dqn.lr" = {{ log_uniform = [1e-4, 3e-3] }}
"run.envs_per_actor" = {{ choice = [4, 8] }}

[evaluation]
eval_every_s = 1.0
eval_episodes = 4
"""
    out = tmp_path / "out"
    seen: list[int] = []
    report = run_sweep(SweepFile.read(_file(tmp_path, text)), out, pruner=PruneTrialOne(),
                       on_change=lambda r: seen.append(sum(t.state == "running" for t in r.trials)))
    assert max(seen) == 2  # two trials side by side
    states = {t.number: t.state for t in report.trials}
    assert states == {0: "complete", 1: "pruned", 2: "complete"}, [(t.state, t.error) for t in report.trials]
    # trial 0 is the baseline: the recipe's envs_per_actor (8) and DQN's default learning rate, unsearched
    assert report.trials[0].baseline and report.trials[0].params == {"learners.dqn.lr": 0.0005,
                                                                      "run.envs_per_actor": 8}
    pruned = report.trials[1]
    assert pruned.rounds and pruned.score is None
    data = json.loads((out / "sweep.json").read_text())
    assert data["schema"] == "pzasync-sweep/1" and [t["state"] for t in data["trials"]] == ["complete", "pruned",
                                                                                           "complete"]
    assert data["baseline"] == {"number": 0, "state": "complete", "score": report.trials[0].score}
    best = report.best
    assert best is not None and data["best"]["number"] == best.number
    assert best.score == max(t.score for t in report.trials if t.state == "complete")
    assert best.final["metric"] == "mean_return" and set(best.final["units"]) == {"player_1", "player_2"}
    # the pruned trial's run stopped on its signal; the complete ones at their budget
    pruned_log = (Path(pruned.folder) / "trial.log").read_text()
    assert "training pettingzoo.classic.tictactoe_v3" in pruned_log
    assert json.loads((Path(pruned.run_dir) / "result.json").read_text())["stopped_because"] == \
        "interrupted (SIGINT)"
    # best.toml is a `pzasync train --config` file with the best trial's values
    options, learners = read_config(out / "best.toml")
    assert options["envs_per_actor"] == best.params["run.envs_per_actor"]
    assert learners["*"][1]["lr"] == pytest.approx(best.params["learners.dqn.lr"])
    trainer = Trainer(TICTACTOE, minutes=0.1, file_options=options, file_learners=learners, say=lambda note: None)
    assert trainer.config.envs_per_actor == best.params["run.envs_per_actor"]
    result = CliRunner().invoke(main, ["train", TICTACTOE, "--config", str(out / "best.toml"), "--print-config"])
    assert result.exit_code == 0, result.output
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


SUITE_SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "suite-schema.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_suite_side_by_side_gives_the_rows_it_gives_one_run_at_a_time(tmp_path):
    """Two seeds of a small env, --parallel 2 against --parallel 1: both reports are valid, with the same env,
    seeds, scoring, metric and units, the same (seeded) baselines, and a curve per run ending in its final round."""
    reports = {}
    for parallel in (1, 2):
        out = tmp_path / f"p{parallel}"
        result = CliRunner().invoke(main, ["suite", "mpe2.simple_speaker_listener_v4", "--minutes", "0.08", "--seeds",
                                           "2", "--out", str(out), "--eval-every", "1", "--eval-episodes", "2",
                                           "--baseline-episodes", "4", "--parallel", str(parallel)],
                                    env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        reports[parallel] = json.loads((out / "suite.json").read_text())
        jsonschema.validate(reports[parallel], SUITE_SCHEMA)
    (one,), (two,) = reports[1]["envs"], reports[2]["envs"]
    assert reports[2]["settings"]["parallel"] == 2
    for key in ("env", "short", "metric", "yardstick", "scoring", "scored_units", "baselines"):
        assert one[key] == two[key], key
    assert [r["seed"] for r in one["runs"]] == [r["seed"] for r in two["runs"]] == [0, 1]
    for run in two["runs"]:
        assert run["curve"] and run["curve"][-1]["final"] and run["final"] == run["curve"][-1]["score"]
        assert str(tmp_path / "p2" / "runs") in run["run_dir"]
    assert len({r["run_dir"] for r in two["runs"]}) == 2
