"""A long run keeps memory flat (slow: `pytest -m slow`; length from PZASYNC_SOAK_MINUTES, default 5: the CI
budget; 30 or more for a release).

simple_spread with 8 agents, each its own learner (4 DQN, 4 PPO), on 2 learner host processes, checkpoints
every minute: the summed RSS of all processes and the shared memory must stay flat after the first minute.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pzasync import AsyncRunner, RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.transport.shm import SHM_DIR, list_segments


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _tree(pid: int) -> list[int]:
    kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return [pid] + kids


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_long_run_keeps_rss_and_shared_memory_flat(tmp_path):
    minutes = float(os.environ.get("PZASYNC_SOAK_MINUTES", "5"))
    samples: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(15):
            pids = [p for p in _tree(os.getpid()) if Path(f"/proc/{p}").exists()]
            shm = sum((SHM_DIR / name).stat().st_size for name, _r, pid in list_segments() if pid == os.getpid())
            samples.append((time.monotonic(), sum(_rss_mb(p) for p in pids), shm))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    learners = {**{f"agent_{i}": "dqn" for i in range(4)},
                **{f"agent_{i}": ("ppo", {"batch_size": 512}) for i in range(4, 8)}}
    config = RunConfig(seed=0, out_dir=str(tmp_path), buffer_capacity=50_000, checkpoint_every_s=60,
                       learner_processes=2)
    result = AsyncRunner(EnvSpec.of("mpe2.simple_spread_v3", N=8), learners, config).run(seconds=60 * minutes)
    stop.set()
    watcher.join()
    assert all(r.error is None and r.restarts == 0 for r in result.agents.values())
    assert len({r.learner_pid for r in result.agents.values()}) == 2, "8 learners on 2 host processes"
    assert all(r.updates > 0 for r in result.agents.values())
    settled = [s for s in samples if s[0] - samples[0][0] >= 60]  # after the first minute (buffers filling)
    rss = [s[1] for s in settled]
    shm = {s[2] for s in samples}
    print(f"\nsoak {minutes} min: {result.agent_steps:,} agent steps, {result.episodes:,} episodes, "
          f"updates {[r.updates for r in result.agents.values()]}; "
          f"RSS of all processes {min(rss):.0f}-{max(rss):.0f} MB after the first minute; "
          f"shared memory {sorted(shm)} bytes")
    assert len(shm) == 1, "shared memory in use never changes during a run"
    assert max(rss) <= 1.10 * min(rss), f"RSS grew from {min(rss):.0f} to {max(rss):.0f} MB"
