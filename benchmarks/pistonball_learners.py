"""Pistonball with every piston its own PPO learner, on this machine (docs/benchmarks.md).

    python benchmarks/pistonball_learners.py [--pistons 20] [--seconds 180] [--learner-processes K]
                                             [--json docs/bench/pistonball_learners.json]

The env is `examples/pistonball_shared.make_env` (SuperSuit: 64x64 grey frames, 3 stacked, Discrete(3)
actions), with no agent group: 20 PPO learners, each with its own buffer, slot and model, in learner host
processes (by default one per core beyond the actor's). A sampler thread records the RSS of every process
of the run and the shared memory it holds. The script also prints the shared memory per transition of a
buffer of raw pistonball frames (457 x 120 x 3) with observations stored twice and once.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            todo += [int(k) for k in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return pids


def raw_frame_bytes_per_transition() -> dict[str, float]:
    """Shared memory per transition of one piston's buffer of raw frames, by observation storage."""
    import numpy as np
    from gymnasium import spaces

    from pzasync import SharedRingBuffer
    from pzasync.core.spaces import agent_layout

    layout = agent_layout("piston_0", spaces.Box(0, 255, (457, 120, 3), np.uint8), spaces.Discrete(3))
    capacity = 100_000
    return {storage: SharedRingBuffer.nbytes_for(layout, capacity, {"log_prob": "float32", "value": "float32"},
                                                 obs_storage=storage) / capacity
            for storage in ("twice", "once")}


def main() -> None:
    from pistonball_shared import make_env

    from pzasync import AsyncRunner, RunConfig
    from pzasync.transport.shm import SHM_DIR, list_segments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pistons", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--learner-processes", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    per_transition = raw_frame_bytes_per_transition()
    print(f"raw frames, shared memory per transition: twice {per_transition['twice']:,.0f} B, once "
          f"{per_transition['once']:,.0f} B ({per_transition['once'] / per_transition['twice']:.3f}x)")

    factory = functools.partial(make_env, n_pistons=args.pistons, continuous=False)
    learner = ("ppo", {"batch_size": args.batch_size, "minibatch_size": min(128, args.batch_size), "epochs": 3})
    config = RunConfig(seed=0, learner_processes=args.learner_processes)
    runner = AsyncRunner(factory, learner, config)
    hosts = runner.plan.learner_hosts()
    print(f"{len(runner.plan.learning)} PPO learners in {len(hosts)} learner host process(es); observations "
          f"{runner.plan.agents['piston_0'].layout.obs_space.shape}")
    samples: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(5):
            rss = sum(_rss_mb(p) for p in _tree(os.getpid()))
            shm = sum((SHM_DIR / name).stat().st_size for name, _r, pid in list_segments() if pid == os.getpid())
            samples.append((time.monotonic(), rss, shm))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    result = runner.run(seconds=args.seconds)
    stop.set()
    watcher.join()
    updates = [r.updates for r in result.agents.values()]
    dropped = sum(r.transitions_dropped for r in result.agents.values())
    written = sum(r.transitions_written for r in result.agents.values())
    figures = {
        "pistons": args.pistons, "learner_processes": len(hosts), "seconds": args.seconds,
        "agent_steps": result.agent_steps, "agent_steps_per_s": result.actor_steps_per_second,
        "startup_s": result.startup_seconds, "episodes": result.episodes,
        "updates_min_max": [min(updates), max(updates)], "transitions_written": written,
        "transitions_dropped": dropped, "peak_rss_all_processes_mb": max(s[1] for s in samples),
        "shm_bytes": result.shm_bytes, "errors": {a: r.error for a, r in result.agents.items() if r.error},
        "raw_frame_bytes_per_transition": per_transition,
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
