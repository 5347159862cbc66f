"""The command line: a real rollout with a summary, the env list, and user errors without tracebacks."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pzasync.cli import main


def test_rollout_prints_a_per_agent_summary():
    result = CliRunner().invoke(main, ["rollout", "pettingzoo.classic.tictactoe_v3", "--steps", "300", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "300 agent steps" in result.output and "rewards conserved in every episode" in result.output
    assert "player_1" in result.output and "player_2" in result.output


def test_unknown_env_is_one_clear_line_with_close_matches():
    result = CliRunner().invoke(main, ["rollout", "pettingzoo.classic.tictactoe_v2"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "unknown env 'pettingzoo.classic.tictactoe_v2'" in result.output
    assert "pettingzoo.classic.tictactoe_v3" in result.output


def test_envs_lists_installed_families_with_agent_counts():
    result = CliRunner().invoke(main, ["envs"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 3}
    assert "pettingzoo.classic.connect_four_v3" in lines and "mpe2.simple_spread_v3" in lines
    assert "│ 3 " in lines["mpe2.simple_spread_v3"].replace("  ", " ")
    assert "AEC+par" in lines["mpe2.simple_spread_v3"]


def test_train_then_eval_on_a_tiny_budget(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "1500", "--runner",
                                  "sequential", "--learner", "dqn,learning_starts=200", "--learner-for",
                                  "player_2=random", "--out", str(tmp_path), "--final-episodes", "30",
                                  "--eval-every", "0", "--actors", "auto", "--env-workers", "auto"],
                           env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "1,500 agent steps" in result.output and "player_1" in result.output
    assert "actors=auto: 1 (1 with the sequential runner)" in result.output  # each auto choice, with why
    assert "env_workers=auto: 0 (" in result.output
    assert "perfect" in result.output and "untrained" in result.output and "random" in result.output
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "returns.png").exists() and (run_dir / "checkpoints" / "player_1.pt").exists()
    assert not (run_dir / "checkpoints" / "player_2.pt").exists(), "random players have nothing to save"
    evaluated = runner.invoke(main, ["eval", str(run_dir), "--episodes", "40"], env={"COLUMNS": "250"})
    assert evaluated.exit_code == 0, evaluated.output
    assert "player_1" in evaluated.output and "40 episodes per agent" in evaluated.output


@pytest.mark.slow  # 5 s; test_train_then_eval_on_a_tiny_budget scores a run by default
def test_snapshots_are_kept_in_the_run_directory_and_scored_by_eval(tmp_path):
    """--snapshot-every-steps writes each learning unit's policy once per snapshot (a group's members share it);
    `pzasync eval --snapshot STEPS` scores that policy, not the final checkpoint, and an unknown count is one line
    naming the snapshots there are."""
    import json

    import numpy as np

    from pzasync.evaluation.evaluate import load_run_policies
    from pzasync.learners import policy_to_vector

    runner = CliRunner()
    result = runner.invoke(main, ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "1500", "--runner",
                                  "sequential", "--learner", "dqn,learning_starts=100,hidden=[32]", "--group",
                                  "players=player_*", "--out", str(tmp_path), "--final-episodes", "10",
                                  "--eval-every", "0", "--snapshot-every-steps", "500"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    (run_dir,) = list(tmp_path.iterdir())
    rows = [json.loads(line) for line in (run_dir / "snapshots.jsonl").read_text().splitlines()]
    assert len(rows) >= 3 and [row["agent_steps"] for row in rows] == sorted(row["agent_steps"] for row in rows)
    assert all(set(row["units"]) == {"players"} for row in rows)
    first = rows[0]["agent_steps"]
    vector = np.load(run_dir / rows[0]["units"]["players"]["file"])
    snapshot = load_run_policies(run_dir, snapshot=first)
    final = load_run_policies(run_dir)
    assert snapshot["player_1"][0] is snapshot["player_2"][0]  # one policy object for the group
    assert np.array_equal(policy_to_vector(snapshot["player_1"][0]), vector)
    assert not np.array_equal(policy_to_vector(final["player_1"][0]), vector), "the run learned after the snapshot"
    scored = runner.invoke(main, ["eval", str(run_dir), "--episodes", "10", "--snapshot", str(first), "--json", "-"])
    assert scored.exit_code == 0, scored.output
    document = json.loads(scored.stdout)
    assert document["snapshot"] == first and {r["unit"] for r in document["results"]} >= {"player_1", "player_2"}
    missing = runner.invoke(main, ["eval", str(run_dir), "--snapshot", "7"])
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    assert "no policy snapshot at 7 agent steps; snapshots kept: " + ", ".join(
        str(row["agent_steps"]) for row in rows) in " ".join(missing.output.split())
    assert "expected agent steps" in runner.invoke(main, ["eval", str(run_dir), "--snapshot", "many"]).output

    curve = runner.invoke(main, ["eval", str(run_dir), "--episodes", "10", "--snapshot", "all", "--json", "-"],
                          env={"COLUMNS": "250"})
    assert curve.exit_code == 0, curve.output
    documents = json.loads(curve.stdout)
    assert [d["snapshot"] for d in documents] == [row["agent_steps"] for row in rows]
    timeless = [{k: v for k, v in d.items() if k != "seconds"} for d in (documents[0], document)]
    assert timeless[0] == timeless[1], "a snapshot scores the same alone and in the curve (same episodes and seeds)"
    assert (run_dir / "snapshots.png").stat().st_size > 0
    table = [line for line in curve.stderr.splitlines() if line.startswith("│") and "player_1" in line]
    assert len(table) == len(rows)


def test_train_rejects_bad_learner_options_without_traceback(tmp_path):
    result = CliRunner().invoke(main, ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "100", "--learner",
                                       "dqn,gamma", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "learner option 'gamma' in 'dqn,gamma' is not KEY=VALUE" in result.output


def test_default_train_is_self_play_in_a_league_scored_on_the_yardstick_in_80_columns(tmp_path):
    """No --group or --learner-for on a board game with a yardstick: the seats share one learner in a league, an
    evaluator scores them while training, and the summary fits an 80-column terminal uncut."""
    import json

    result = CliRunner().invoke(main, ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "3000", "--runner",
                                       "sequential", "--learner", "dqn,learning_starts=200,hidden=[32]", "--out",
                                       str(tmp_path), "--final-episodes", "20", "--eval-every", "0.5"],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())  # lines wrap at 80 columns
    assert "player_1, player_2 (2 agents): dqn, group players;" in words and "league latest=0.5;snapshot=0.5" in words
    assert "…" not in result.output and max(len(line) for line in result.output.splitlines()) <= 80
    rows = [line for line in result.output.splitlines() if line.startswith("│ player")]
    assert {tuple(cell.strip() for cell in row.split("│")[1:4]) for row in rows} >= {
        (seat, policy, against) for seat in ("player_1", "player_2")
        for policy, against in (("trained", "perfect"), ("untrained", "perfect"), ("trained", "random"))}
    (run_dir,) = list(tmp_path.iterdir())
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    assert {e["match"]["kind"] for e in episodes} <= {"latest", "snapshot"}
    assert (run_dir / "checkpoints" / "players.pt").exists()
    assert json.loads((run_dir / "run.json").read_text())["config"]["envs_per_actor"] == 8, "self-play's copies"
    assert "8 env copies" in words


def test_connect_four_self_play_trains_its_second_seat_more_by_default(tmp_path):
    """On connect_four the second seat is the league's trainee in 4 of 5 non-latest games unless told otherwise
    (docs/benchmarks.md#connect_four); tictactoe keeps uniform draws."""
    import json

    from pzasync.recipes import default_trainee_weights

    assert default_trainee_weights("connect_four_v3") == {"player_1": 4.0}
    assert default_trainee_weights("pettingzoo.classic.tictactoe_v3") == {}
    result = CliRunner().invoke(main, ["train", "pettingzoo.classic.connect_four_v3", "--steps", "400", "--runner",
                                       "sequential", "--learner", "dqn,learning_starts=100,hidden=[16],torso=mlp",
                                       "--envs-per-actor", "2", "--final-episodes", "0", "--eval-every", "0",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "trainee weights player_1=4" in " ".join(result.output.split())
    (run_dir,) = list(tmp_path.iterdir())
    assert json.loads((run_dir / "run.json").read_text())["config"]["league_trainee_weights"] == {"player_1": 4.0}


def test_train_weighs_league_trainee_seats_and_refuses_bad_ones(tmp_path):
    """--league-trainee SEAT=W reaches RunConfig.league_trainee_weights (run.json, the start line); a seat outside
    the league, or weights without a league, are refused in one line before anything starts."""
    import json

    base = ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "600", "--runner", "sequential", "--learner",
            "dqn,learning_starts=100,hidden=[16]", "--final-episodes", "0", "--eval-every", "0"]
    result = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "ok"), "--league-trainee", "player_2=3"])
    assert result.exit_code == 0, result.output
    assert "trainee weights player_2=3" in " ".join(result.output.split())
    (run_dir,) = list((tmp_path / "ok").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["config"]["league_trainee_weights"] == {"player_2": 3}
    for args, message in ((["--league-trainee", "player_9=1"], "'player_9' is not a seat of a unit with a league"),
                          (["--league", "none", "--league-trainee", "player_2=2"], "give --league too")):
        result = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "bad"), *args])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())


@pytest.mark.parametrize("args, message", [
    (["--backend", "ray", "--runner", "sequential"], "--backend ray: only the async runner has learners apart"),
    (["--ray-address", "auto"], "option ray_address='auto': connects to a Ray cluster: it needs backend='ray'"),
    (["--runner", "sequential", "--learner-processes", "2"], "--learner-processes: learner host processes are"),
    (["--learner-processes", "0"], "option learner_processes=0: must be an integer >= 1"),
    (["--actors", "many"], "'many' is neither an integer nor 'auto'"),
], ids=["ray-sequential", "address-without-ray", "hosts-sequential", "hosts-zero", "actors-word"])
def test_train_refuses_backend_options_that_cannot_go_together(tmp_path, args, message):
    result = CliRunner().invoke(main, ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "100",
                                       "--out", str(tmp_path), *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_the_self_play_default_learns_from_mirror_images_only_where_the_board_is_symmetric():
    """connect_four plays the same mirrored and its actions are columns; tictactoe's actions are cells, and
    `mirror` would refuse it, so its default must not ask for it."""
    from pzasync.recipes import SELF_PLAY, default_train_learner
    from pzasync.specs import parse_learner_spec

    for env_id in ("pettingzoo.classic.connect_four_v3", "connect_four_v3"):
        assert parse_learner_spec(default_train_learner(env_id))[1]["mirror"] is True, env_id
    assert default_train_learner("pettingzoo.classic.tictactoe_v3") == SELF_PLAY.learner
    assert "mirror" not in parse_learner_spec(default_train_learner("pettingzoo.classic.tictactoe_v3"))[1]


def test_train_scores_returns_that_are_not_game_results_by_their_mean(tmp_path):
    """simple_spread's returns are negative distances: a win/draw/loss table would read 0% won, 100% lost for
    every policy. Its final table, live column and eval.png score the mean return instead."""
    from pzasync.evaluation.evaluate import EvalResult
    from pzasync.runtime.monitor import _eval_cell

    result = CliRunner().invoke(main, ["train", "mpe2.simple_spread_v3", "--steps", "600", "--runner", "sequential",
                                       "--learner", "dqn,learning_starts=100", "--out", str(tmp_path),
                                       "--final-episodes", "4", "--eval-every", "0"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "mean return [95% CI]" in result.output and "win [95% CI]" not in result.output
    assert "4 episodes per team and policy" in result.output  # scored as a team (tests/test_scoring.py)
    assert EvalResult("a", "random", [1.0, -1.0, 0.0]).outcomes
    assert not EvalResult("a", "random", [-24.5, -30.1]).outcomes
    row = {"win_rate": 0.0, "win_rate_ci95": [0.0, 0.1], "mean_return": -27.3, "mean_return_ci95": 1.5}
    assert _eval_cell({**row, "outcomes": False}) == "-27.3 ± 1.5"
    assert _eval_cell({**row, "outcomes": True}) == "0% [0%-10%]"


def test_train_with_no_learning_agent_ends_cleanly_without_scores(tmp_path):
    result = CliRunner().invoke(main, ["train", "mpe2.simple_spread_v3", "--steps", "300", "--runner", "sequential",
                                       "--learner", "random", "--out", str(tmp_path), "--final-episodes", "4"],
                                env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "no agent learns here, so there is no trained policy to score" in result.output
    assert "holds no checkpoints" not in result.output


def test_the_final_evaluation_fits_a_quarter_of_the_training_time(tmp_path, monkeypatch):
    import importlib

    train_cli = importlib.import_module("pzasync.training.trainer")  # where `pzasync train`'s final evaluation is sized
    monkeypatch.setattr(train_cli, "FINAL_SHARE", 1e-4)  # any real game costs more than this share of the run
    result = CliRunner().invoke(main, ["train", "pettingzoo.classic.tictactoe_v3", "--steps", "300", "--runner",
                                       "sequential", "--out", str(tmp_path), "--eval-every", "0"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "final evaluation: the 8 game(s) per seat and opponent that timed it (400 would take" in text
    assert "--final-episodes N chooses" in text and "greedy play, 8 games per seat" in text, "the summary still comes"
    assert "untrained" in text, "the timed round played the baselines too, and is the final evaluation"


def test_learners_lists_every_builtin_and_each_ones_options_from_its_declarations():
    from pzasync.learners import BUILTIN
    from pzasync.learners.dqn import DQNOptions

    result = CliRunner().invoke(main, ["learners"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in BUILTIN)
    result = CliRunner().invoke(main, ["learners", "dqn"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for name, doc in DQNOptions.docs().items():
        row = next(line for line in result.output.splitlines() if line.startswith(f"│ {name} "))
        assert doc.split(".")[0][:30] in row, (name, row)
    assert "a number in (0, 1]" in result.output, "target_tau's rule, in words"
    result = CliRunner().invoke(main, ["learners", "nope"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and result.output.startswith("error: unknown learner 'nope'"), result.output


def test_the_training_summary_has_one_row_per_learning_unit(monkeypatch):
    """A group's row: its members' short name, its learner's figures once (dropped transitions are the group's
    buffer's, which every member's AgentResult repeats: not summed); an agent alone keeps its own row."""
    import importlib

    from rich.console import Console

    from pzasync.runtime.results import AgentResult, RunResult

    train_cli = importlib.import_module("pzasync.cli.train")  # the module (`pzasync.cli.train` is the command)

    agents = {f"red_{i}": AgentResult(f"red_{i}", "dqn", group="red", updates=900, published_version=45,
                                      transitions_written=100, transitions_dropped=7, policy_lag_mean=2.0,
                                      policy_lag_p95=5.0) for i in range(81)}
    agents["referee"] = AgentResult("referee", "random", transitions_dropped=0)
    result = RunResult(runner="async", env="battle", agent_steps=8100, episodes=10, wall_seconds=10.0,
                       startup_seconds=1.0, acting_seconds=9.0, actor_steps_per_second=900.0,
                       stopped_because="agent-step budget reached", agents=agents)
    monkeypatch.setattr(train_cli, "console", Console(record=True, width=120))
    train_cli._print_summary(result)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in train_cli.console.export_text().splitlines()
            if line.startswith("│")]
    assert rows == [["red_0..red_80 (81 agents)", "dqn (red)", "900", "45", "2/5", "7"],
                    ["referee", "random", "0", "0", "0/0", "0"]]
