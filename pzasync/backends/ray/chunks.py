"""Transitions in chunks between nodes (docs/distributed.md, "Actors on other nodes"): what
`SharedRingBuffer.read_new` returns on an actor's node, packed so that each observation crosses once.

A row's `obs` is, in most rows, the `next_obs` of its track's previous row (the same agent's next turn), which
a buffer storing observations once keeps in one frame. `pack` sends such an `obs` as a reference to that earlier
row of the same chunk instead of its values; `unpack` rebuilds the rows exactly, ready for `write_rows`. The
first row of each track in a chunk, a row after an episode's end and a row whose observation differs are sent
whole. Nothing here needs Ray.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: `ray_chunk_rows="auto"`: a chunk holds at most this many bytes of rows. Measured (docs/distributed.md,
#: "Scaling model"): on 2 cores Ray's cost per call was some 0.8 ms, so 256 small rows a chunk spent 3.4 µs
#: a row in it and 16,384 rows 0.34 µs; a chunk of large rows costs its copies whatever its size.
AUTO_CHUNK_BYTES = 4 << 20
#: ... and at least this many rows: each track's first row in a chunk carries its observation whole, so chunks
#: of a few large rows would send most observations twice.
AUTO_CHUNK_MIN_ROWS = 64


def chunk_rows(setting: int | str, row_nbytes: int) -> int:
    """Rows a chunk carries at most: `setting` (`ray_chunk_rows`), or for "auto" what fits in AUTO_CHUNK_BYTES of
    rows of `row_nbytes` bytes, at least AUTO_CHUNK_MIN_ROWS."""
    if setting == "auto":
        return max(AUTO_CHUNK_MIN_ROWS, AUTO_CHUNK_BYTES // max(1, int(row_nbytes)))
    return int(setting)


def observation_fields(batch: dict[str, Any]) -> list[str]:
    """The observation columns (`obs`, or `obs/<leaf>` for nested observations) that have a `next_` column."""
    return [name for name in batch if (name == "obs" or name.startswith("obs/")) and "next_" + name in batch]


def pack(batch: dict[str, np.ndarray], once: bool = True) -> dict[str, Any]:
    """A chunk to send: the rows, with each repeated observation left out when `once` (see the module doc)."""
    if not once:
        return {"rows": batch}
    n = len(batch["reward"])
    tracks = batch.get("track", batch.get("member", np.zeros(n, np.int64)))
    ended = np.asarray(batch["terminated"]) | np.asarray(batch["truncated"])
    previous = np.full(n, -1, np.int64)
    last: dict[int, int] = {}
    for i, track in enumerate(tracks.tolist()):
        j = last.get(track)
        if j is not None and not ended[j]:
            previous[i] = j
        last[track] = i
    names = observation_fields(batch)
    same = np.zeros(n, bool)
    inside = np.flatnonzero(previous >= 0)
    if inside.size and names:
        same[inside] = np.logical_and.reduce([
            (batch[name][inside] == batch["next_" + name][previous[inside]]).reshape(inside.size, -1).all(axis=1)
            for name in names])
    rows = {name: values for name, values in batch.items() if name not in names}
    for name in names:
        rows[name] = batch[name][~same]
    return {"rows": rows, "obs_from": np.where(same, previous, -1).astype(np.int32)}


def unpack(chunk: dict[str, Any]) -> dict[str, np.ndarray]:
    """The rows of a packed chunk, every column whole (`pack`'s inverse)."""
    rows = dict(chunk["rows"])
    source = chunk.get("obs_from")
    if source is None:
        return rows
    same = source >= 0
    for name in [k[len("next_"):] for k in rows if k == "next_obs" or k.startswith("next_obs/")]:
        following = rows["next_" + name]
        full = np.empty_like(following)
        full[~same] = rows[name]
        full[same] = following[source[same]]
        rows[name] = full
    return rows


def rows_in(chunk: dict[str, Any]) -> int:
    """Transitions in a packed chunk."""
    return len(chunk["rows"]["reward"])


def nbytes(chunk: dict[str, Any]) -> int:
    """Bytes of a packed chunk's arrays (what crosses the network, before Ray's own framing)."""
    arrays = [*chunk["rows"].values(), *([chunk["obs_from"]] if "obs_from" in chunk else [])]
    return int(sum(np.asarray(a).nbytes for a in arrays))
