"""Faults: env crashes, signals, SIGKILL of the main process, bad input, non-finite values (docs/reliability.md,
invariants 5-7)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from faulty_envs import CrashingEnv, NaNEnv, StallingEnv, TextObsEnv

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.core.environments import EnvSpec
from pzasync.errors import (
    EnvCrashedError,
    EnvSpecError,
    InsufficientSharedMemoryError,
    NonFiniteError,
    UnsupportedSpaceError,
)
from pzasync.transport.shm import clean_stale, list_segments

RUNNERS = [AsyncRunner, SequentialRunner]
SCRIPT = str(Path(__file__).parent / "run_script.py")


# -------------------------------------------------------------------------------------------- env crashes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", RUNNERS, ids=lambda r: r.__name__)
def test_env_crash_reaches_the_user_with_context_and_everything_is_released(runner, tmp_path):
    learners = ("custom_learners:RecordingLearner", {})
    run = runner(lambda: CrashingEnv(crash_at=300), learners, RunConfig(seed=0, out_dir=str(tmp_path)))
    with pytest.raises(EnvCrashedError) as info:
        run.run(agent_steps=10_000)
    message = str(info.value)
    assert "raised ValueError: physics exploded at live step 300" in message
    assert "during the turn of agent 'p0', in episode 49 (from 0), at agent step 300 of this run" in message
    assert message.startswith("env 'test_env_crash_reaches_the_user_with_context_and_everything_is_released.")
    assert isinstance(info.value.__cause__, ValueError), "the original exception and traceback are chained"
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "checkpoints" / "p0.pt").exists(), "final checkpoints are written"
    assert (run_dir / "result.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_stuck_env_step_is_reported(capfd):
    config = RunConfig(seed=0, heartbeat_timeout_s=1.0)
    result = SequentialRunner(lambda: StallingEnv(stall_at=100, seconds=3.5), "random", config).run(agent_steps=300)
    assert result.agent_steps == 300, "the run carries on once the step returns"
    assert "pzasync: the actor has not stepped for" in capfd.readouterr().err


# -------------------------------------------------------------------------------------------- signals
def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`: a run's processes are its children when spawned, and the fork server's
    children (its grandchildren) when forked from one (pzasync/runtime/processes.py)."""
    found = _children(pid)
    return found + [d for child in found for d in _descendants(child)]


def _run_processes(pid: int) -> list[int]:
    """The run's own processes below `pid`: its descendants, less multiprocessing's resource tracker and fork
    server, its children; the fork server's children (which keep its command line, being its forks) count."""
    found = []
    for child in _children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker import main" not in command:
            found += ([] if b"forkserver import main" in command else [child]) + _descendants(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def _start_run(tmp_path, seconds: float, env_workers: int = 0, actors: int = 1) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, SCRIPT, str(tmp_path), str(seconds), str(env_workers), str(actors)],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(Path(SCRIPT).parent))
    assert proc.stdout.readline().strip() == "starting"
    return proc


def _wait_until_acting(proc, tmp_path, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(tmp_path.glob("*/episodes.jsonl")):
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    raise AssertionError("the run never started acting")


@pytest.mark.timeout(180)
# All slow (13-17 s each on 2 cores). The default run stops runs by signal in test_stopping.py (SIGTERM, which goes
# through the same handler as a first SIGINT, to a whole `pzasync train` group, during start-up and while training)
# and stops a run of 2 actor processes with env workers, children killed meanwhile (its "all at once" case).
@pytest.mark.slow
@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM], [signal.SIGINT, signal.SIGINT]],
                         ids=["SIGINT with 2 actors and env workers", "SIGTERM", "SIGINT-twice"])
def test_signals_stop_the_run_gracefully_and_leave_nothing(tmp_path, signals):
    """SIGTERM and a first SIGINT go through the same handler; the SIGINT run has 2 actors, each stepping 4
    env copies (two groups) in an env worker: the second actor and the workers ignore the signal, the second
    actor stops at the run's stop flag, and each actor closes its worker."""
    first = signals == [signal.SIGINT]
    proc = _start_run(tmp_path, seconds=120, env_workers=1 if first else 0, actors=2 if first else 1)
    try:
        _wait_until_acting(proc, tmp_path)
        children = _descendants(proc.pid)  # with the second actor's env workers, and multiprocessing's helpers
        assert len(_run_processes(proc.pid)) >= 2, "two learner processes"
        sent = time.monotonic()
        for i, sig in enumerate(signals):
            proc.send_signal(sig)
            time.sleep(0.3 if i == 0 else 0)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 30, f"stopping took {took:.1f}s"
    deadline = time.monotonic() + 10
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(c) for c in children), "learner processes outlived the run"
    assert not [s for s in list_segments() if s[2] == proc.pid], "shared memory left behind"
    if len(signals) == 1:
        assert proc.returncode == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        expected = "interrupted (SIGINT)" if signals[0] == signal.SIGINT else "SIGTERM"
        assert summary["stopped_because"] == expected and summary["agent_steps"] > 0
        run_dir = Path(summary["run_dir"])
        assert (run_dir / "checkpoints" / "player_0.pt").exists() and (run_dir / "result.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_of_the_main_process_at_random_moments_leaves_nothing(tmp_path):
    """Kill a real run at random moments; its learners (and, in the second attempt, its second actor process;
    in the last, its env workers) must exit and its shared memory must go, either unlinked by the orphaned
    learners and actors or removed (and reported) by the next run's clean-up."""
    rng = random.Random(7)
    cleaned_by_next_run = 0
    for attempt in range(3):
        run_dir = tmp_path / f"run{attempt}"
        proc = _start_run(run_dir, seconds=120, env_workers=2 if attempt == 2 else 0, actors=2 if attempt == 1 else 1)
        try:
            time.sleep(rng.uniform(0.5, 3.0))
            if attempt == 1:  # kill it once its actor process runs
                _wait_until_acting(proc, run_dir)
            children = _descendants(proc.pid)
            run_processes = _run_processes(proc.pid)
            proc.kill()
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        deadline = time.monotonic() + 20
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(c) for c in children), f"attempt {attempt}: processes outlived their runner"
        if attempt == 1:
            assert len(run_processes) >= 2, "the learner host and actor 1 were running"
        left = [name for name, _run, pid in list_segments() if pid == proc.pid]
        if left:
            removed = {seg.name for seg in clean_stale()}
            assert set(left) <= removed
            cleaned_by_next_run += 1
        assert not [name for name, _run, pid in list_segments() if pid == proc.pid]
    print(f"runs whose leftovers needed the next run's clean-up: {cleaned_by_next_run} of 3")


# -------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "env, learners, error, message",
    [
        (EnvSpec.of("mpe2.simple_v3", continuous_actions=True), "dqn", UnsupportedSpaceError,
         r"agent 'agent_0': DQN needs a Discrete action space, got Box"),
        (lambda: TextObsEnv(), "random", UnsupportedSpaceError, r"agent 'p0': observation space Text"),
        ("pettingzoo.classic.conect_four_v3", "dqn", EnvSpecError, r"Did you mean: pettingzoo.classic.connect_four_v3"),
    ],
    ids=["dqn-on-continuous", "text-observations", "mistyped-env"],
)
def test_bad_input_fails_before_any_process_starts(env, learners, error, message):
    import multiprocessing as mp

    with pytest.raises(error, match=message):
        AsyncRunner(env, learners, RunConfig()).run(agent_steps=100)
    assert not mp.active_children()


def test_buffers_that_do_not_fit_are_refused_with_both_numbers(monkeypatch):
    monkeypatch.setattr("pzasync.transport.shm.free_shm_bytes", lambda: 50_000_000)
    with pytest.raises(InsufficientSharedMemoryError, match=r"needs [\d,]+ bytes of shared memory but only "
                                                           r"50,000,000 bytes are free"):
        AsyncRunner("pettingzoo.classic.connect_four_v3", "dqn", RunConfig(buffer_capacity=2_000_000))


def test_auto_buffers_shrink_to_fit_where_an_explicit_capacity_would_be_refused(monkeypatch):
    from pzasync.runtime import allocation
    from pzasync.runtime.plan import RunPlan

    plan = RunPlan("pettingzoo.classic.connect_four_v3", "dqn", RunConfig())
    assert {p.capacity for p in plan.learning} == {allocation.AUTO_BUFFER_TRANSITIONS} and not plan.auto
    free = 20_000_000
    monkeypatch.setattr("pzasync.runtime.allocation.free_shm_bytes", lambda: free)
    monkeypatch.setattr("pzasync.transport.shm.free_shm_bytes", lambda: free)
    plan = RunPlan("pettingzoo.classic.connect_four_v3", "dqn", RunConfig())
    capacities = [p.capacity for p in plan.learning]
    assert len(set(capacities)) == 1 and 1_000 < capacities[0] < allocation.AUTO_BUFFER_TRANSITIONS
    assert plan.shm_bytes <= free // 2 + 2 * 4096 + 2 * 8 * plan.learning[0].policy_floats
    assert f"{capacities[0]:,} transitions for player_0" in plan.auto["buffer_capacity"]
    with pytest.raises(InsufficientSharedMemoryError):  # a number the user gave is never changed
        RunPlan("pettingzoo.classic.connect_four_v3", "dqn", RunConfig(buffer_capacity=100_000))
    on_policy = RunPlan("pettingzoo.classic.connect_four_v3", "ppo", RunConfig())
    assert "buffer_capacity" not in on_policy.auto, "on-policy buffers are sized in batches"


def test_unpicklable_factory_is_refused_with_the_reason():
    lock = threading.Lock()
    with pytest.raises(EnvSpecError, match=r"captures something unpicklable"):
        AsyncRunner(lambda: (lock, CrashingEnv())[1], "random", RunConfig())


# -------------------------------------------------------------------------------------------- non-finite values
# The check is the actor's, the same in both runners: the async variant (learner processes too) runs with -m slow.
@pytest.mark.parametrize("runner", [pytest.param(RUNNERS[0], marks=pytest.mark.slow), *RUNNERS[1:]],
                         ids=lambda r: getattr(r, "__name__", r))
def test_non_finite_observations_are_counted_or_raise(runner):
    result = runner(lambda: NaNEnv(), ("custom_learners:RecordingLearner", {}), RunConfig(seed=0)).run(
        agent_steps=600)
    assert result.agents["p0"].nonfinite_transitions > 50 and result.agents["p1"].nonfinite_transitions == 0
    with pytest.raises(NonFiniteError, match=r"agent 'p0': NaN or inf in a transition"):
        runner(lambda: NaNEnv(), ("custom_learners:RecordingLearner", {}),
               RunConfig(seed=0, nonfinite="raise")).run(agent_steps=600)


def test_a_child_that_aborts_after_its_work_is_named_on_stderr(capfd):
    """A C++ runtime's `std::terminate` at a child's exit prints an anonymous line; pzasync names the process
    and its signal, and says nothing about a child that exited cleanly."""
    import multiprocessing as mp

    from pzasync.errors import report_unclean_exit

    ctx = mp.get_context("spawn")
    aborting, clean = ctx.Process(target=os.abort), ctx.Process(target=int)
    for process in (aborting, clean):
        process.start()
        process.join(30)
    report_unclean_exit("actor process 1", aborting)
    report_unclean_exit("actor process 2", clean)
    err = capfd.readouterr().err
    assert f"actor process 1 (pid {aborting.pid}) ended with signal SIGABRT after finishing its work" in err
    assert "actor process 2" not in err
