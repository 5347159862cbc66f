"""Shared ring buffers: invariants 2 and 3 (docs/shared-memory.md), sentinel fill, memory checks, attach by pickling."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
from gymnasium import spaces
from proc_helpers import write_numbered_transitions

from pzasync import SharedRingBuffer
from pzasync.errors import ConfigError, InsufficientSharedMemoryError, PzasyncError
from pzasync.spaces import agent_layout
from pzasync.transitions import Transition

OBS = 4096  # large rows make a concurrent overwrite during a copy likely


def numbered(i, size=8):
    obs = np.full(size, i, dtype=np.float32)
    return Transition("a", obs, i % 5, float(i), obs + 1, i % 3 == 0, i % 3 == 1, None, None, {"policy_version": i})


def check_rows(batch, size):
    """Every row must be one whole transition: all fields derived from one index."""
    index = batch["reward"].astype(np.int64)
    assert (batch["obs"] == index[:, None]).all(), "obs mixed with another transition"
    assert (batch["next_obs"] == index[:, None] + 1).all(), "next_obs mixed with another transition"
    assert (batch["action"] == index % 5).all()
    assert (batch["terminated"] == (index % 3 == 0)).all() and (batch["truncated"] == (index % 3 == 1)).all()
    assert (batch["policy_version"] == index).all()
    assert batch["obs"].shape[1] == size
    return index


@pytest.fixture
def layout():
    return agent_layout("a", spaces.Box(-np.inf, np.inf, (8,), np.float32), spaces.Discrete(5))


@pytest.fixture
def buffer(layout):
    buf = SharedRingBuffer.create(layout, 16)
    yield buf
    buf.close()
    buf.unlink()


def test_unwritten_memory_holds_the_sentinel(buffer):
    assert np.isnan(buffer._columns["obs"]).all()
    assert (buffer._columns["policy_version"] == -1).all()
    buffer.write(numbered(0))
    assert not np.isnan(buffer._columns["obs"][0]).any() and np.isnan(buffer._columns["obs"][1:]).all()


def test_samples_come_only_from_written_rows(buffer):
    rng = np.random.default_rng(0)
    with pytest.raises(PzasyncError, match="is empty"):
        buffer.sample(4, rng)
    for i in range(3):
        buffer.write(numbered(i))
    batch = buffer.sample(500, rng)
    assert set(check_rows(batch, 8).tolist()) == {0, 1, 2}


def test_in_order_reads_count_overwritten_transitions(buffer):
    for i in range(10):
        buffer.write(numbered(i))
    assert check_rows(buffer.read_new(max_rows=4), 8).tolist() == [0, 1, 2, 3]
    for i in range(10, 40):
        buffer.write(numbered(i))
    # 40 written, cursor at 4, capacity 16: 4..23 were overwritten before being read.
    assert check_rows(buffer.read_new(), 8).tolist() == list(range(24, 40))
    assert buffer.dropped == 20 and buffer.read_cursor == 40 and buffer.read_new() is None


def test_pickled_buffer_attaches_to_the_same_rows(buffer):
    other = pickle.loads(pickle.dumps(buffer))
    try:
        buffer.write(numbered(7))
        assert other.written == 1
        assert check_rows(other.read_new(), 8).tolist() == [7]
        assert buffer.read_cursor == 1, "the reader's cursor lives in shared memory"
    finally:
        other.close()


def test_nested_observation_leaves_keep_their_dtypes():
    space = spaces.Dict({"image": spaces.Box(0, 255, (5, 5, 3), np.uint8), "pos": spaces.Discrete(9)})
    layout = agent_layout("pursuer_0", space, spaces.Box(-1, 1, (2,), np.float32))
    buf = SharedRingBuffer.create(layout, 8, extras={"log_prob": "float32", "value": "float32"})
    try:
        obs = layout.copy_obs({"image": np.full((5, 5, 3), 200, np.uint8), "pos": 4})
        buf.write(Transition("pursuer_0", obs, np.array([0.5, -0.5], np.float32), 1.0, obs, False, True,
                             extras={"log_prob": -0.3, "value": 2.0}))
        row = buf.read_new()
        assert row["obs/image"].dtype == np.uint8 and row["obs/image"].shape == (1, 5, 5, 3)
        assert row["obs/image"].max() == 200 and row["next_obs/pos"].tolist() == [4]
        assert row["log_prob"].tolist() == [pytest.approx(-0.3)] and row["value"].tolist() == [2.0]
    finally:
        buf.close()
        buf.unlink()


def test_capacity_and_memory_checks_name_the_agent_and_numbers(layout, monkeypatch):
    with pytest.raises(ConfigError, match=r"buffer capacity for agent 'a' must be an integer >= 2, got 1"):
        SharedRingBuffer.create(layout, 1)
    monkeypatch.setattr("pzasync.shm.free_shm_bytes", lambda: 10_000)
    needed = SharedRingBuffer.nbytes_for(layout, 100_000)
    with pytest.raises(InsufficientSharedMemoryError,
                       match=rf"agent 'a' \(100,000 transitions\) needs {needed:,} bytes .* only 10,000 bytes"):
        SharedRingBuffer.create(layout, 100_000)


def _run_writer(spawn_ctx, capacity, count, obs_size=OBS):
    layout = agent_layout("a", spaces.Box(-np.inf, np.inf, (obs_size,), np.float32), spaces.Discrete(5))
    buf = SharedRingBuffer.create(layout, capacity)
    start = spawn_ctx.Event()
    writer = spawn_ctx.Process(target=write_numbered_transitions, args=(buf, count, layout, start))
    writer.start()
    return buf, writer, start


@pytest.mark.timeout(120)
def test_samples_are_never_torn_under_a_flat_out_writer(spawn_ctx):
    count = 30_000
    buf, writer, start = _run_writer(spawn_ctx, capacity=32, count=count)
    rng = np.random.default_rng(1)
    seen = set()
    try:
        start.set()
        while buf.written == 0:
            time.sleep(0.001)
        batches = 0
        while writer.is_alive() or batches < 5:
            batch = buf.sample(16, rng)
            index = check_rows(batch, OBS)
            # <=: the writer completes a row (its sequence word even) just before it counts it, so the one row
            # at index `written` may already be complete, and sampling it is right; nothing beyond it is.
            assert (index <= buf.written).all(), "sampled a row not yet written"
            seen.update(index.tolist())
            batches += 1
        writer.join(timeout=30)
    finally:
        writer.join(timeout=30)
        buf.close()
        buf.unlink()
    assert writer.exitcode == 0
    assert batches > 50 and len(seen) > 200, (batches, len(seen))


@pytest.mark.timeout(120)
def test_in_order_reader_counts_every_drop_exactly(spawn_ctx):
    count, size = 200_000, 1024
    buf, writer, start = _run_writer(spawn_ctx, capacity=64, count=count, obs_size=size)
    returned, chunks = [], 0
    try:
        start.set()
        while writer.is_alive() or buf.unread:
            chunk = buf.read_new(max_rows=48)
            if chunk is not None:
                returned.extend(check_rows(chunk, size).tolist())
                chunks += 1
                if chunks % 10 == 0:
                    # Fall behind now and then, so the writer overruns the ring whatever the scheduler does
                    # (a reader that kept up throughout once left nothing dropped to count).
                    time.sleep(0.002)
        writer.join(timeout=30)
        dropped, written = buf.dropped, buf.written
    finally:
        writer.join(timeout=30)
        buf.close()
        buf.unlink()
    assert writer.exitcode == 0 and written == count
    assert all(a < b for a, b in zip(returned, returned[1:])), "transitions must come once each, in order"
    assert len(returned) + dropped == count, f"{len(returned)} returned + {dropped} dropped != {count} written"
    assert dropped > 0 and chunks > 20, "the ring was never overrun while read: the test exercised nothing"
