"""Remote env ids through the rest of the runtime (docs/remote.md): the async runner on an address and on a
`cmd:` id, several actors each with servers of their own, the evaluator while training, `pzasync eval` on a
run, `pzasync bench`, and env_workers (ignored, with a log line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from test_remote import C4, SERVER, python_server

import pzasync
from pzasync.cli import main

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_remote_server_left")]
DQN = ("dqn", {"learning_starts": 64, "batch_size": 32})


@pytest.fixture
def unix_server(tmp_path):
    """A server of connect four listening on a Unix socket, in its own process: its address."""
    path = tmp_path / "c4.sock"
    proc = subprocess.Popen([sys.executable, str(SERVER), C4, "--socket", str(path)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.05)
    yield f"unix://{path}"
    proc.terminate()
    proc.wait(10)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" in f.read()
    except OSError:
        return True


# The `cmd:` case with `-m slow`: the default run trains the async runner on `cmd:` ids with two actor processes
# (test_each_of_two_actors_launches_its_own_servers_and_all_are_stopped).
@pytest.mark.parametrize("kind", ["unix", pytest.param("cmd", marks=pytest.mark.slow)])
def test_the_async_runner_trains_on_a_remote_env_id(kind, request):
    env_id = request.getfixturevalue("unix_server") if kind == "unix" else python_server(C4)
    result = pzasync.AsyncRunner(env_id, DQN, pzasync.RunConfig(seed=0, envs_per_actor=4)).run(agent_steps=600)
    assert result.agent_steps >= 600 and result.episodes > 10
    assert all(result.agents[a].transitions_written > 0 for a in ("player_0", "player_1")), result.agents


@pytest.mark.slow
def test_each_of_two_actors_launches_its_own_servers_and_all_are_stopped(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    env_id = python_server(C4, f"--index {{index}} --pid-dir {pids}")
    result = pzasync.AsyncRunner(env_id, DQN, pzasync.RunConfig(seed=0, actors=2, envs_per_actor=2)).run(
        agent_steps=600)
    assert result.agent_steps >= 600
    launched = [int(p.name) for p in pids.iterdir()]
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in launched) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in launched), [pid for pid in launched if not _gone(pid)]
    # The plan probes the env (a server each time it makes it); then each actor steps its copies on a server
    # of its own: two servers took many steps.
    steps = sorted(int((pids / str(pid)).read_text().split()[1]) for pid in launched)
    assert len(steps) >= 4 and steps[-2] > 100, steps


@pytest.mark.slow  # 15-20 s on 2 cores; the default run has the evaluator while training (test_league.py), `cmd:`
# servers launched from spawned processes (the two-actors test above) and `pzasync eval` on a remote run (below)
def test_the_evaluator_while_training_builds_the_remote_env(tmp_path):
    # Every evaluation connects to `min(episodes, copies)` env copies per scored seat, and each copy of a `cmd:` id
    # launches a server process of its own (about a second on 2 cores): 2 episodes per evaluation.
    result = pzasync.AsyncRunner(python_server(C4), DQN, pzasync.RunConfig(
        seed=0, envs_per_actor=2, eval_vs="random", eval_every_s=1.0, eval_episodes=2,
        out_dir=str(tmp_path))).run(seconds=8)
    assert result.evaluations, "the evaluator evaluated while training"


@pytest.mark.slow
def test_pzasync_eval_on_a_run_of_a_remote_env_id_builds_the_remote_env(tmp_path):
    env_id = python_server(C4)
    pzasync.SequentialRunner(env_id, DQN, pzasync.RunConfig(seed=0, envs_per_actor=2, out_dir=str(tmp_path))).run(
        agent_steps=300)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "run.json").read_text())["env"] == env_id
    # One env copy: each copy of a `cmd:` id launches a server process of its own (about a second on 2 cores).
    evaluated = CliRunner().invoke(main, ["eval", str(run_dir), "--episodes", "6", "--copies", "1"],
                                   env={"COLUMNS": "250"})
    assert evaluated.exit_code == 0, evaluated.output
    # `pzasync eval` scores the trained seats and, beside them, the untrained baseline (one row each per seat)
    for policy in ("trained", "untrained"):
        rows = [line for line in evaluated.output.splitlines() if "player_" in line and f" {policy} " in line]
        assert len(rows) == 2 and all(sum(map(int, row.split()[-2].split("/"))) == 6 for row in rows), \
            evaluated.output


@pytest.mark.slow  # 9-15 s on 2 cores (the CLI, then a fresh process per trial); the default run has run_bench's
# trials (test_bench.py) and remote env ids in both runners (above)
def test_pzasync_bench_runs_on_a_remote_env_id(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pzasync.cli", "bench", python_server(C4), "--steps", "300", "--seeds", "1",
         "--configs", "bare_random,sequential", "--eval-every", "150", "--eval-episodes", "4", "--json", str(out)],
        capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert [t["config"] for t in report["trials"]] == ["bare_random", "sequential"]
    assert all(t["agent_steps_per_s"] > 0 for t in report["trials"])


def test_env_workers_with_a_remote_env_id_are_ignored_with_a_log_line(capfd):
    result = pzasync.SequentialRunner(python_server(C4), "random", pzasync.RunConfig(
        seed=0, envs_per_actor=2, env_workers=2)).run(agent_steps=100)
    assert result.agent_steps >= 100
    err = capfd.readouterr().err
    assert "pzasync: env_workers=2 is ignored: env 'cmd:" in err and "served by other processes" in err, err
