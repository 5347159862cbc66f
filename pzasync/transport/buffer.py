"""Per-agent shared-memory ring buffers: the actor writes transitions, that agent's learner reads them.

Each row holds one transition, column by column (one array per field, in the field's own dtype), and a
sequence word: `2t + 1` while logical transition `t` is being written into the row, `2t + 2` once it is
complete. A reader gathers the words, the rows, and the words again; a row whose word changed, or is odd,
was overwritten during the copy and is never handed out (docs/shared-memory.md, invariant 2). Memory never
written is filled with 0xFF bytes (NaN for floats, -1 or 255 for integers), so a read of it is detectable.

Large observations are stored once ("once" storage, `RunConfig.obs_storage`): instead of `obs` and
`next_obs` columns, a row holds two references into a ring of observation *frames*, each guarded by its own
sequence word. A transition's `next_obs` is a new frame; its `obs` is the frame its track's previous
transition stored as `next_obs` (the same observation: the agent's next turn), so an episode of k decisions
stores k + 1 frames instead of 2k. A row whose frame has been overwritten reads as torn: `sample` redraws it,
`read_new` counts it dropped. The frame ring holds a sixteenth more frames than rows (for episode starts),
so a row's frames outlive it unless episodes average fewer than about 16 decisions per agent.

Off-policy learners `sample` uniformly among rows already written (or `sample_windows`: each sampled row with
the rows written after it, for n-step returns). On-policy learners `read_new` every
transition once, in order; transitions overwritten before they were read are counted in `dropped`, so
`returned + dropped == written` always holds (docs/shared-memory.md, invariant 3).

Memory ordering: the writer writes the odd words, fences, writes the rows (or frames), fences, writes the even
words and then the `written` count; a reader reads the words, fences, copies a whole batch of rows, fences and
reads the words again (`ordering.full_fence`, which holds on any CPU). Nothing orders a row's even word before
the `written` count that covers it, so another CPU may see the count first: `read_new` leaves such a row for
its next call instead of counting it dropped; `sample` gets the row's previous transition, whole, or redraws
it; `sample_windows` and `gather_logical` mark it invalid. Readers fence after reading `written`, so only the
newest row can be in that state. Every word is an aligned 8-byte value, read and written in one access;
buffers are refused on 32-bit platforms.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pzasync.core.spaces import AgentLayout, leaf_value, stack_masks
from pzasync.core.transitions import Transition
from pzasync.errors import ConfigError, PzasyncError
from pzasync.transport import ordering
from pzasync.transport.shm import DETACHED, ArraySpec, Segment, carve, check_fits, new_run_id, packed_size

# Header words: written count (actor), read cursor and dropped count (learner), capacity.
_WRITTEN, _CURSOR, _DROPPED, _CAPACITY = 0, 1, 2, 3
SENTINEL_BYTE = 0xFF

#: Extras every learner may rely on: which policy version produced the action.
DEFAULT_EXTRAS: dict[str, str] = {"policy_version": "int64"}
#: RunConfig.obs_storage values; "auto" stores observations once from this many bytes per observation.
OBS_STORAGE: tuple[str, ...] = ("auto", "once", "twice")
ONCE_FROM_BYTES = 512


def _is_obs(name: str) -> bool:
    return name in ("obs", "next_obs") or name.startswith(("obs/", "next_obs/"))


def frame_capacity(capacity: int, tracks: int = 1) -> int:
    """Frames of a buffer that stores observations once: one per row, a sixteenth more for episode starts,
    and a few per track for the frames its newest transitions still share."""
    return capacity + capacity // 16 + 4 * max(1, tracks) + 2


def stores_once(layout: AgentLayout, storage: str) -> bool:
    """Whether `storage` ("auto", "once", "twice") stores this agent's observations once."""
    if storage not in OBS_STORAGE:
        raise ConfigError(f"obs_storage {storage!r}: must be one of {OBS_STORAGE}")
    obs_bytes = sum(int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize for leaf in layout.obs_leaves)
    return storage == "once" or (storage == "auto" and obs_bytes >= ONCE_FROM_BYTES)


def transition_fields(layout: AgentLayout, extras: dict[str, str] | None = None) -> list[ArraySpec]:
    """The columns of one agent's rows, without the leading capacity dimension."""
    fields: list[ArraySpec] = []
    for prefix in ("obs", "next_obs"):
        for leaf in layout.obs_leaves:
            name = prefix if not layout.nested_obs else f"{prefix}/{leaf.name}"
            fields.append(ArraySpec(name, leaf.shape, leaf.dtype.str))
    fields.append(ArraySpec("action", layout.action_leaf.shape, layout.action_leaf.dtype.str))
    fields += [ArraySpec("reward", (), "<f4"), ArraySpec("terminated", (), "|b1"),
               ArraySpec("truncated", (), "|b1")]
    if layout.mask_shape is not None:
        fields += [ArraySpec("action_mask", layout.mask_shape, "|b1"),
                   ArraySpec("next_action_mask", layout.mask_shape, "|b1")]
    for name, dtype in {**DEFAULT_EXTRAS, **(extras or {})}.items():
        if any(f.name == name for f in fields):
            raise ConfigError(f"extra field {name!r} clashes with a transition field of agent {layout.agent!r}")
        base, shape = extra_dtype(dtype)
        fields.append(ArraySpec(name, shape, base.str))
    return fields


def extra_dtype(text: str) -> tuple[np.dtype, tuple[int, ...]]:
    """An extra's declared type: a numpy dtype name ('float32', one number per row) or one with a shape
    ('float32[64]', a vector per row, such as a recurrent policy's memory)."""
    base, _, dims = text.partition("[")
    shape = tuple(int(d) for d in dims.rstrip("]").split(",") if d.strip()) if dims else ()
    return np.dtype(base), shape


def _segment_specs(fields: list[ArraySpec], capacity: int, frames: int = 0) -> list[ArraySpec]:
    """The segment's arrays. With `frames` (observations stored once), `obs`/`next_obs` columns become two
    reference columns plus a ring of `frames` observations with its own sequence words."""
    specs = [ArraySpec("header", (8,), "int64"), ArraySpec("seq", (capacity,), "int64")]
    if not frames:
        return specs + [ArraySpec(f.name, (capacity, *f.shape), f.dtype) for f in fields]
    specs += [ArraySpec(f.name, (capacity, *f.shape), f.dtype) for f in fields if not _is_obs(f.name)]
    specs += [ArraySpec("obs_ref", (capacity,), "int64"), ArraySpec("next_obs_ref", (capacity,), "int64"),
              ArraySpec("frame_seq", (frames,), "int64")]
    return specs + [ArraySpec("frame:" + f.name, (frames, *f.shape), f.dtype) for f in fields
                    if f.name == "obs" or f.name.startswith("obs/")]


class SharedRingBuffer:
    """One agent's transitions in shared memory: a single writer (the actor), one reader (its learner)."""

    def __init__(
        self, segment: Segment, fields: list[ArraySpec], capacity: int, obs_paths: dict[str, tuple] | None = None,
        frames: int = 0,
    ) -> None:
        self._segment = segment
        #: The transition's columns as readers get them (`obs` and `next_obs` included whatever the storage).
        self.fields = fields
        self.capacity = capacity
        #: For nested observations, the path of each leaf inside the observation, keyed by field name.
        self.obs_paths = obs_paths or {}
        #: Observation frames (observations stored once), or 0 (`obs` and `next_obs` stored in every row).
        self.frames = frames
        views = carve(segment.view, _segment_specs(fields, capacity, frames))
        self._words = segment.view[:64].cast("q")
        self._seq = views.pop("seq")
        views.pop("header")
        #: Frame columns by observation field name ("obs", "obs/<leaf>"), their sequence words, and (writer
        #: only) the frames written and each track's newest `next_obs` frame.
        self._frame_columns = {name[len("frame:"):]: views.pop(name) for name in list(views)
                               if name.startswith("frame:")}
        self._frame_seq: np.ndarray | None = views.pop("frame_seq", None)
        self._frames_written = 0
        self._track_tail: dict[Any, int] = {}
        #: (writer only) per track, its newest `next_obs` frame and the observation object stored there, as
        #: `write_batch` chained it (`_chained_refs`).
        self._tail_object: dict[Any, tuple[int, Any]] = {}
        #: Whether `write_batch` may chain frames by identity (`_chained_refs`); False: always by value, the
        #: reference it is tested against (tests/test_buffer.py).
        self.chain_by_identity = True
        self._columns: dict[str, np.ndarray] = views
        self._extra_names = [f.name for f in fields[self._first_extra():]]
        self._has_mask = "action_mask" in views
        self._written = self._words[_WRITTEN]  # writer-local copy
        self._cursor = self._words[_CURSOR]  # reader-local copy

    def _first_extra(self) -> int:
        names = [f.name for f in self.fields]
        last_core = max(names.index(n) for n in ("truncated", "next_action_mask") if n in names)
        return last_core + 1

    # ----------------------------------------------------------------------------------------- creation
    @staticmethod
    def nbytes_for(layout: AgentLayout, capacity: int, extras: dict[str, str] | None = None, *,
                   obs_storage: str = "twice", tracks: int = 1) -> int:
        """Shared memory a buffer of `capacity` transitions needs, checked before anything is allocated."""
        frames = frame_capacity(capacity, tracks) if stores_once(layout, obs_storage) else 0
        return packed_size(_segment_specs(transition_fields(layout, extras), capacity, frames))

    @classmethod
    def create(
        cls,
        layout: AgentLayout,
        capacity: int,
        extras: dict[str, str] | None = None,
        *,
        run_id: str | None = None,
        label: str | None = None,
        obs_storage: str = "twice",
        tracks: int = 1,
    ) -> SharedRingBuffer:
        """Allocate the buffer for one agent, refusing (with both numbers) if /dev/shm is too small.
        `obs_storage` "once" (or "auto" for observations of at least 512 bytes) stores each observation once;
        `tracks` is how many trajectories interleave in it (RunPlan.tracks)."""
        if not isinstance(capacity, (int, np.integer)) or capacity < 2:
            raise ConfigError(f"buffer capacity for agent {layout.agent!r} must be an integer >= 2, got {capacity!r}")
        paths = {f"obs/{leaf.name}": leaf.path for leaf in layout.obs_leaves} if layout.nested_obs else {}
        frames = frame_capacity(int(capacity), tracks) if stores_once(layout, obs_storage) else 0
        return cls.create_like(transition_fields(layout, extras), int(capacity), paths, run_id=run_id,
                               label=label or f"buf-{_safe(layout.agent)}", what=f"agent {layout.agent!r}",
                               frames=frames)

    @classmethod
    def create_like(cls, fields: list[ArraySpec], capacity: int, obs_paths: dict[str, tuple] | None = None, *,
                    run_id: str | None = None, label: str = "buf", what: str = "a learner",
                    frames: int = 0) -> SharedRingBuffer:
        """An empty buffer with the given columns, e.g. a learner's local copy of the actor's buffer on another
        node (backends/ray/host.py), filled with `write_rows`."""
        ordering.check_word_size(f"the replay buffer of {what}")
        nbytes = packed_size(_segment_specs(fields, int(capacity), frames))
        check_fits(f"the replay buffer of {what} ({capacity:,} transitions)", nbytes)
        segment = Segment.create(run_id or new_run_id(), label, nbytes)
        buffer = cls(segment, fields, int(capacity), obs_paths or {}, frames)
        for column in [*buffer._columns.values(), *buffer._frame_columns.values()]:
            column.view(np.uint8).fill(SENTINEL_BYTE)
        buffer._words[_CAPACITY] = int(capacity)
        return buffer

    def __reduce__(self) -> tuple:
        return (_attach_buffer, (self._segment.name, self.fields, self.capacity, self.obs_paths, self.frames))

    @property
    def name(self) -> str:
        return self._segment.name

    @property
    def nbytes(self) -> int:
        return self._segment.size

    @property
    def row_nbytes(self) -> int:
        """Bytes of one row as `read_new` returns it (every column, observations twice)."""
        return sum(f.nbytes for f in self.fields)

    # ----------------------------------------------------------------------------------------- counters
    @property
    def written(self) -> int:
        """Transitions written since creation (the actor's count)."""
        return self._words[_WRITTEN]

    @property
    def read_cursor(self) -> int:
        """Logical index of the next transition the in-order reader will return."""
        return self._words[_CURSOR]

    @property
    def dropped(self) -> int:
        """Transitions overwritten before the in-order reader reached them."""
        return self._words[_DROPPED]

    @property
    def unread(self) -> int:
        """Transitions written but not yet consumed by the in-order reader (bounded by capacity)."""
        return self._words[_WRITTEN] - self._words[_CURSOR]

    # ----------------------------------------------------------------------------------------- writer
    def write(self, t: Transition) -> int:
        """Append one transition (actor only) and return its logical index."""
        n = self._written
        row = n % self.capacity
        cols = self._columns
        if self.frames:
            track = t.extras.get("track", t.agent)
            refs = self._store_observations(track, self._leaves(t.obs), self._leaves(t.next_obs),
                                            t.terminated or t.truncated)
            self._remember_tails([t], [track])
        self._seq[row] = 2 * n + 1
        ordering.full_fence()  # the odd word before any of the row
        if self.frames:
            cols["obs_ref"][row], cols["next_obs_ref"][row] = refs
        elif self.obs_paths:
            for name, path in self.obs_paths.items():
                cols[name][row] = leaf_value(t.obs, path)
                cols["next_" + name][row] = leaf_value(t.next_obs, path)
        else:
            cols["obs"][row] = t.obs
            cols["next_obs"][row] = t.next_obs
        cols["action"][row] = t.action
        cols["reward"][row] = t.reward
        cols["terminated"][row] = t.terminated
        cols["truncated"][row] = t.truncated
        if self._has_mask:
            cols["action_mask"][row] = t.action_mask
            cols["next_action_mask"][row] = t.next_action_mask
        extras = t.extras
        for name in self._extra_names:
            cols[name][row] = extras.get(name, 0)
        ordering.full_fence()  # all of the row before the even word
        self._seq[row] = 2 * n + 2
        self._written = n + 1
        self._words[_WRITTEN] = n + 1
        return n

    def _leaves(self, obs: Any) -> dict[str, Any]:
        """An observation as frame values by field name ("obs", or "obs/<leaf>" for nested ones)."""
        if self.obs_paths:
            return {name: leaf_value(obs, path) for name, path in self.obs_paths.items()}
        return {"obs": obs}

    def _store_frame(self, leaves: dict[str, Any]) -> int:
        f, frame_seq = self._frames_written, self._frame_seq
        assert frame_seq is not None, "frames are stored only by a buffer that has them"
        slot = f % self.frames
        frame_seq[slot] = 2 * f + 1
        ordering.full_fence()
        for name, column in self._frame_columns.items():
            column[slot] = leaves[name]
        ordering.full_fence()
        frame_seq[slot] = 2 * f + 2
        self._frames_written = f + 1
        return f

    def _store_observations(self, track: Any, obs: dict[str, Any], next_obs: dict[str, Any],
                            ended: bool) -> tuple[int, int]:
        """Frame references (obs, next_obs) of a transition being written. `obs` shares the frame its track's
        previous transition stored as `next_obs` when that frame is recent and holds the same values (it does
        unless the previous transition ended its episode); otherwise it gets a frame of its own."""
        shared = self._track_tail.pop(track, None)
        window = 2 * len(self._track_tail) + self.capacity // 64 + 2
        if shared is not None and self._frames_written - shared <= window and all(
                np.array_equal(column[shared % self.frames], obs[name])
                for name, column in self._frame_columns.items()):
            obs_ref = shared
        else:
            obs_ref = self._store_frame(obs)
        next_ref = self._store_frame(next_obs)
        if not ended:
            self._track_tail[track] = next_ref
        return obs_ref, next_ref

    def write_batch(self, transitions: Sequence[Transition]) -> int:
        """Append transitions in order (actor only), as `write` would one by one, in one pass: each column written
        by one numpy assignment, observations stored once framed together (`_frame_refs`), one sequence-word
        phase for all the rows. What the actor writes after each round. Returns how many were appended.

        With observations stored once, a row whose `obs` is the very array its track's previous row had as
        `next_obs` (as the steppers write them) shares that frame without its values being compared
        (`_chained_refs`): arrays given here must not change afterwards (the steppers' are private copies)."""
        n = len(transitions)
        if n <= 1:
            for t in transitions:
                self.write(t)
            return n
        if self.frames and self.chain_by_identity and not self.obs_paths and 2 * n < self.frames // 2:
            chained = self._chained_refs(transitions)
            if chained is not None:
                return self._write_chained(transitions, *chained)
        batch: dict[str, Any] = {}
        for prefix, which in (("obs", "obs"), ("next_obs", "next_obs")):
            if self.obs_paths:
                for name, path in self.obs_paths.items():
                    batch[prefix + name[len("obs"):]] = np.stack([leaf_value(getattr(t, which), path)
                                                                  for t in transitions])
            else:
                batch[prefix] = np.stack([getattr(t, which) for t in transitions])
        batch.update(self._row_fields(transitions))
        tracks = [t.extras.get("track", t.agent) for t in transitions]
        written = self._write_columns(batch, n, tracks)
        if self.frames:
            self._remember_tails(transitions, tracks)
        return written

    def _remember_tails(self, transitions: Sequence[Transition], tracks: list[Any]) -> None:
        """After rows written from transitions: each track's newest `next_obs` array beside the frame that holds
        it, for `_chained_refs` (a track whose last row ended its episode has none)."""
        for track, t in dict(zip(tracks, transitions)).items():
            frame = self._track_tail.get(track)
            if frame is None:
                self._tail_object.pop(track, None)
            else:
                self._tail_object[track] = (frame, t.next_obs)

    def _row_fields(self, transitions: Sequence[Transition]) -> dict[str, np.ndarray]:
        """The transitions' columns other than observations: action, reward, ends, masks, extras."""
        n = len(transitions)
        fields = {"action": np.asarray([t.action for t in transitions]),
                  "reward": np.fromiter((t.reward for t in transitions), np.float32, n),
                  "terminated": np.fromiter((t.terminated for t in transitions), bool, n),
                  "truncated": np.fromiter((t.truncated for t in transitions), bool, n)}
        if self._has_mask:
            fields["action_mask"] = stack_masks([t.action_mask for t in transitions])
            fields["next_action_mask"] = stack_masks([t.next_action_mask for t in transitions])
        for name in self._extra_names:
            fields[name] = np.asarray([t.extras.get(name, 0) for t in transitions])
        return fields

    def _chained_refs(self, transitions: Sequence[Transition]) -> tuple[list[Any], list[Any], list[int], list[int]] \
            | None:
        """Frames for a batch whose observations chain by identity, as the steppers write them (a decision's
        observation completes one transition as `next_obs` and opens the next as `obs`: the same array): each row
        whose `obs` is the very array its track's previous row (in this batch, or the newest written before, if
        recent) had as `next_obs` shares that frame, and a row whose track starts afresh (a new episode, or no row
        before) gets a frame for its `obs`; every `next_obs` gets a frame. The same references `_frame_refs` finds
        by comparing values, without reading them twice. Returns (tracks, the new frames' arrays in order, obs
        references, next_obs references), or None where a row is neither (then values are compared)."""
        tails, tail_frames, written = self._tail_object, self._track_tail, self._frames_written
        n = len(transitions)
        window = 2 * len(tail_frames) + self.capacity // 64 + 2  # which frames before `_frame_refs` shares
        tracks: list[Any] = []
        frames: list[Any] = []
        obs_refs: list[int] = []
        next_refs: list[int] = []
        chain: dict[Any, tuple[int, Any] | None] = {}  # per track, its newest frame and array in this batch
        number = written
        for t in transitions:
            track = t.extras.get("track", t.agent)
            tracks.append(track)
            if track in chain:
                before = chain[track]
            else:
                frame = tail_frames.get(track)
                tail = tails.get(track)
                if frame is None:
                    before = None
                elif tail is None or tail[0] != frame or written - frame > window or written + 2 * n - frame >= \
                        self.frames:
                    return None
                else:
                    before = tail
            if before is None:  # the track starts afresh: its obs gets a frame
                obs_refs.append(number)
                frames.append(t.obs)
                number += 1
            elif t.obs is before[1]:
                obs_refs.append(before[0])
            else:
                return None
            next_refs.append(number)
            frames.append(t.next_obs)
            chain[track] = None if t.terminated or t.truncated else (number, t.next_obs)
            number += 1
        return tracks, frames, obs_refs, next_refs

    def _write_chained(self, transitions: Sequence[Transition], tracks: list[Any], frames: list[Any],
                       obs_refs: list[int], next_refs: list[int]) -> int:
        """`write_batch` with the frames `_chained_refs` chose: the new frames stacked straight into the frame
        ring (one copy of each observation), then the rows, each phase under its sequence words."""
        n, frames_before, total = len(transitions), self._frames_written, len(frames)
        frame_seq = self._frame_seq
        assert frame_seq is not None, "frames are stored only by a buffer that has them"
        numbers = frames_before + np.arange(total)
        slots = numbers % self.frames
        frame_seq[slots] = 2 * numbers + 1
        ordering.full_fence()
        column = self._frame_columns["obs"]
        first = frames_before % self.frames
        fits = min(total, self.frames - first)  # the ring's end: the rest goes to its start
        np.stack(frames[:fits], out=column[first:first + fits])
        if fits < total:
            np.stack(frames[fits:], out=column[:total - fits])
        ordering.full_fence()
        frame_seq[slots] = 2 * numbers + 2
        self._frames_written = frames_before + total
        for track, i in {track: i for i, track in enumerate(tracks)}.items():
            t = transitions[i]
            if t.terminated or t.truncated:
                self._track_tail.pop(track, None)
            else:
                self._track_tail[track] = next_refs[i]
        self._remember_tails(transitions, tracks)
        batch: dict[str, Any] = {"obs_ref": np.asarray(obs_refs, np.int64),
                                 "next_obs_ref": np.asarray(next_refs, np.int64)}
        batch.update(self._row_fields(transitions))
        return self._write_row_columns(batch, n)

    def write_rows(self, batch: dict[str, np.ndarray], follows: np.ndarray | None = None) -> int:
        """Append rows given column by column (what `read_new` returns), in order; returns how many were
        appended. Rows beyond the capacity overwrite earlier ones of the same call, which then count as
        written and, for the in-order reader, dropped. The same seqlock as `write` guards every row.

        `follows[i]`, where given, says row i's `obs` is by construction its track's previous row's `next_obs`
        (the actor's parallel path in columns knows it): with observations stored once, such a row shares that
        frame without its values being compared. Rows not marked are compared, as they all are without it."""
        n = len(batch["reward"])
        if n == 0:
            return 0
        tracks = batch.get("track", batch.get("member", np.zeros(n, np.int64)))
        return self._write_columns(batch, n, [int(track) for track in tracks], follows)

    def _write_columns(self, batch: dict[str, Any], n: int, tracks: list[Any],
                       follows: np.ndarray | None = None) -> int:
        """`write_rows`' and `write_batch`'s rows, column by column; `tracks` (each row's trajectory) decide which
        observation frames rows share where observations are stored once."""
        if self.frames:
            if 2 * n >= self.frames // 2:  # more frames than the ring keeps safely at once: row by row
                return self._write_rows_framed_one_by_one(batch, n, tracks)
            ended = np.asarray(batch["terminated"]) | np.asarray(batch["truncated"])
            obs_ref, next_ref = self._frame_refs(batch, tracks, ended, follows)
            batch = {**batch, "obs_ref": obs_ref, "next_obs_ref": next_ref}
        return self._write_row_columns(batch, n)

    def _write_row_columns(self, batch: dict[str, Any], n: int) -> int:
        """The rows' own columns (frame references where observations are stored once), under their sequence
        words; rows beyond the capacity overwrite earlier ones of the same call."""
        start, skip = self._written, max(0, n - self.capacity)
        logical = np.arange(start + skip, start + n)
        rows = logical % self.capacity
        self._seq[rows] = 2 * logical + 1
        ordering.full_fence()
        for name, column in self._columns.items():
            column[rows] = batch[name][skip:]
        ordering.full_fence()
        self._seq[rows] = 2 * logical + 2
        self._written = start + n
        self._words[_WRITTEN] = start + n
        return n

    def _frame_refs(self, batch: dict[str, Any], tracks: list[Any], ended: np.ndarray,
                    follows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Frame references (obs, next_obs) of rows written together, chosen as `_store_observations` chooses them
        row by row: each row's `next_obs` gets a new frame; its `obs` shares the frame its track's previous row
        (in this batch, or the last one written before) stored as `next_obs` where that frame is recent and holds
        the same values, else gets a frame of its own. The new frames are written in one phase."""
        n, frames_before = len(tracks), self._frames_written
        window = 2 * len(self._track_tail) + self.capacity // 64 + 2
        names = list(self._frame_columns)
        previous = np.full(n, -1, np.int64)   # the row of the same track earlier in this batch
        shared = np.full(n, -1, np.int64)     # else the track's frame from before this batch
        last: dict[Any, int] = {}
        for i, track in enumerate(tracks):
            j = last.get(track)
            if j is not None:
                previous[i] = j if not ended[j] else -1
            else:
                shared[i] = self._track_tail.pop(track, -1)
            last[track] = i
        same = np.zeros(n, bool)
        inside = np.flatnonzero(previous >= 0)
        compare = inside if follows is None else inside[~follows[inside]]
        if follows is not None:
            same[inside[follows[inside]]] = True
        if compare.size:
            same[compare] = np.logical_and.reduce([
                (batch[name][compare] == batch["next_" + name][previous[compare]]).reshape(compare.size, -1).all(axis=1)
                for name in names])
        # A frame from before is shared only if recent, and safe from this batch's own frames (2n at most).
        before = np.flatnonzero((shared >= 0) & (frames_before - shared <= window)
                                & (frames_before + 2 * n - shared < self.frames))
        if follows is not None and before.size:
            same[before[follows[before]]] = True
            before_compared = before[~follows[before]]
        else:
            before_compared = before
        if before_compared.size:
            slots = shared[before_compared] % self.frames
            same[before_compared] = np.logical_and.reduce([
                (self._frame_columns[name][slots] == batch[name][before_compared]).reshape(before_compared.size, -1)
                .all(axis=1) for name in names])
        new_obs = ~same
        counts = new_obs.astype(np.int64) + 1
        first = frames_before + np.cumsum(counts) - counts   # each row's first new frame
        next_ref = first + new_obs
        obs_ref = np.where(new_obs, first, 0)
        obs_ref[inside[same[inside]]] = next_ref[previous[inside[same[inside]]]]
        obs_ref[before[same[before]]] = shared[before[same[before]]]
        total = int(counts.sum())
        numbers = frames_before + np.arange(total)
        slots = numbers % self.frames
        frame_seq = self._frame_seq
        assert frame_seq is not None, "frames are stored only by a buffer that has them"
        frame_seq[slots] = 2 * numbers + 1
        ordering.full_fence()
        for name, column in self._frame_columns.items():
            column[obs_ref[new_obs] % self.frames] = batch[name][new_obs]
            column[next_ref % self.frames] = batch["next_" + name]
        ordering.full_fence()
        frame_seq[slots] = 2 * numbers + 2
        self._frames_written = frames_before + total
        for track, i in last.items():
            if not ended[i]:
                self._track_tail[track] = int(next_ref[i])
        return obs_ref, next_ref

    def _write_rows_framed_one_by_one(self, batch: dict[str, np.ndarray], n: int, tracks: list[Any]) -> int:
        """`write_rows` for a buffer that stores observations once, row by row (a batch too large for the frame
        ring to take at once)."""
        ended = np.asarray(batch["terminated"]) | np.asarray(batch["truncated"])
        row_columns = [name for name in self._columns if name not in ("obs_ref", "next_obs_ref")]
        for i in range(n):
            refs = self._store_observations(
                tracks[i], {name: batch[name][i] for name in self._frame_columns},
                {name: batch["next_" + name][i] for name in self._frame_columns}, bool(ended[i]))
            logical = self._written
            row = logical % self.capacity
            self._seq[row] = 2 * logical + 1
            ordering.full_fence()
            self._columns["obs_ref"][row], self._columns["next_obs_ref"][row] = refs
            for name in row_columns:
                self._columns[name][row] = batch[name][i]
            ordering.full_fence()
            self._seq[row] = 2 * logical + 2
            self._written = logical + 1
            self._words[_WRITTEN] = logical + 1
        return n

    # ----------------------------------------------------------------------------------------- readers
    def _gather(self, rows: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Sequence words before, the rows' columns, and the words after, with one fence on either side of
        the whole batch's copy. With observations stored once, the frames' words are read after the rows
        (which hold the frames' references), the frames are copied between two more fences, and a row whose
        frames changed reads as torn (its `after` word is -1)."""
        before = self._seq[rows]
        ordering.full_fence()  # the words before any of the rows
        batch = {name: column[rows] for name, column in self._columns.items()}
        if not self.frames:
            ordering.full_fence()  # all of the rows before the words again
            return before, batch, self._seq[rows]
        frame_seq = self._frame_seq
        assert frame_seq is not None, "a buffer with frames has their sequence words"
        prefixes = ("obs", "next_obs")
        refs = {prefix: batch.pop(prefix + "_ref") for prefix in prefixes}
        slots = {prefix: refs[prefix] % self.frames for prefix in prefixes}
        seen = {prefix: frame_seq[slots[prefix]] for prefix in prefixes}
        ordering.full_fence()  # the frames' words before any of the frames
        for prefix in prefixes:
            for name, column in self._frame_columns.items():
                batch[prefix + name[len("obs"):]] = column[slots[prefix]]
        ordering.full_fence()  # all of the rows and frames before the words again
        intact = np.ones(rows.shape, dtype=bool)
        for prefix in prefixes:
            expected = 2 * refs[prefix] + 2
            intact &= (seen[prefix] == expected) & (frame_seq[slots[prefix]] == expected)
        after = self._seq[rows]
        after[~intact] = -1
        return before, batch, after

    def sample(self, batch_size: int, rng: np.random.Generator, max_attempts: int = 1000) -> dict[str, np.ndarray]:
        """`batch_size` complete transitions drawn uniformly (with replacement) from those written so far."""
        written = self._words[_WRITTEN]
        if written == 0:
            raise PzasyncError(f"buffer {self.name!r} is empty; wait until `written` > 0 before sampling")
        ordering.full_fence()  # the count before the rows' words (see read_new)
        logical = rng.integers(max(0, written - self.capacity), written, size=batch_size)
        before, batch, after = self._gather(logical % self.capacity)
        for _ in range(max_attempts):
            bad = np.flatnonzero((before != after) | ((before & 1) == 1) | (before == 0))
            if bad.size == 0:
                return batch
            written = self._words[_WRITTEN]
            # Redraw the torn rows from the newest half of the ring, which the writer reaches last.
            fresh = rng.integers(max(0, written - self.capacity // 2), written, size=bad.size) % self.capacity
            b2, part, a2 = self._gather(fresh)
            before[bad], after[bad] = b2, a2
            for name, values in part.items():
                batch[name][bad] = values
        raise PzasyncError(f"buffer {self.name!r}: could not sample untorn rows in {max_attempts} attempts")

    def gather_logical(self, logical: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The rows holding the given logical transitions (indices into everything written), for samplers
        that choose rows themselves (DQN's prioritized replay). Returns `(batch, valid)`: a row is valid only
        if it held exactly that transition, complete, before and after the copy; invalid rows (not written
        yet, being written, overwritten by a later lap) must not be used."""
        logical = np.asarray(logical, dtype=np.int64)
        before, batch, after = self._gather(logical % self.capacity)
        expected = 2 * logical + 2
        return batch, (before == expected) & (after == expected)

    def sample_windows(
        self, batch_size: int, window: int, rng: np.random.Generator, max_attempts: int = 1000
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`batch_size` start rows drawn uniformly (with replacement) like `sample`, each with the `window`
        logical rows that follow it (t+1..t+window), for multi-step targets.

        Returns `(batch, valid)`: every column shaped `(batch_size, window + 1, ...)` (position 0 is the start
        row) and a bool array `(batch_size, window + 1)`. A position is valid only if its row held exactly
        logical transition t+k, complete, before and after the copy (its sequence word was `2(t+k) + 2` both
        times): rows not yet written, being written, overwritten during the copy, or overwritten by a later
        lap are all invalid and their contents must not be used. Start rows are always valid (torn ones are
        re-drawn, as in `sample`).
        """
        written = self._words[_WRITTEN]
        if written == 0:
            raise PzasyncError(f"buffer {self.name!r} is empty; wait until `written` > 0 before sampling")
        ordering.full_fence()  # the count before the rows' words (see read_new)
        if not isinstance(window, (int, np.integer)) or window < 0 or window >= self.capacity:
            raise ConfigError(f"buffer {self.name!r}: window must be an integer in [0, {self.capacity - 1}] "
                              f"(capacity - 1), got {window!r}")
        offsets = np.arange(window + 1)
        starts = rng.integers(max(0, written - self.capacity), written, size=batch_size)
        logical = starts[:, None] + offsets
        before, batch, after = self._gather(logical % self.capacity)
        for _ in range(max_attempts):
            expected = 2 * logical + 2
            valid = (before == expected) & (after == expected)
            bad = np.flatnonzero(~valid[:, 0])
            if bad.size == 0:
                return batch, valid
            written = self._words[_WRITTEN]
            # Redraw windows whose start row was torn, from the newest half of the ring (as `sample` does).
            fresh = rng.integers(max(0, written - self.capacity // 2), written, size=bad.size)
            logical[bad] = fresh[:, None] + offsets
            b2, part, a2 = self._gather(logical[bad] % self.capacity)
            before[bad], after[bad] = b2, a2
            for name, values in part.items():
                batch[name][bad] = values
        raise PzasyncError(f"buffer {self.name!r}: could not sample untorn windows in {max_attempts} attempts")

    def read_new(self, max_rows: int | None = None) -> dict[str, np.ndarray] | None:
        """The next unread transitions in order (at most `max_rows`), or None if there are none.

        Transitions overwritten before they could be read are skipped and added to `dropped`.
        """
        written = self._words[_WRITTEN]
        cursor = self._cursor
        if written == cursor:
            return None
        ordering.full_fence()  # the count before the rows' words: all rows below it but the newest read complete
        start = max(cursor, written - self.capacity)
        end = written if max_rows is None else min(written, start + max_rows)
        logical = np.arange(start, end)
        before, batch, after = self._gather(logical % self.capacity)
        expected = 2 * logical + 2
        # A row whose word is older than its transition is counted in `written` but not complete here yet
        # (the writer's last word can become visible after its count): the range ends before it, for the next
        # call. Only the newest row can be so, and not on x86-64, which keeps the writer's stores in order.
        pending = np.flatnonzero(before < expected)
        if pending.size:
            n = int(pending[0])
            end = start + n
            logical, expected, before, after = logical[:n], expected[:n], before[:n], after[:n]
            batch = {name: values[:n] for name, values in batch.items()}
        # The writer overwrites rows in logical order, so torn rows are a prefix of the range; with
        # observations stored once, a row whose frame was overwritten can also sit further in.
        good = (before == expected) & (after == expected)
        kept = int(good.sum())
        self._cursor = end
        self._words[_DROPPED] = self._words[_DROPPED] + (start - cursor) + (len(logical) - kept)
        self._words[_CURSOR] = end
        if kept == 0:
            return None
        if kept < len(logical):
            batch = {name: values[good] for name, values in batch.items()}
        return batch

    # ----------------------------------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Detach this process from the buffer's memory."""
        self._columns = {}
        self._frame_columns = {}
        self._seq, self._frame_seq = DETACHED, None
        self._words.release()  # idempotent; a released view refuses every access
        self._segment.close()

    def unlink(self) -> None:
        """Remove the buffer's memory from the system (owner only)."""
        self._segment.unlink()


def _safe(agent: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in str(agent))[:40]


def _attach_buffer(name: str, fields: list[ArraySpec], capacity: int, obs_paths: dict,
                   frames: int = 0) -> SharedRingBuffer:
    return SharedRingBuffer(Segment.attach(name), fields, capacity, obs_paths, frames)
