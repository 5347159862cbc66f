"""Shared fixtures. Every test is checked for leaked shared-memory segments and child processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pzasync.shm import _alive, list_segments  # noqa: E402


def _own_segments() -> set[str]:
    """Segments this test process owns, or that a dead process (a killed child) left behind; segments of
    other live processes (a benchmark running beside the suite) are not ours to judge."""
    me = os.getpid()
    return {name for name, _run, pid in list_segments() if pid == me or not _alive(pid)}


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test that leaves a pzasync segment in /dev/shm or a live child process behind."""
    before = _own_segments()
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (mp.active_children() or _own_segments() - before):
        time.sleep(0.05)
    leaked = _own_segments() - before
    children = mp.active_children()
    for child in children:
        child.kill()
    assert not leaked, f"shared-memory segments leaked: {sorted(leaked)}"
    assert not children, f"child processes left running: {children}"


def pytest_sessionfinish(session, exitstatus):
    """A last check over the whole session, for anything created outside a test."""
    mine = [name for name, _run, pid in list_segments() if pid == os.getpid()]
    if mine:
        print(f"\nLEAKED shared-memory segments at session end: {mine}", file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture
def spawn_ctx():
    return mp.get_context("spawn")
