"""docs/shared-memory.md, policy slots and invariant 1: policy slots publish versioned vectors that are never
read torn."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
from proc_helpers import publish_constant_vectors

from pzasync import PolicySlot
from pzasync.errors import ConfigError
from pzasync.transport.slots import MODES


@pytest.fixture(params=MODES)
def slot(request):
    slot = PolicySlot.create(1000, request.param)
    yield slot
    slot.close()
    slot.unlink()


def test_versions_start_at_one_and_increase(slot):
    out = np.full(1000, -1, np.float32)
    assert slot.version == 0 and slot.read(out) == 0 and (out == -1).all()
    for expected in (1, 2, 3):
        assert slot.publish(np.full(1000, expected, np.float32)) == expected
        assert slot.version == expected
    assert slot.read(out) == 3 and (out == 3).all()


def test_unpickled_slot_sees_the_same_memory(slot):
    other = pickle.loads(pickle.dumps(slot))
    try:
        slot.publish(np.arange(1000, dtype=np.float32))
        out = np.empty(1000, np.float32)
        assert other.read(out) == 1
        np.testing.assert_array_equal(out, np.arange(1000))
    finally:
        other.close()


def test_wrong_shapes_and_modes_are_refused(slot):
    with pytest.raises(ConfigError, match=r"holds 1000 floats, got an array of shape \(999,\)"):
        slot.publish(np.zeros(999, np.float32))
    with pytest.raises(ConfigError, match=r"reads into a float32 array of shape \(1000,\)"):
        slot.read(np.zeros(1000, np.float64))
    with pytest.raises(ConfigError, match=r"publish mode must be one of \('double_buffer', 'snapshot'\), got 'triple'"):
        PolicySlot.create(10, "triple")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [MODES[0], *[pytest.param(m, marks=pytest.mark.slow) for m in MODES[1:]]])
def test_reads_are_never_torn_under_a_flat_out_publisher(spawn_ctx, mode):
    # Snapshot readers can only copy between two publications; a smaller vector leaves them room to succeed
    # against a publisher that never pauses (with the guard removed, both sizes show torn reads).
    size = 1 << 16 if mode == "double_buffer" else 1 << 14
    slot = PolicySlot.create(size, mode)
    stop = spawn_ctx.Event()
    publisher = spawn_ctx.Process(target=publish_constant_vectors, args=(slot, 20.0, stop))
    publisher.start()
    out = np.empty(size, np.float32)
    reads, last_version, distinct = 0, 0, set()
    try:
        deadline = time.monotonic() + 30
        while slot.version < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slot.version >= 50, "the publisher did not start"
        # At least 3 s of reading, and up to 20 s until 200 reads (a loaded CI machine starves snapshot readers).
        start = time.monotonic()
        while time.monotonic() - start < 3.0 or (reads < 200 and time.monotonic() - start < 20.0):
            version = slot.read(out, timeout=20)
            # A torn read would mix two publications: two different values, or a value that is not its version.
            assert out.min() == out.max() == version, f"torn read: {out.min()}..{out.max()} at version {version}"
            assert version >= last_version
            last_version = version
            distinct.add(version)
            reads += 1
    finally:
        stop.set()
        publisher.join(timeout=30)
        slot.close()
        slot.unlink()
    assert publisher.exitcode == 0
    assert reads > 100 and len(distinct) > 10, (reads, len(distinct))
