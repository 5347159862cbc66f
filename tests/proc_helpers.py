"""Functions run in spawned child processes by the tests (they must be importable by module path)."""

from __future__ import annotations

import os
import time

import numpy as np


def describe_env(spec, queue) -> None:
    """Rebuild the env from its spec in this process and report its agents and one observation's shape."""
    env = spec.make()
    env.reset(seed=0)
    obs = env.observe(env.agents[0])
    obs = obs["observation"] if isinstance(obs, dict) else obs
    queue.put((os.getpid(), list(env.possible_agents), np.shape(obs)))


def publish_constant_vectors(slot, seconds: float, stop) -> None:
    """Publish vectors whose every element equals the version number, flat out."""
    vector = np.empty(slot.size, dtype=np.float32)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        vector.fill(float(slot.version + 1))
        slot.publish(vector)
    slot.close()


def write_numbered_transitions(buffer, count: int, layout, start_flag, first: int = 0) -> None:
    """Write transitions whose every field encodes the transition's number (`first`, `first` + 1, ...)."""
    from pzasync.core.transitions import Transition

    start_flag.wait(10)
    size = layout.obs_leaves[0].shape[0]
    for i in range(first, first + count):
        obs = np.full(size, i, dtype=np.float32)
        buffer.write(Transition("a", obs, i % 5, float(i), obs + 1, i % 3 == 0, i % 3 == 1, None, None,
                                {"policy_version": i}))
    buffer.close()


def hold_segment_then_wait(run_id: str, queue) -> None:
    """Create a segment and wait to be killed (a run whose owner dies with SIGKILL)."""
    from pzasync.transport.shm import Segment

    segment = Segment.create(run_id, "victim", 4096)
    queue.put(segment.name)
    time.sleep(60)
