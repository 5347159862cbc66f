"""How a run starts its processes (pzasync/runtime/processes.py): a fork server's children behave as spawned
ones do (their starter's environment and signal mask), the fork server outlives a SIGTERM to the process
group, and a child tells when the runner that started it is gone."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest

from pzasync.runtime.processes import START_METHOD_VARIABLE, process_context, runner_is_gone
from pzasync.runtime.stop_signals import shielded

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's default")


def _report(conn) -> None:
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    conn.send({"variable": os.environ.get("PZASYNC_TEST_VARIABLE"), "ppid": os.getppid(),
               "term_blocked": signal.SIGTERM in blocked, "int_blocked": signal.SIGINT in blocked,
               "term_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
               "runner_gone": runner_is_gone(mp.parent_process().pid), "torch": "torch" in sys.modules})
    conn.close()


def _wait_forever() -> None:
    while True:
        time.sleep(1)


def _report_once_runner_is_gone(conn, runner_pid: int) -> None:
    deadline = time.monotonic() + 30
    while not runner_is_gone(runner_pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    conn.send(runner_is_gone(runner_pid))
    conn.close()


def _start_a_child_and_exit(conn) -> None:
    child = process_context().Process(target=_report_once_runner_is_gone, args=(conn, os.getpid()))
    child.start()
    os._exit(0)  # without joining it: the child outlives the process that started it


def _child_report(ctx=None) -> dict:
    ctx = ctx or process_context()
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_report, args=(sender,))
    child.start()
    sender.close()
    report = receiver.recv()
    child.join(30)
    assert child.exitcode == 0
    return report


@linux_only
def test_a_child_is_forked_from_a_server_that_has_torch_and_sees_its_starters_environment(monkeypatch):
    assert process_context().get_start_method() == "forkserver"
    _child_report()  # the fork server runs from here on, with the environment of this moment
    monkeypatch.setenv("PZASYNC_TEST_VARIABLE", "set after the fork server started")
    report = _child_report()
    assert report["variable"] == "set after the fork server started"
    assert report["ppid"] != os.getpid(), "forked by the fork server, not by this process"
    assert report["torch"], "torch came with the fork server's preload"
    monkeypatch.delenv("PZASYNC_TEST_VARIABLE")
    assert _child_report()["variable"] is None


def test_a_child_starts_with_its_starters_signal_mask_and_sigterms_default_action():
    plain = _child_report()
    assert not plain["term_blocked"] and not plain["int_blocked"] and plain["term_default"]
    with shielded():
        report = _child_report()
    assert report["term_blocked"] and report["int_blocked"], "a group signal waits until the child is ready"
    child = process_context().Process(target=_wait_forever)
    child.start()
    child.terminate()
    child.join(30)
    assert child.exitcode == -signal.SIGTERM


@linux_only
def test_the_fork_server_outlives_sigterm_and_sigint_to_the_process_group():
    from multiprocessing import forkserver

    _child_report()
    server = forkserver._forkserver._forkserver_pid
    assert server is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        os.kill(server, sig)
    time.sleep(0.2)
    assert os.waitpid(server, os.WNOHANG) == (0, 0), "the fork server is still running"
    assert _child_report()["variable"] is None and forkserver._forkserver._forkserver_pid == server


def test_a_child_tells_when_the_runner_that_started_it_is_gone():
    assert _child_report()["runner_gone"] is False, "its runner, this process, is alive"
    ctx = process_context()
    receiver, sender = ctx.Pipe(duplex=False)
    middle = ctx.Process(target=_start_a_child_and_exit, args=(sender,))
    middle.start()
    sender.close()
    middle.join(30)
    assert middle.exitcode == 0
    assert receiver.poll(30) and receiver.recv() is True, "the grandchild saw its runner go"
    receiver.close()


def test_runner_is_gone_by_pid_outside_a_runners_child():
    assert runner_is_gone(os.getpid()) is False
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    assert runner_is_gone(exited.pid) is True


def test_the_start_method_can_be_chosen_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.setenv(START_METHOD_VARIABLE, "spawn")
    assert process_context().get_start_method() == "spawn"
    assert _child_report(process_context())["variable"] is None
    monkeypatch.setenv(START_METHOD_VARIABLE, "fork")
    with pytest.raises(ValueError, match=r"PZASYNC_START_METHOD='fork': must be 'forkserver' or 'spawn'"):
        process_context()
