"""The command line: a real rollout with a summary, the env list, and user errors without tracebacks."""

from __future__ import annotations

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
