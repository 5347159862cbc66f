"""Run directories: runs started together, in separate processes, each get a directory of their own."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from pzasync.runtime.rundir import RunDirectory


def _claim(root: str, barrier, paths) -> None:
    barrier.wait()
    paths.put(str(RunDirectory.new(root, "mpe2.simple_speaker_listener_v4").path))


@pytest.mark.timeout(60)
def test_runs_started_in_the_same_second_in_other_processes_never_share_a_directory(tmp_path):
    """Eight processes released together (as `pzasync suite --parallel` starts its runs) claim eight distinct
    directories: two runs in one directory overwrite each other's run.json and lose each other's files."""
    ctx = mp.get_context("fork")
    processes = 8
    for attempt in range(5):
        root = tmp_path / f"try{attempt}"
        barrier, paths = ctx.Barrier(processes), ctx.Queue()
        workers = [ctx.Process(target=_claim, args=(str(root), barrier, paths)) for _ in range(processes)]
        for w in workers:
            w.start()
        claimed = [paths.get(timeout=30) for _ in workers]
        for w in workers:
            w.join(timeout=30)
            assert w.exitcode == 0
        assert len(set(claimed)) == processes, sorted(claimed)
        assert sorted(p.name for p in root.iterdir()) == sorted(p.rsplit("/", 1)[1] for p in claimed)
        assert all((root / name / "checkpoints").is_dir() for name in (p.rsplit("/", 1)[1] for p in claimed))
