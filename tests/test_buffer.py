"""Shared ring buffers: invariants 2 and 3 (docs/shared-memory.md), sentinel fill, memory checks, attach by pickling."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
from gymnasium import spaces
from proc_helpers import write_numbered_transitions

from pzasync import SharedRingBuffer
from pzasync.core.spaces import agent_layout
from pzasync.core.transitions import Transition
from pzasync.errors import ConfigError, InsufficientSharedMemoryError, PzasyncError

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
    monkeypatch.setattr("pzasync.transport.shm.free_shm_bytes", lambda: 10_000)
    needed = SharedRingBuffer.nbytes_for(layout, 100_000)
    with pytest.raises(InsufficientSharedMemoryError,
                       match=rf"agent 'a' \(100,000 transitions\) needs {needed:,} bytes .* only 10,000 bytes"):
        SharedRingBuffer.create(layout, 100_000)


def _run_writer(spawn_ctx, capacity, count, obs_size=OBS, storage="twice"):
    layout = agent_layout("a", spaces.Box(-np.inf, np.inf, (obs_size,), np.float32), spaces.Discrete(5))
    buf = SharedRingBuffer.create(layout, capacity, obs_storage=storage)
    start = spawn_ctx.Event()
    writer = spawn_ctx.Process(target=write_numbered_transitions, args=(buf, count, layout, start))
    writer.start()
    return buf, writer, start


@pytest.mark.timeout(120)
@pytest.mark.parametrize("storage", ["twice", "once"])
def test_samples_are_never_torn_under_a_flat_out_writer(spawn_ctx, storage):
    """With "once", transition i's obs is transition i-1's next_obs frame unless i-1 ended its episode."""
    count = 30_000
    buf, writer, start = _run_writer(spawn_ctx, capacity=32, count=count, storage=storage)
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
@pytest.mark.parametrize("storage", ["twice", pytest.param("once", marks=pytest.mark.slow)])  # 5 s each
def test_in_order_reader_counts_every_drop_exactly(spawn_ctx, storage):
    count, size = 200_000, 1024
    buf, writer, start = _run_writer(spawn_ctx, capacity=64, count=count, obs_size=size, storage=storage)
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


# ------------------------------------------------------------------------- observations stored once
def _recorded_stream(seed: int = 0, count: int = 3000) -> list[Transition]:
    """What an actor writes for a group of 3 agents in 2 env copies (6 tracks): interleaved turns, episode
    ends, cuts, and agents that die mid-episode (their last transition terminates, the others go on). Every
    observation is unique, and a transition's obs is its track's previous next_obs, as in AEC play."""
    rng = np.random.default_rng(seed)
    stream: list[Transition] = []
    counter = iter(range(1, 10**9))

    def frame() -> np.ndarray:
        return np.full(8, next(counter), np.float32)

    live = {track: frame() for track in range(6)}
    while len(stream) < count:
        track = int(rng.choice(sorted(live)))
        obs, next_obs = live[track], frame()
        end = rng.random()
        terminated, truncated = end < 0.02, 0.02 <= end < 0.03  # dies or ends (2%), cut (1%)
        stream.append(Transition(f"p{track % 3}", obs, int(rng.integers(5)), float(len(stream)), next_obs,
                                 terminated, truncated, None, None,
                                 {"policy_version": len(stream), "track": track}))
        if terminated or truncated:
            del live[track]
            if not live or rng.random() < 0.5:  # the copy resets: its dead tracks come back with new episodes
                for t in range(6):
                    live.setdefault(t, frame())
        else:
            live[track] = next_obs
    return stream


def _same(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("capacity", [64, 1000])
def test_observations_stored_once_read_like_the_old_layout(layout, capacity):
    """A recorded stream with episode ends, cuts and dead agents: in-order chunks (with overwrites between
    reads), drop counts and seeded samples are the same whether observations are stored once or twice, and
    every row returned is the transition written at its index."""
    stream = _recorded_stream()
    extras = {"track": "int32"}
    twice = SharedRingBuffer.create(layout, capacity, extras, obs_storage="twice")
    once = SharedRingBuffer.create(layout, capacity, extras, obs_storage="once", tracks=6)
    try:
        assert once.frames and not twice.frames
        rng = np.random.default_rng(3)
        returned = 0
        for i, t in enumerate(stream):
            twice.write(t)
            once.write(t)
            if i % 97 == 96:  # behind now and then: rows are overwritten before they are read
                rows = int(rng.integers(1, 80))
                a, b = twice.read_new(max_rows=rows), once.read_new(max_rows=rows)
                assert _same(a, b) and twice.dropped == once.dropped, f"in-order reads differ at {i}"
                if b is not None:
                    returned += len(b["reward"])
                    for row, index in enumerate(b["reward"].astype(int)):
                        assert np.array_equal(b["obs"][row], stream[index].obs)
                        assert np.array_equal(b["next_obs"][row], stream[index].next_obs)
            if i % 31 == 30:
                seed = int(rng.integers(2**31))
                a, b = twice.sample(64, np.random.default_rng(seed)), once.sample(64, np.random.default_rng(seed))
                assert _same(a, b), f"samples differ at {i}"
        a, b = twice.read_new(), once.read_new()
        assert _same(a, b) and twice.dropped == once.dropped
        returned += len(b["reward"])
        assert returned + once.dropped == once.written == len(stream)
        assert once.dropped > 0 or capacity > len(stream) / 4
        # 1 frame per row, plus one per episode start (3%) and per row whose track's previous frame was too old
        # to share (turns are drawn at random here, so a track is sometimes idle for long).
        assert once._frames_written < 1.2 * len(stream), once._frames_written
    finally:
        for buf in (twice, once):
            buf.close()
            buf.unlink()


@pytest.mark.parametrize("storage", ["twice", "once"])
def test_transitions_written_in_batches_read_back_as_written_one_by_one(layout, storage):
    """`write_batch` (the actor's writes after each round) leaves a buffer exactly as `write` one transition at a
    time would: the same in-order chunks, drop counts and seeded samples, with observations stored once sharing
    their frames as often."""
    stream = _recorded_stream(seed=2, count=1500)
    extras = {"track": "int32"}
    single = SharedRingBuffer.create(layout, 200, extras, obs_storage=storage, tracks=6)
    batched = SharedRingBuffer.create(layout, 200, extras, obs_storage=storage, tracks=6)
    try:
        rng = np.random.default_rng(4)
        i = 0
        while i < len(stream):
            size = int(rng.integers(1, 40))
            for t in stream[i:i + size]:
                single.write(t)
            assert batched.write_batch(stream[i:i + size]) == len(stream[i:i + size])
            i += size
            if rng.random() < 0.3:
                rows = int(rng.integers(1, 120))
                assert _same(single.read_new(max_rows=rows), batched.read_new(max_rows=rows))
                assert single.dropped == batched.dropped
            seed = int(rng.integers(2**31))
            assert _same(single.sample(32, np.random.default_rng(seed)),
                         batched.sample(32, np.random.default_rng(seed)))
        assert single.written == batched.written == len(stream)
        if storage == "once":
            assert batched._frames_written <= single._frames_written < 1.3 * len(stream)
    finally:
        for buf in (single, batched):
            buf.close()
            buf.unlink()


@pytest.mark.parametrize("copies_every", [0, 7])
def test_frames_chained_by_identity_are_those_found_by_comparing_values(layout, monkeypatch, copies_every):
    """`write_batch`'s frames chained by identity (`_chained_refs`: a row whose obs is the array its track's
    previous row had as next_obs) leave the buffer byte for byte as the reference, which compares values: the
    same rows, frames, sequence words and track tails. With `copies_every`, some rows carry an equal copy instead
    of the array itself: those batches are compared by value, and the result is still the same."""
    stream = _recorded_stream(seed=5, count=2500)
    if copies_every:
        stream = [replace_obs(t, t.obs.copy()) if i % copies_every == 0 else t for i, t in enumerate(stream)]
    extras = {"track": "int32"}
    reference = SharedRingBuffer.create(layout, 2000, extras, obs_storage="once", tracks=6)
    chained = SharedRingBuffer.create(layout, 2000, extras, obs_storage="once", tracks=6)
    reference.chain_by_identity = False
    taken = []
    write_chained = SharedRingBuffer._write_chained
    monkeypatch.setattr(SharedRingBuffer, "_write_chained",
                        lambda self, *args: taken.append(len(args[0])) or write_chained(self, *args))
    try:
        rng = np.random.default_rng(6)
        i = 0
        while i < len(stream):
            size = int(rng.integers(2, 13))
            reference.write_batch(stream[i:i + size])
            chained.write_batch(stream[i:i + size])
            i += size
            assert reference._frames_written == chained._frames_written
            assert reference._track_tail == chained._track_tail
        for name in reference._columns:
            assert np.array_equal(reference._columns[name], chained._columns[name]), name
        assert np.array_equal(reference._frame_columns["obs"], chained._frame_columns["obs"])
        assert np.array_equal(reference._frame_seq, chained._frame_seq)
        assert np.array_equal(reference._seq, chained._seq)
        assert _same(reference.read_new(), chained.read_new())
        chained_share = sum(taken) / len(stream)
        if copies_every:
            assert 0 < chained_share < 0.6, "batches with a copied observation are compared by value"
        else:
            assert chained_share > 0.95, "the steppers' chained observations take the path by identity"
    finally:
        for buf in (reference, chained):
            buf.close()
            buf.unlink()


def replace_obs(t: Transition, obs: np.ndarray) -> Transition:
    return Transition(t.agent, obs, t.action, t.reward, t.next_obs, t.terminated, t.truncated, t.action_mask,
                      t.next_action_mask, t.extras)


def test_rows_appended_in_chunks_share_frames_and_read_back_unchanged(layout):
    """`write_rows` (what the Ray backend's remote learners are fed with) on a buffer that stores
    observations once: chunks read from a two-column buffer come back the same, with frames shared."""
    stream = _recorded_stream(seed=1, count=600)
    source = SharedRingBuffer.create(layout, 1000, {"track": "int32"}, obs_storage="twice")
    copy = SharedRingBuffer.create(layout, 1000, {"track": "int32"}, obs_storage="once", tracks=6)
    try:
        for t in stream:
            source.write(t)
        chunks = [source.read_new(max_rows=64) for _ in range(10)]
        for chunk in chunks:
            copy.write_rows(chunk)
        assert copy.written == len(stream) and copy._frames_written < 1.2 * len(stream)
        assert _same(copy.read_new(), {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]})
    finally:
        for buf in (source, copy):
            buf.close()
            buf.unlink()


def test_a_row_whose_frame_was_overwritten_is_never_returned(layout):
    """One-decision episodes need two frames per row, more than the frame ring holds for a full ring of
    rows: the oldest rows lose their frames first, and are skipped by samples and counted as dropped."""
    buf = SharedRingBuffer.create(layout, 16, obs_storage="once")
    try:
        for i in range(16):
            obs = np.full(8, 2 * i, np.float32)
            buf.write(Transition("a", obs, i % 5, float(i), obs + 1, True, False, None, None, {"policy_version": i}))
        lost = 2 * 16 - buf.frames  # frames written beyond the ring: those of the oldest rows
        assert lost > 0
        batch = buf.sample(400, np.random.default_rng(0))
        index = batch["reward"].astype(int)
        assert (index >= (lost + 1) // 2).all() and (batch["obs"][:, 0] == 2 * index).all()
        assert (batch["next_obs"][:, 0] == 2 * index + 1).all()
        chunk = buf.read_new()
        assert chunk["reward"].astype(int).tolist() == list(range((lost + 1) // 2, 16))
        assert buf.dropped == (lost + 1) // 2
    finally:
        buf.close()
        buf.unlink()


def test_windows_are_sampled_from_a_buffer_that_stores_observations_once(layout):
    """`sample_windows` gathers rows in two dimensions (start row, offset); the frames' check keeps that shape
    (it raised ValueError, so DQN with n_step > 1 failed on observations stored once)."""
    buf = SharedRingBuffer.create(layout, 16, obs_storage="once")
    try:
        for i in range(10):
            buf.write(numbered(i))
        batch, valid = buf.sample_windows(8, 2, np.random.default_rng(0))
        assert valid.shape == (8, 3) and valid[:, 0].all() and not valid.all()
        index = np.nan_to_num(batch["reward"], nan=-1).astype(np.int64)  # rows not written yet hold NaN
        assert (index[valid] == (index[:, :1] + np.arange(3))[valid]).all()
        assert (batch["obs"][valid] == index[valid][:, None]).all()
        assert (batch["next_obs"][valid] == index[valid][:, None] + 1).all()
    finally:
        buf.close()
        buf.unlink()


def test_stored_once_pistonball_frames_take_at_most_055_of_the_memory():
    """Raw pistonball frames (457 x 120 x 3 bytes), 100,000 transitions, 20 pistons in one group."""
    frame = agent_layout("piston_0", spaces.Box(0, 255, (457, 120, 3), np.uint8), spaces.Discrete(3))
    twice = SharedRingBuffer.nbytes_for(frame, 100_000, {"member": "int16"}, obs_storage="twice", tracks=20)
    once = SharedRingBuffer.nbytes_for(frame, 100_000, {"member": "int16"}, obs_storage="auto", tracks=20)
    assert once / twice <= 0.55, once / twice


def test_small_observations_stay_in_both_columns_under_auto(layout):
    assert SharedRingBuffer.nbytes_for(layout, 1000, obs_storage="auto") == SharedRingBuffer.nbytes_for(layout, 1000)


@pytest.mark.timeout(120)
def test_a_run_with_observations_stored_once_feeds_learners_whole_trajectories(tmp_path):
    """connect_four with obs_storage="once": in every in-order batch a learner gets, each row's next_obs is
    the next row's obs unless the row ended its episode (both read back through the frame references)."""
    from pzasync import AsyncRunner, RunConfig

    learners = ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)})
    result = AsyncRunner("pettingzoo.classic.connect_four_v3", learners,
                         RunConfig(seed=0, obs_storage="once", backpressure=True)).run(agent_steps=1500)
    assert all(r.transitions_dropped == 0 for r in result.agents.values()), "backpressure: nothing overwritten"
    continued = 0
    for agent in ("player_0", "player_1"):
        batches = [np.load(p) for p in sorted(tmp_path.glob(f"{agent}-*.npz"))]
        rows = {k: np.concatenate([b[k] for b in batches]) for k in ("obs", "next_obs", "terminated", "truncated")}
        assert len(rows["obs"]) > 300
        for i in range(len(rows["obs"]) - 1):
            if not (rows["terminated"][i] or rows["truncated"][i]):
                assert np.array_equal(rows["next_obs"][i], rows["obs"][i + 1]), (agent, i)
                continued += 1
    assert continued > 500


def test_rows_marked_as_following_leave_the_buffer_as_rows_compared_by_value(layout):
    """`write_rows(batch, follows)` (the parallel path in columns marks each row whose obs is by construction its
    track's previous next_obs) shares those frames without comparing values: the buffer ends byte for byte as
    when every row is compared, the reference. Unmarked rows are still compared."""
    stream = _recorded_stream(seed=8, count=2500)
    last_ended: dict[int, bool] = {}
    follows = []
    for t in stream:  # marked: the track's previous row exists and did not end; every other row unmarked
        track = t.extras["track"]
        follows.append(track in last_ended and not last_ended[track])
        last_ended[track] = t.terminated or t.truncated
    follows = np.array(follows)
    follows[::11] = False  # some rows that follow left unmarked: compared, with the same outcome
    extras = {"track": "int32"}
    reference = SharedRingBuffer.create(layout, 2000, extras, obs_storage="once", tracks=6)
    marked = SharedRingBuffer.create(layout, 2000, extras, obs_storage="once", tracks=6)
    try:
        rng = np.random.default_rng(9)
        i = 0
        while i < len(stream):
            size = int(rng.integers(1, 30))
            rows = transitions_to_columns(stream[i:i + size])
            reference.write_rows(rows)
            marked.write_rows(rows, follows[i:i + size])
            i += size
            assert reference._frames_written == marked._frames_written
            assert reference._track_tail == marked._track_tail
        assert follows.mean() > 0.8 and reference._frames_written < 1.3 * len(stream), "most frames shared"
        for name in reference._columns:
            assert np.array_equal(reference._columns[name], marked._columns[name]), name
        assert np.array_equal(reference._frame_columns["obs"], marked._frame_columns["obs"])
        assert np.array_equal(reference._frame_seq, marked._frame_seq)
        assert _same(reference.read_new(), marked.read_new())
    finally:
        for buf in (reference, marked):
            buf.close()
            buf.unlink()


def transitions_to_columns(transitions) -> dict[str, np.ndarray]:
    """Transitions as the columns `write_rows` takes."""
    return {"obs": np.stack([t.obs for t in transitions]), "next_obs": np.stack([t.next_obs for t in transitions]),
            "action": np.array([t.action for t in transitions]),
            "reward": np.array([t.reward for t in transitions], np.float32),
            "terminated": np.array([t.terminated for t in transitions]),
            "truncated": np.array([t.truncated for t in transitions]),
            "policy_version": np.array([t.extras["policy_version"] for t in transitions]),
            "track": np.array([t.extras["track"] for t in transitions], np.int32)}
