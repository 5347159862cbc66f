"""Every script in examples/ runs, briefly, so none can rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def run_example(name: str, *args: str, stdin: str | None = None, timeout: float = 240, cwd=None) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_every_example_is_covered_here():
    tested = {"wrap_env.py", "connect_four_selfplay.py", "pistonball_shared.py", "custom_learner.py",
              "benchmark.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.slow  # SuperSuit wrappers and groups: covered by tests/test_compat.py and tests/test_groups.py
def test_wrap_env():
    out = run_example("wrap_env.py", "--steps", "600")
    assert "rewards conserved" in out
    lines = [line for line in out.splitlines() if "group=" in line]
    assert len(lines) == 4 and {line.split("group=")[1].split()[0] for line in lines} == {"archers", "knights"}


@pytest.mark.slow
def test_connect_four_selfplay_then_a_game_in_the_terminal(tmp_path):
    moves = "9\nx\n" + "0\n1\n2\n3\n4\n5\n6\n" * 8  # two invalid entries first: asked again
    out = run_example("connect_four_selfplay.py", "--steps", "600", "--play", "--out", str(tmp_path), stdin=moves)
    assert "trained 600 agent steps" in out
    assert "choose one of the open columns" in out
    assert any(end in out for end in ("you win!", "draw", "the agent wins"))
    assert "0 1 2 3 4 5 6" in out  # the board was shown


@pytest.mark.slow  # pixels through SuperSuit: covered by tests/test_compat.py's pistonball cases (slow too)
def test_pistonball_shared():
    out = run_example("pistonball_shared.py", "--pistons", "3", "--steps", "240", "--batch-size", "32")
    assert "3 pistons share one PPO learner; observations (64, 64, 3) uint8" in out
    updates = int(out.split(" PPO updates")[0].rsplit(",", 1)[1].split()[-1])
    assert updates >= 1


@pytest.mark.slow
def test_custom_learner():
    out = run_example("custom_learner.py", "--steps", "3000")
    assert "updates" in out and "player_0 mean episode return" in out


@pytest.mark.slow  # five trials in fresh processes; run_bench, its report and plot are covered by tests/test_bench.py
def test_benchmark(tmp_path):
    report_path, plot_path = tmp_path / "b.json", tmp_path / "b.png"
    out = run_example("benchmark.py", "--env", "pettingzoo.classic.tictactoe_v3", "--steps", "300", "--seeds", "1",
                      "--json", str(report_path), "--plot", str(plot_path))
    report = json.loads(report_path.read_text())
    assert [t["config"] for t in report["trials"]] == ["bare_random", "bare_policy", "sequential",
                                                        "async_double_buffer", "async_snapshot"]
    assert "async (double_buffer) / sequential, wall time" in out
    assert plot_path.read_bytes()[:4] == b"\x89PNG"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
