"""The cost of the shared-memory primitives against memcpy of the same bytes, for A/B runs of two checkouts.

    PYTHONPATH=<checkout> python benchmarks/ordering_ab.py [--label NAME] [--repeats 7]

Times `PolicySlot.publish` and `read` (both modes, 1M and 10k floats), `SharedRingBuffer.write` (one
transition with an 84-float observation, in two columns and stored once) and `sample` of 64 rows, each beside
an `np.copyto` of the same number of bytes in the same process. Prints one JSON line: medians in seconds.
Uses only what both sides of issue 54's A/B have (no `pzasync.transport.ordering`), so it runs on either.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
from gymnasium import spaces

from pzasync.core.spaces import agent_layout
from pzasync.core.transitions import Transition
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.slots import MODES, PolicySlot


def per_call(fn: Callable[[], object], calls: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def memcpy(nbytes: int, calls: int, repeats: int) -> float:
    source = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    target = np.empty_like(source)
    return per_call(lambda: np.copyto(target, source), calls, repeats)


def slots(floats: int, calls: int, repeats: int) -> dict[str, float]:
    out = {f"memcpy {floats} floats": memcpy(4 * floats, calls, repeats)}
    source = np.random.default_rng(1).standard_normal(floats).astype(np.float32)
    target = np.empty_like(source)
    for mode in MODES:
        slot = PolicySlot.create(floats, mode)
        try:
            slot.publish(source)
            out[f"publish {floats} {mode}"] = per_call(lambda s=slot: s.publish(source), calls, repeats)
            out[f"read {floats} {mode}"] = per_call(lambda s=slot: s.read(target), calls, repeats)
        finally:
            slot.close()
            slot.unlink()
    return out


def buffers(repeats: int) -> dict[str, float]:
    layout = agent_layout("bench", spaces.Box(-1, 1, (84,), np.float32), spaces.Discrete(6))
    rng = np.random.default_rng(2)
    out: dict[str, float] = {}
    for storage in ("twice", "once"):
        buffer = SharedRingBuffer.create(layout, 100_000, obs_storage=storage)
        try:
            # Two observations in turn: each transition's obs is the previous one's next_obs, as in play.
            obs = [rng.standard_normal(84).astype(np.float32) for _ in range(2)]
            transitions = [Transition("bench", obs[i], 3, 0.5, obs[1 - i], False, False, None, None,
                                      {"policy_version": 1}) for i in range(2)]
            step = iter(range(10**9))

            def write(buffer=buffer, transitions=transitions, step=step) -> None:
                buffer.write(transitions[next(step) % 2])

            out[f"write {storage}"] = per_call(write, 5_000, repeats)
            draw = np.random.default_rng(3)
            out[f"sample 64 {storage}"] = per_call(lambda b=buffer, d=draw: b.sample(64, d), 500, repeats)
            if storage == "twice":
                row_bytes = sum(int(np.prod(f.shape, dtype=np.int64)) * np.dtype(f.dtype).itemsize
                                for f in buffer.fields)
                out["row bytes"] = row_bytes
                out["memcpy 1 row"] = memcpy(row_bytes, 5_000, repeats)
                out["memcpy 64 rows"] = memcpy(64 * row_bytes, 500, repeats)
        finally:
            buffer.close()
            buffer.unlink()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    figures: dict[str, float | str] = {"label": args.label}
    figures.update(slots(1_000_000, 40, args.repeats))
    figures.update(slots(10_000, 2_000, args.repeats))
    figures.update(buffers(args.repeats))
    try:
        from pzasync.transport import ordering

        figures["full_fence"] = per_call(ordering.full_fence, 200_000, args.repeats)
    except ImportError:
        pass
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
