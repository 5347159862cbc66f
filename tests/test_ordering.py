"""Where the seqlocks of policy slots and ring buffers fence (pzasync/transport/ordering.py; docs/shared-memory.md,
invariants 1-2). The protocol: the writer writes the odd word, fences, writes the data, fences, writes the even
word; the reader reads the word, fences, copies, fences, reads the word again. On x86-64 a misplaced fence
changes nothing a test can see across processes, so these tests watch the fences directly: writers through
snapshots of the shared memory taken at each fence, readers through a log of what they read, in order."""

from __future__ import annotations

import types

import numpy as np
import pytest
from gymnasium import spaces

from pzasync import PolicySlot, SharedRingBuffer
from pzasync.core.spaces import agent_layout
from pzasync.core.transitions import Transition
from pzasync.errors import ConfigError, SlotReadTimeout
from pzasync.transport import ordering
from pzasync.transport.buffer import _WRITTEN
from pzasync.transport.slots import _SEQ0, _VERSION, MODES


def numbered(i, size=8):
    obs = np.full(size, i, dtype=np.float32)
    return Transition("a", obs, i % 5, float(i), obs + 1, i % 3 == 0, i % 3 == 1, None, None, {"policy_version": i})


@pytest.fixture
def layout():
    return agent_layout("a", spaces.Box(-np.inf, np.inf, (8,), np.float32), spaces.Discrete(5))


def fences(monkeypatch, snapshot=lambda: None):
    """Replace `ordering.full_fence` (as the modules call it) with a recorder: the list of `snapshot()` taken at
    each call."""
    taken = []
    monkeypatch.setattr(ordering, "full_fence", lambda: taken.append(snapshot()))
    return taken


class Logged:
    """An array (or memoryview) stand-in that notes each read in `log`, as `kind` or `kinds[index]`."""

    def __init__(self, target, log, kind=None, kinds=None):
        self.target, self.log, self.kind, self.kinds = target, log, kind, kinds

    def _note(self, key):
        kind = self.kind if self.kinds is None else self.kinds.get(key)
        if kind is not None:
            self.log.append(kind)

    def __getitem__(self, key):
        self._note(key)
        return self.target[key]

    def __setitem__(self, key, value):
        self.target[key] = value

    def __array__(self, dtype=None, copy=None):
        self._note(None)
        return np.asarray(self.target, dtype=dtype)

    def __len__(self):
        return len(self.target)


def read_log(log):
    """The log with runs of the same read merged (one batch reads several columns); fences are kept apart."""
    merged = []
    for kind in log:
        if not merged or kind == "fence" or merged[-1] != kind:
            merged.append(kind)
    return merged


# ------------------------------------------------------------------------------------------ the fence itself
def test_a_fence_takes_and_releases_the_process_lock_twice(monkeypatch):
    """Release then acquire, in the middle, is what orders all earlier accesses before all later ones on ARMv8."""
    calls = []
    monkeypatch.setattr(ordering, "_acquire", lambda: calls.append("acquire"))
    monkeypatch.setattr(ordering, "_release", lambda: calls.append("release"))
    ordering.full_fence()
    assert calls == ["acquire", "release", "acquire", "release"]


def test_a_fence_leaves_the_lock_free():
    ordering.full_fence()
    assert not ordering._lock.locked()


def test_32_bit_platforms_are_refused_before_anything_is_allocated(monkeypatch, layout):
    monkeypatch.setattr(ordering, "struct", types.SimpleNamespace(calcsize=lambda fmt: 4))
    with pytest.raises(ConfigError, match=r"a policy slot needs a 64-bit platform: .* this Python is 32-bit \("):
        PolicySlot.create(10)
    with pytest.raises(ConfigError, match=r"the replay buffer of agent 'a' needs a 64-bit platform"):
        SharedRingBuffer.create(layout, 16)
    # (the leak check of every test confirms that no segment was created)


# ------------------------------------------------------------------------------------------ policy slots
@pytest.mark.parametrize("mode", MODES)
def test_publish_fences_after_the_odd_word_and_before_the_even_one(monkeypatch, mode):
    slot = PolicySlot.create(1000, mode)
    try:
        slot.publish(np.full(1000, 1, np.float32))
        slot.publish(np.full(1000, 2, np.float32))
        copy = 3 % len(slot._copies)  # where version 3 goes
        old = 1 if mode == "double_buffer" else 2
        taken = fences(monkeypatch, lambda: (slot._words[_SEQ0 + copy], slot._copies[copy].copy(),
                                             slot._words[_VERSION]))
        assert slot.publish(np.full(1000, 3, np.float32)) == 3
        assert len(taken) == 2
        (word1, data1, version1), (word2, data2, version2) = taken
        assert word1 == 5 and (data1 == old).all(), "first fence: after the odd word, before any new data"
        assert word2 == 5 and (data2 == 3).all(), "second fence: after all of the data, before the even word"
        assert version1 == version2 == 2, "the version word moves after both fences"
        assert slot._words[_SEQ0 + copy] == 6 and slot.version == 3
    finally:
        slot.close()
        slot.unlink()


@pytest.mark.parametrize("mode", MODES)
def test_read_fences_after_the_first_word_and_before_the_second(monkeypatch, mode):
    slot = PolicySlot.create(1000, mode)
    originals = slot._words, slot._copies
    try:
        slot.publish(np.full(1000, 7, np.float32))
        log = []
        monkeypatch.setattr(ordering, "full_fence", lambda: log.append("fence"))
        slot._words = Logged(slot._words, log, kinds={_VERSION: "version", _SEQ0: "word", _SEQ0 + 1: "word"})
        slot._copies = [Logged(c, log, "copy") for c in slot._copies]
        out = np.zeros(1000, np.float32)
        assert slot.read(out) == 1 and (out == 7).all()
        assert log == ["version", "word", "fence", "copy", "fence", "word"]
    finally:
        slot._words, slot._copies = originals
        slot.close()
        slot.unlink()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("strike", [1, 2])
def test_a_publication_during_a_read_makes_it_retry(monkeypatch, mode, strike):
    """A publisher that moves the copy's word at the reader's first fence (after the reader noted the word) or
    second fence (before it reads the word again) must send the reader round again."""
    slot = PolicySlot.create(1000, mode)
    try:
        slot.publish(np.full(1000, 1, np.float32))
        copy = 1 % len(slot._copies)
        out = np.zeros(1000, np.float32)

        calls = []

        def fence_where_a_publisher_strikes():
            calls.append("fence")
            if len(calls) == strike:
                # The next version this copy will hold, published in full while the reader is mid-read.
                slot._words[_SEQ0 + copy] = slot._words[_SEQ0 + copy] + 2 * len(slot._copies)

        monkeypatch.setattr(ordering, "full_fence", fence_where_a_publisher_strikes)
        version = slot.read(out)
        assert len(calls) == 4, "the read did not notice the publication and retry"
        assert version == 1 + len(slot._copies)
    finally:
        slot.close()
        slot.unlink()


def test_a_read_never_takes_a_copy_older_than_the_version_it_was_sent_to():
    """On a CPU that reorders stores the version word can be seen before the copy's own word: the reader waits."""
    slot = PolicySlot.create(10, "double_buffer")
    try:
        slot.publish(np.full(10, 1, np.float32))
        slot.publish(np.full(10, 2, np.float32))
        slot._words[_SEQ0 + 0] = 0  # copy 0's word as another CPU might still see it: before version 2 was written
        with pytest.raises(SlotReadTimeout, match="no consistent copy"):
            slot.read(np.zeros(10, np.float32), timeout=0.05)
        slot._words[_SEQ0 + 0] = 4
        assert slot.read(out := np.zeros(10, np.float32)) == 2 and (out == 2).all()
    finally:
        slot.close()
        slot.unlink()


# ------------------------------------------------------------------------------------------ ring buffer writers
@pytest.mark.parametrize("storage", ["twice", "once"])
def test_a_row_write_fences_after_the_odd_word_and_before_the_even_one(monkeypatch, layout, storage):
    buf = SharedRingBuffer.create(layout, 4, obs_storage=storage)
    try:
        for i in range(6):
            buf.write(numbered(i))
        row = 6 % 4  # holds transition 2; transition 6 goes there
        taken = fences(monkeypatch, lambda: (int(buf._seq[row]), float(buf._columns["reward"][row]),
                                             int(buf._columns["policy_version"][row]), buf.written))
        buf.write(numbered(6))
        # With observations stored once, transition 6's obs shares transition 5's next_obs frame, and its
        # next_obs takes a new frame first: two fences of its own (tested below), then the row's two.
        assert len(taken) == (2 if storage == "twice" else 4)
        (word1, reward1, version1, written1), (word2, reward2, version2, written2) = taken[-2:]
        assert word1 == 13 and (reward1, version1) == (2.0, 2), "first fence: after the odd word, before the row"
        assert word2 == 13 and (reward2, version2) == (6.0, 6), "second fence: after the row, before the even word"
        assert written1 == written2 == 6, "the count moves after both fences"
        assert buf._seq[row] == 14 and buf.written == 7
    finally:
        buf.close()
        buf.unlink()


def test_a_frame_write_fences_after_its_odd_word_and_before_its_even_one(monkeypatch, layout):
    buf = SharedRingBuffer.create(layout, 4, obs_storage="once")
    try:
        taken = fences(monkeypatch, lambda: (buf._frame_seq.copy(), buf._frame_columns["obs"].copy()))
        buf.write(numbered(0))  # the track's first transition: a frame for obs, one for next_obs, then the row
        assert len(taken) == 6
        for frame, value in ((0, 0.0), (1, 1.0)):
            (words1, data1), (words2, data2) = taken[2 * frame], taken[2 * frame + 1]
            assert words1[frame] == 2 * frame + 1 and np.isnan(data1[frame]).all(), \
                "first fence: after the frame's odd word, before its data"
            assert words2[frame] == 2 * frame + 1 and (data2[frame] == value).all(), \
                "second fence: after the frame's data, before its even word"
        assert buf._frame_seq[:2].tolist() == [2, 4]
        assert taken[4][0][:2].tolist() == [2, 4], "both frames are complete before the row's fences"
    finally:
        buf.close()
        buf.unlink()


def test_appended_rows_fence_after_their_odd_words_and_before_their_even_ones(monkeypatch, layout):
    source = SharedRingBuffer.create(layout, 8)
    buf = SharedRingBuffer.create(layout, 8)
    try:
        for i in range(8):
            source.write(numbered(10 + i))
            buf.write(numbered(i))
        batch = source.read_new(max_rows=3)
        taken = fences(monkeypatch, lambda: (buf._seq[:3].copy(), buf._columns["reward"][:3].copy(), buf.written))
        assert buf.write_rows(batch) == 3
        assert len(taken) == 2
        (words1, rewards1, written1), (words2, rewards2, written2) = taken
        assert words1.tolist() == words2.tolist() == [17, 19, 21]
        assert rewards1.tolist() == [0, 1, 2] and rewards2.tolist() == [10, 11, 12]
        assert written1 == written2 == 8 and buf.written == 11
        assert buf._seq[:3].tolist() == [18, 20, 22]
    finally:
        source.close()
        source.unlink()
        buf.close()
        buf.unlink()


def test_rows_appended_to_a_buffer_storing_observations_once_fence_like_written_rows(monkeypatch, layout):
    source = SharedRingBuffer.create(layout, 8)
    buf = SharedRingBuffer.create(layout, 4, obs_storage="once")
    try:
        source.write(numbered(20))
        for i in range(6):
            buf.write(numbered(i))
        row = 6 % 4  # holds transition 2
        batch = source.read_new()
        old_ref = int(buf._columns["obs_ref"][row])
        taken = fences(monkeypatch, lambda: (int(buf._seq[row]), float(buf._columns["reward"][row]),
                                             int(buf._columns["obs_ref"][row]), buf._frame_seq.copy(), buf.written))
        assert buf.write_rows(batch) == 1
        # A new track (the batch names none): a frame for obs and one for next_obs, written in one phase (two
        # fences), then the row.
        assert len(taken) == 4
        (word1, reward1, ref1, frames1, written1), (word2, reward2, ref2, _, written2) = taken[-2:]
        assert word1 == word2 == 13 and (reward1, reward2) == (2.0, 20.0)
        assert ref1 == old_ref != ref2 == buf._columns["obs_ref"][row], "the references are row data too"
        assert written1 == written2 == 6 and buf._seq[row] == 14 and buf.written == 7
        assert (frames1[buf._columns["obs_ref"][row] % buf.frames] % 2 == 0), "the frames are complete before"
        batch, valid = buf.gather_logical(np.array([6]))
        assert valid.all() and batch["obs"][0].tolist() == [20] * 8 and batch["next_obs"][0].tolist() == [21] * 8
    finally:
        source.close()
        source.unlink()
        buf.close()
        buf.unlink()


# ------------------------------------------------------------------------------------------ ring buffer readers
def _watch_reads(buf, log):
    originals = {name: getattr(buf, name) for name in ("_words", "_seq", "_columns", "_frame_seq", "_frame_columns")}
    buf._words = Logged(buf._words, log, kinds={_WRITTEN: "count"})
    buf._seq = Logged(buf._seq, log, "word")
    buf._columns = {name: Logged(column, log, "row") for name, column in buf._columns.items()}
    if buf.frames:
        buf._frame_seq = Logged(buf._frame_seq, log, "frame word")
        buf._frame_columns = {name: Logged(column, log, "frame") for name, column in buf._frame_columns.items()}
    return originals


# The reads of one batch: the rows' words, a fence, every row, a fence, the words again. With frames, their words
# are read after the rows (which name them), then a fence, the frames, a fence, and all the words again.
BATCH = {"twice": ["word", "fence", "row", "fence", "word"],
         "once": ["word", "fence", "row", "frame word", "fence", "frame", "fence", "frame word", "word"]}


@pytest.mark.parametrize("storage", ["twice", "once"])
@pytest.mark.parametrize("reader", ["sample", "sample_windows", "read_new", "gather_logical"])
def test_readers_fence_between_the_words_and_the_whole_batch(monkeypatch, layout, storage, reader):
    buf = SharedRingBuffer.create(layout, 16, obs_storage=storage)
    originals = None
    try:
        for i in range(10):
            buf.write(numbered(i))
        log = []
        monkeypatch.setattr(ordering, "full_fence", lambda: log.append("fence"))
        originals = _watch_reads(buf, log)
        rng = np.random.default_rng(0)
        if reader == "sample":
            batch = buf.sample(8, rng)
        elif reader == "sample_windows":
            batch, valid = buf.sample_windows(8, 2, rng)
            batch = {name: values[:, 0] for name, values in batch.items()}
        elif reader == "read_new":
            batch = buf.read_new()
        else:
            batch, valid = buf.gather_logical(np.arange(2, 9))
            assert valid.all()
        index = batch["reward"].astype(np.int64)
        assert (batch["policy_version"] == index).all() and (batch["obs"] == index[:, None]).all()
        assert (batch["next_obs"] == index[:, None] + 1).all()
        # Every reader but gather_logical (given its rows) first reads the count, then fences: the rows below it
        # are then seen with their words complete, all but perhaps the newest.
        counted = [] if reader == "gather_logical" else ["count", "fence"]
        assert read_log(log) == counted + BATCH[storage]
    finally:
        if originals:
            for name, value in originals.items():
                setattr(buf, name, value)
        buf.close()
        buf.unlink()


def test_an_in_order_read_leaves_a_counted_row_not_yet_complete_for_later(layout):
    """On a CPU that reorders stores, a reader can see `written` cover a row whose even word it does not see yet:
    that row is neither returned nor counted as dropped, and the next read returns it."""
    buf = SharedRingBuffer.create(layout, 8)
    try:
        for i in range(5):
            buf.write(numbered(i))
        buf._seq[4] = 2 * 4 + 1  # the newest row's word as another CPU may still see it
        assert buf.read_new().get("reward").tolist() == [0, 1, 2, 3]
        assert buf.read_cursor == 4 and buf.dropped == 0 and buf.unread == 1
        buf._seq[4] = 2 * 4 + 2
        assert buf.read_new()["reward"].tolist() == [4] and buf.dropped == 0
    finally:
        buf.close()
        buf.unlink()
