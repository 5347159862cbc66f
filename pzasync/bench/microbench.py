"""Micro-benchmarks of the shared-memory primitives, measured against a plain memcpy in the same run.

Run with `pzasync microbench`. Figures are medians over repeats; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from gymnasium import spaces

from pzasync.core.spaces import agent_layout
from pzasync.core.transitions import Transition
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.slots import MODES, PolicySlot


@dataclass
class Measurement:
    """One timed operation: median seconds per call and the target it is held against."""

    name: str
    seconds: float
    target: str


def _per_call(fn: Callable[[], object], calls: int, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return float(np.median(times))


def run(vector_floats: int = 1_000_000) -> list[Measurement]:
    """Time transition writes, version checks, and publish/read of `vector_floats` floats against memcpy."""
    results = []
    layout = agent_layout("bench", spaces.Box(-1, 1, (84,), np.float32), spaces.Discrete(6))
    buffer = SharedRingBuffer.create(layout, 100_000)
    obs = np.random.default_rng(0).standard_normal(84).astype(np.float32)
    transition = Transition("bench", obs, 3, 0.5, obs, False, False, None, None, {"policy_version": 1})
    try:
        results.append(Measurement("ring buffer write, 84-float obs", _per_call(lambda: buffer.write(transition),
                                                                               20_000), "<= 5 us"))
    finally:
        buffer.close()
        buffer.unlink()

    source = np.random.default_rng(1).standard_normal(vector_floats).astype(np.float32)
    target = np.empty_like(source)
    memcpy = _per_call(lambda: np.copyto(target, source), 50)
    results.append(Measurement(f"plain memcpy of {vector_floats:,} floats (reference)", memcpy, "-"))
    for mode in MODES:
        slot = PolicySlot.create(vector_floats, mode)
        try:
            slot.publish(source)

            def version(s: PolicySlot = slot) -> int:
                return s.version

            def publish(s: PolicySlot = slot) -> int:
                return s.publish(source)

            def read(s: PolicySlot = slot) -> int:
                return s.read(target)

            results.append(Measurement(f"slot.version ({mode})", _per_call(version, 200_000), "<= 0.5 us"))
            results.append(Measurement(f"slot.publish {vector_floats:,} floats ({mode})", _per_call(publish, 50),
                                       "<= 2x memcpy"))
            results.append(Measurement(f"slot.read {vector_floats:,} floats ({mode})", _per_call(read, 50),
                                       "<= 2x memcpy"))
        finally:
            slot.close()
            slot.unlink()
    return results


def format_seconds(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.3f} ms"
