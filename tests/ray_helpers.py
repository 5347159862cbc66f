"""Helpers for the Ray backend's tests: Ray confined to a temp dir the test owns, and the async runner on Ray."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time

import pytest

from pzasync import AsyncRunner, RunConfig

try:
    import ray

    from pzasync.backends.ray.host import init_ray
except ImportError:  # the Ray backend is an extra
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="the Ray backend is an extra: pip install -e '.[ray]'")
def _ray_processes(marker: str) -> list[str]:
    """Command lines of live processes that mention `marker` (our temp dir)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd[:120]}")
    return found


@contextlib.contextmanager
def confined_ray():
    """A short temp dir (unix socket paths are limited) for Ray's files; on exit Ray is shut down, the dir
    removed, and no process that mentions it may be left running. (Ray's auth token is the session's, made
    by conftest.py in a directory it owns.)"""
    root = tempfile.mkdtemp(prefix="pzr", dir="/tmp")
    saved = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
    os.environ["RAY_TMPDIR"] = root
    try:
        yield root
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for key in [k for k in os.environ if k.startswith("RAY_")]:
            del os.environ[key]
        os.environ.update(saved)
        deadline = time.monotonic() + 20
        while _ray_processes(root) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _ray_processes(root)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"Ray processes left running: {left}"
        assert not os.path.exists(root)




class RayAsyncRunner(AsyncRunner):
    """The async runner on the Ray backend, its local Ray instance confined like the tests' own.

    With a seconds budget, Ray is started before the run (as for a user who joins a running cluster), so the
    budget is not spent starting Ray: on a slow CI machine that took a 10 s budget nearly whole (2026-11-28: 31
    agent steps in 11.5 s). Runs with an agent-step budget start their own Ray, as `AsyncRunner.run` does."""

    def __init__(self, env, learners, config=None):
        super().__init__(env, learners, dataclasses.replace(config or RunConfig(), backend="ray"))

    def run(self, agent_steps=None, seconds=None):
        with confined_ray():
            if seconds is not None:
                init_ray(ray, self.config, len(self.plan.learning) + self.plan.actors - 1)
            return super().run(agent_steps=agent_steps, seconds=seconds)
