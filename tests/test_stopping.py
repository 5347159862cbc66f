"""Stopping as schedulers stop a job: SIGTERM or SIGINT to every process of a `pzasync train` run at once, and
children that die while the runner is stopping (docs/reliability.md, "Stopping").

A run must end within 30 s, exit with 128 + the signal's number, keep its checkpoints, and leave no
shared-memory segment, semaphore or process of its process group behind."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pzasync import AsyncRunner, RunConfig
from pzasync.runtime.monitor import RunMonitor
from pzasync.transport.shm import list_segments

STOP_WITHIN_S = 30.0
#: A small default run: the self-play league on connect_four, its evaluator scoring every 2 s (so that it is
#: mostly asleep between rounds, where a signal used to kill it), 4 env copies.
SMALL_TRAIN = ["pettingzoo.classic.connect_four_v3", "--envs-per-actor", "4", "--eval-every", "2",
               "--final-episodes", "20"]


def _group_processes(pgid: int) -> list[tuple[int, str]]:
    """Live processes of a process group as (pid, state); zombies (adopted by an init that does not reap them)
    are not running and are left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append((int(entry.name), fields[0]))
    return found


def _semaphores() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("sem.*")}


def _unmapped(semaphores: set[str]) -> set[str]:
    """Those of `semaphores` that no live process has mapped: leaked (other processes' live semaphores, a test
    or benchmark running beside this one, are mapped by them)."""
    inodes = {}
    for name in semaphores:
        try:
            inodes[os.stat(f"/dev/shm/{name}").st_ino] = name
        except OSError:
            pass
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            for line in maps.read_text().splitlines():
                if "/dev/shm/sem." in line:
                    inodes.pop(int(line.split()[4]), None)
        except (OSError, ValueError, IndexError):
            continue
    return set(inodes.values())


class TrainRun:
    """`pzasync train` in a process group of its own, as a scheduler runs a job."""

    def __init__(self, out: Path, *args: str) -> None:
        self.out = out
        self.semaphores_before = _semaphores()
        self.proc = subprocess.Popen([sys.executable, "-m", "pzasync.cli", "train", *args, "--out", str(out)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env={**os.environ, "COLUMNS": "200"})
        self.pids: set[int] = {self.proc.pid}

    def watch(self, seconds: float) -> None:
        """Keep noting the group's processes (their segments are checked at the end) for `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.pids |= {pid for pid, _ in _group_processes(self.proc.pid)}
            time.sleep(0.05)

    def wait_until_acting(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.watch(0.1)
            if any(self.out.glob("*/episodes.jsonl")):
                return
            assert self.proc.poll() is None, self.proc.communicate()
        raise AssertionError("the run never started acting")

    def signal_group(self, sig: int) -> tuple[int, float, str, str]:
        """Signal every process of the group at once; (exit code, seconds to exit, stdout, stderr)."""
        self.pids |= {pid for pid, _ in _group_processes(self.proc.pid)}
        sent = time.monotonic()
        os.killpg(self.proc.pid, sig)
        try:
            out, err = self.proc.communicate(timeout=STOP_WITHIN_S + 30)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"still running {STOP_WITHIN_S + 30:.0f}s after the signal:\n{err[-3000:]}") from None
        return self.proc.returncode, time.monotonic() - sent, out, err

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 10
        while _group_processes(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_processes(self.proc.pid), f"processes of the run left: {_group_processes(self.proc.pid)}"
        segments = [name for name, _run, pid in list_segments() if pid in self.pids]
        assert not segments, f"shared memory left behind: {segments}"
        assert not _unmapped(_semaphores() - self.semaphores_before), "semaphores left in /dev/shm"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _expect_clean_stop(run: TrainRun, sig: int, finished_ok: bool = False) -> str:
    """Signal the run's group; it stops within STOP_WITHIN_S with 128 + sig and leaves nothing behind. With
    `finished_ok`, a run whose work was done when the signal came (its last line printed, its process exiting)
    may instead exit 0 with its complete output: then "finished" is returned."""
    code, took, out, err = run.signal_group(sig)
    assert took < STOP_WITHIN_S, f"stopping took {took:.1f}s"
    run.assert_nothing_left()
    if finished_ok and code == 0:
        assert "run directory:" in out, f"exit code 0 before the run finished:\n{out[-3000:]}"
        return "finished"
    assert code == 128 + sig, f"exit code {code}:\n{err[-3000:]}"
    return out + err


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sigterm_to_the_whole_process_group_while_training_ends_the_run_and_leaves_nothing(tmp_path):
    """The scheduler's stop, during training with the evaluator asleep between rounds. Before the fix the
    evaluator died inside `Event.wait()` and the runner's `Event.set()` waited for it forever."""
    run = TrainRun(tmp_path, *SMALL_TRAIN, "--minutes", "2")
    try:
        run.wait_until_acting()
        run.watch(3.0)  # past the evaluator's first round
        output = _expect_clean_stop(run, signal.SIGTERM)
    finally:
        run.kill()
    assert "stopped by SIGTERM: no final evaluation" in output
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "checkpoints" / "players.pt").exists(), "the learner's final checkpoint is kept"
    assert (run_dir / "result.json").exists()


@pytest.mark.timeout(180)
def test_sigterm_to_the_whole_process_group_during_start_up_ends_the_run_and_leaves_nothing(tmp_path):
    """While the learner host and the evaluator are still starting (before the first policy)."""
    run = TrainRun(tmp_path, *SMALL_TRAIN, "--minutes", "2")
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob("*/run.json")) and time.monotonic() < deadline:
            run.watch(0.02)  # the run directory is made just before anything is allocated
        run.watch(0.3)
        assert not any(tmp_path.glob("*/episodes.jsonl")), "still starting"
        _expect_clean_stop(run, signal.SIGTERM)
    finally:
        run.kill()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigterm_and_sigint_to_the_whole_group_at_random_moments_end_every_run(tmp_path):
    """Signals at random moments from start-up to the final evaluation, on two layouts that between them have
    env workers, two actor processes, two learner host processes, the evaluator and the league."""
    layouts = [
        [*SMALL_TRAIN, "--env-workers", "1"],  # league, evaluator, env worker
        ["pettingzoo.classic.connect_four_v3", "--independent", "--actors", "2", "--envs-per-actor", "2",
         "--env-workers", "1", "--learner-processes", "2", "--eval-every", "2", "--final-episodes", "20"],
    ]
    rng = random.Random(33)
    outcomes = []
    for trial in range(8):
        sig = (signal.SIGTERM, signal.SIGINT)[trial % 2]
        at = rng.uniform(0.5, 30.0)
        # 24 s of training: with start-up and the final evaluation, past the latest moment drawn on a fast machine
        run = TrainRun(tmp_path / f"trial{trial}", *layouts[(trial // 2) % 2], "--minutes", "0.4")
        try:
            run.watch(at)
            if run.proc.poll() is not None:
                continue  # finished before the signal (a late moment): nothing to test
            if _expect_clean_stop(run, sig, finished_ok=True) == "finished":
                continue
            outcomes.append((trial, signal.Signals(sig).name, round(at, 1)))
        finally:
            run.kill()
    print(f"clean stops: {outcomes}")
    assert len(outcomes) >= 6


# ------------------------------------------------------------------------ children that die while stopping
VICTIMS = ("evaluator", "learner host", "env worker", "actor process")


def _victim_pids(runner: AsyncRunner, victims: tuple[str, ...]) -> list[int]:
    pids = []
    if "evaluator" in victims:
        pids.append(runner.monitor.evaluator.process.pid)
    if "learner host" in victims:
        pids.append(runner.host.processes[0].pid)
    if "env worker" in victims:
        pids += [p.pid for p in mp.active_children() if p.name.startswith("pzasync-env-worker")]
    if "actor process" in victims:
        pids.append(runner.actor_pool.processes[1].pid)
    return pids


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victims", [VICTIMS, *[pytest.param((v,), marks=pytest.mark.slow) for v in VICTIMS]],
                         ids=["all at once", *VICTIMS])
def test_a_child_killed_as_the_run_stops_does_not_hang_the_stop(tmp_path, monkeypatch, victims):
    """SIGKILL to the evaluator, a learner host, an env worker or an actor process at the moment the run is
    asked to stop (its time budget), before the runner stops and joins them: the stop takes bounded time, and
    nothing leaks (the autouse fixture checks segments, semaphores and children)."""
    runner = AsyncRunner("pettingzoo.classic.connect_four_v3", "dqn",
                         RunConfig(seed=0, out_dir=str(tmp_path), envs_per_actor=2, env_workers=1, actors=2,
                                   learner_processes=1, eval_vs="random", eval_every_s=0.5, eval_episodes=4,
                                   process_timeout_s=20))
    request_stop = RunMonitor.request_stop
    killed: list[int] = []

    def kill_then_stop(monitor: RunMonitor, reason: str) -> None:
        if not killed:
            for pid in _victim_pids(runner, victims):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        request_stop(monitor, reason)

    monkeypatch.setattr(RunMonitor, "request_stop", kill_then_stop)
    started = time.monotonic()
    try:
        runner.run(seconds=6)
    except Exception as exc:  # noqa: BLE001 - a dead child may end the run with its error; it must end
        print(f"the run ended with {type(exc).__name__}: {exc}")
    took = time.monotonic() - started
    assert len(killed) >= len(victims), killed
    assert took < 6 + 20 + STOP_WITHIN_S, f"the run took {took:.0f}s"
