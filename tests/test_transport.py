"""The transport seam (pzasync/transport/protocols.py): the shared-memory classes implement it, rows appended in chunks
(what a learner on another node receives) read back exactly as rows written one by one, a mirrored slot keeps
its publisher's version numbers, and a learner's error is raised again as its own type."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from pzasync import (
    PolicyPublisher,
    PolicySlot,
    PolicySource,
    RunControl,
    SharedRingBuffer,
    TransitionSource,
    TransitionWriter,
    agent_layout,
)
from pzasync.backends.ray.workers import VersionedVector
from pzasync.core.transitions import Transition
from pzasync.errors import ConfigError, LearnerCrashedError, RemoteTraceback, learner_error
from pzasync.transport.shm import new_run_id
from pzasync.transport.stats import RunStats


def _layout():
    return agent_layout("a", spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(4))


def _transition(i: int) -> Transition:
    obs = np.full(3, i / 1000, np.float32)
    return Transition("a", obs, i % 4, float(i), obs + 1, i % 7 == 6, False, extras={"policy_version": i // 5})


@pytest.fixture
def buffers():
    made = []

    def make(capacity):
        b = SharedRingBuffer.create(_layout(), capacity)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()
        b.unlink()


def test_the_shared_memory_classes_implement_the_seam(buffers):
    buffer = buffers(8)
    slot = PolicySlot.create(4)
    stats = RunStats.create(new_run_id(), ["a"])
    try:
        assert isinstance(buffer, TransitionWriter) and isinstance(buffer, TransitionSource)
        assert isinstance(slot, PolicyPublisher) and isinstance(slot, PolicySource)
        assert isinstance(stats, RunControl)
        assert isinstance(VersionedVector(4), PolicyPublisher) and isinstance(VersionedVector(4), PolicySource)
        assert not isinstance(object(), TransitionWriter), "the check can fail"
    finally:
        slot.close()
        slot.unlink()
        stats.close()
        stats.unlink()


@pytest.mark.parametrize("chunk", [1, 3, 8, 20], ids=lambda c: f"chunks of {c}")
def test_rows_appended_in_chunks_read_back_as_rows_written_one_by_one(buffers, chunk):
    """What the Ray backend's pump sends (read_new chunks) and a remote learner appends (write_rows) is, for
    the in-order reader, the same stream with the same drop count as the actor's own buffer; chunks larger
    than the capacity included."""
    n, capacity = 50, 8
    source, direct, relayed = buffers(64), buffers(capacity), buffers(capacity)
    for i in range(n):
        source.write(_transition(i))
        direct.write(_transition(i))
    got_direct = direct.read_new()
    while (part := source.read_new(max_rows=chunk)) is not None:
        relayed.write_rows(part)
    got_relayed = relayed.read_new()
    assert relayed.written == direct.written == n
    assert relayed.dropped == direct.dropped == n - capacity
    for key in got_direct:
        np.testing.assert_array_equal(got_relayed[key], got_direct[key], err_msg=key)
    assert got_relayed["reward"].tolist() == [float(i) for i in range(n - capacity, n)]


def test_a_mirrored_slot_keeps_the_publishers_version_numbers():
    slot = PolicySlot.create(3)
    out = np.zeros(3, np.float32)
    try:
        assert slot.publish(np.ones(3, np.float32), version=7) == 7
        assert slot.read(out) == 7 and out.tolist() == [1, 1, 1]
        assert slot.publish(np.full(3, 2, np.float32), version=12) == 12 and slot.read(out) == 12
        with pytest.raises(ConfigError, match="version 12 is not newer than 12"):
            slot.publish(np.zeros(3, np.float32), version=12)
        assert slot.publish(np.zeros(3, np.float32)) == 13, "unnumbered publications go on from the last"
    finally:
        slot.close()
        slot.unlink()


def test_a_versioned_vector_waits_for_a_newer_version_and_never_returns_an_older_one():
    vv = VersionedVector(2)
    assert vv.newer_than(0) is None
    vv.publish(np.array([1, 2], np.float32))
    version, vector = vv.newer_than(0)
    assert version == 1 and vector.tolist() == [1, 2]
    assert vv.newer_than(1, wait_s=0.01) is None


def test_a_learners_error_is_raised_again_as_its_own_type_with_its_traceback():
    error = learner_error("builtins:KeyError", "KeyError: 'x'", "Traceback ...\nKeyError: 'x'\n",
                          "the learner of agent 'p0' failed 2 times")
    assert isinstance(error, KeyError) and isinstance(error, LearnerCrashedError)
    assert str(error).startswith("the learner of agent 'p0' failed 2 times; last failure: KeyError: 'x'")
    assert isinstance(error.__cause__, RemoteTraceback) and "Traceback" in str(error.__cause__)
    plain = learner_error("no_such_module:Oops", "Oops: x", "", "note")
    assert type(plain) is LearnerCrashedError, "a type that cannot be imported gives the plain error"
    with pytest.raises(KeyError):
        raise error
