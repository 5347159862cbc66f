"""Shared-memory ownership: named per run and owner, stale segments of dead runs found and removed."""

from __future__ import annotations

import os
import signal

from click.testing import CliRunner
from proc_helpers import hold_segment_then_wait

from pzasync.cli import main
from pzasync.transport.shm import SHM_DIR, Segment, clean_stale, find_stale, list_segments, new_run_id


def _killed_owner_segment(spawn_ctx):
    run_id = new_run_id()
    queue = spawn_ctx.Queue()
    owner = spawn_ctx.Process(target=hold_segment_then_wait, args=(run_id, queue))
    owner.start()
    name = queue.get(timeout=60)
    os.kill(owner.pid, signal.SIGKILL)
    owner.join(timeout=30)
    return run_id, owner.pid, name


def test_segment_names_carry_run_id_and_owner_pid():
    run_id = new_run_id()
    segment = Segment.create(run_id, "buf-player_0", 128)
    try:
        assert segment.name == f"pzasync_{run_id}_{os.getpid()}_buf-player_0"
        assert (segment.name, run_id, os.getpid()) in list_segments()
        assert segment.name not in {s.name for s in find_stale()}, "a live owner's segment is not stale"
    finally:
        segment.close()
        segment.unlink()
    assert not (SHM_DIR / segment.name).exists()


def test_segments_of_a_killed_owner_are_found_and_removed(spawn_ctx):
    run_id, pid, name = _killed_owner_segment(spawn_ctx)
    assert (SHM_DIR / name).exists(), "SIGKILL leaves the segment behind"
    stale = {s.name: s for s in find_stale()}
    assert name in stale and stale[name].owner_pid == pid and stale[name].run_id == run_id
    removed = clean_stale()
    assert name in {s.name for s in removed}
    assert not (SHM_DIR / name).exists()


def test_pzasync_clean_says_what_it_removed(spawn_ctx):
    _run_id, pid, name = _killed_owner_segment(spawn_ctx)
    result = CliRunner().invoke(main, ["clean"])
    assert result.exit_code == 0
    assert f"removed {name}" in result.output and f"owner pid {pid} is gone" in result.output
    assert not (SHM_DIR / name).exists()


def test_normal_use_prints_no_resource_tracker_warning(tmp_path):
    import subprocess
    import sys

    code = (
        "import numpy as np, pickle\n"
        "from pzasync import PolicySlot\n"
        "s = PolicySlot.create(100)\n"
        "t = pickle.loads(pickle.dumps(s))\n"
        "s.publish(np.ones(100, np.float32)); t.close(); s.close(); s.unlink()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "resource_tracker" not in proc.stderr and "leaked" not in proc.stderr


def test_the_next_run_removes_leftovers_and_says_so(spawn_ctx, capfd):
    from pzasync import SequentialRunner
    from pzasync.runtime.plan import RunPlan

    run_id, _pid, name = _killed_owner_segment(spawn_ctx)
    RunPlan("pettingzoo.classic.rps_v2", "random")
    assert (SHM_DIR / name).exists(), "planning a run has no side effects"
    SequentialRunner("pettingzoo.classic.rps_v2", "random").run(agent_steps=10)
    assert not (SHM_DIR / name).exists()
    assert f"left by dead run(s) {run_id}" in capfd.readouterr().err
