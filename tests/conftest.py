"""Shared fixtures. Every test is checked for leaked shared-memory segments and child processes."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# Before torch is first imported (here and in every spawned child, which inherits the environment): OpenMP
# threads that wait by spinning make a 2-thread torch update ~100x slower (0.8 ms -> 140 ms measured) whenever
# anything else wants the other core, which is the normal case for a test suite on a small shared machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Ray (the Ray backend's tests): token authentication, as Ray enables by default, with a token this session
# makes in a directory it owns (removed at the end) instead of ~/.ray/auth_token. Set before Ray is imported:
# Ray reads its auth mode once per process.
RAY_SESSION_DIR = tempfile.mkdtemp(prefix="pzray")
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN_PATH"] = os.path.join(RAY_SESSION_DIR, "auth_token")
with open(os.environ["RAY_AUTH_TOKEN_PATH"], "w") as _token:
    _token.write(secrets.token_hex(32))

from pzasync.transport.shm import _alive, list_segments  # noqa: E402


def _own_segments() -> set[str]:
    """Segments this test process owns, or that a dead process (a killed child) left behind; segments of
    other live processes (a benchmark running beside the suite) are not ours to judge."""
    me = os.getpid()
    return {name for name, _run, pid in list_segments() if pid == me or not _alive(pid)}


def own_semaphores() -> set[str]:
    """Named multiprocessing semaphores (`/dev/shm/sem.mp-*`) this process holds open. With the spawn start
    method they stay in /dev/shm until their objects are collected. Told apart from other processes'
    semaphores by inode: the name a semaphore was mapped under is a deleted temporary, the inode is the same."""
    try:
        with open("/proc/self/maps") as f:
            mapped = {int(line.split()[4]) for line in f if "/dev/shm/sem." in line}
    except (OSError, ValueError, IndexError):
        return set()
    names = set()
    for path in glob.glob("/dev/shm/sem.mp-*"):
        try:
            if os.stat(path).st_ino in mapped:
                names.add(os.path.basename(path))
        except OSError:
            pass
    return names


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test that leaves a pzasync segment or a multiprocessing semaphore in /dev/shm, or a live child
    process, behind. Semaphores are checked without a garbage collection: what a finished run still holds
    through a reference cycle counts as leaked."""
    before, sems_before = _own_segments(), own_semaphores()
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (mp.active_children() or _own_segments() - before):
        time.sleep(0.05)
    leaked = _own_segments() - before
    leaked_sems = own_semaphores() - sems_before
    children = mp.active_children()
    for child in children:
        child.kill()
    assert not leaked, f"shared-memory segments leaked: {sorted(leaked)}"
    assert not leaked_sems, f"multiprocessing semaphores left in /dev/shm: {sorted(leaked_sems)}"
    assert not children, f"child processes left running: {children}"


def pytest_sessionfinish(session, exitstatus):
    """A last check over the whole session, for anything created outside a test."""
    shutil.rmtree(RAY_SESSION_DIR, ignore_errors=True)
    mine = [name for name, _run, pid in list_segments() if pid == os.getpid()]
    if mine:
        print(f"\nLEAKED shared-memory segments at session end: {mine}", file=sys.stderr)
        session.exitstatus = 1


def _children() -> set[int]:
    """Live server processes this test process launched (their command names a pzremote- socket directory)."""
    me = str(os.getpid())
    out = set()
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status) as f:
                text = f.read()
            with open(status.replace("status", "cmdline"), "rb") as f:
                command = f.read()
        except OSError:
            continue
        if re.search(rf"^PPid:\s+{me}$", text, re.M) and "State:\tZ" not in text and b"pzremote-" in command:
            out.add(int(status.split("/")[2]))
    return out


@pytest.fixture
def no_remote_server_left():
    """Nothing a test launched outlives it: no remote env server process (docs/remote.md), no socket
    directory (used by the remote env tests)."""
    before, dirs = _children(), set(glob.glob(os.path.join(tempfile.gettempdir(), "pzremote-*")))
    yield
    left = _children() - before
    stray = set(glob.glob(os.path.join(tempfile.gettempdir(), "pzremote-*"))) - dirs
    assert not left, f"server processes left running: {sorted(left)}"
    assert not stray, f"server directories left behind: {sorted(stray)}"


@pytest.fixture
def spawn_ctx():
    return mp.get_context("spawn")
