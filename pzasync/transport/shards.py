"""One learner unit's transitions from several actor processes: a buffer shard per (actor, unit).

With `RunConfig.actors` > 1 every actor writes its own `SharedRingBuffer` shard, so no buffer ever has two
writers (docs/shared-memory.md). The unit's learner reads them through one `ShardedBuffer`, a
`TransitionSource` (transport/protocols.py):

- `sample` / `sample_windows` draw from each shard in proportion to the rows it holds; a window never spans
  two shards (each shard is one actor's trajectories), so `capacity` is one shard's;
- `read_new` reads each shard in its own write order, taking the shards in turn; what a shard overwrote
  before it was read is counted in that shard's `dropped`, and `dropped` adds them up.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pzasync.errors import PzasyncError
from pzasync.transport.buffer import SharedRingBuffer


class ShardedBuffer:
    """A learner's view of its unit's shards, one per actor (shard k is written by actor k only)."""

    def __init__(self, shards: list[SharedRingBuffer]) -> None:
        if not shards:
            raise ValueError("ShardedBuffer needs at least one shard")
        self.shards = list(shards)
        #: Rows one shard holds (every shard is created with the same capacity).
        self.capacity = min(s.capacity for s in self.shards)
        self.fields = self.shards[0].fields
        self.obs_paths = self.shards[0].obs_paths
        self._next = 0  # the shard `read_new` tries first: the shards take turns

    @property
    def total_capacity(self) -> int:
        return sum(s.capacity for s in self.shards)

    @property
    def name(self) -> str:
        return f"{self.shards[0].name} (+{len(self.shards) - 1} shards)"

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.shards)

    @property
    def row_nbytes(self) -> int:
        """Bytes of one row as `read_new` returns it (the shards share one layout)."""
        return self.shards[0].row_nbytes

    @property
    def written(self) -> int:
        return sum(s.written for s in self.shards)

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self.shards)

    @property
    def unread(self) -> int:
        return sum(s.unread for s in self.shards)

    def shard(self, actor: int) -> SharedRingBuffer:
        """The shard actor `actor` writes."""
        return self.shards[actor]

    # ------------------------------------------------------------------------------------------ reading
    def _split(self, batch_size: int, rng: np.random.Generator) -> list[tuple[SharedRingBuffer, int]]:
        """How many of `batch_size` draws each shard serves: multinomial in the rows each holds."""
        held = np.array([min(s.written, s.capacity) for s in self.shards], np.float64)
        if held.sum() == 0:
            raise PzasyncError(f"buffer {self.name!r} is empty; wait until `written` > 0 before sampling")
        counts = rng.multinomial(batch_size, held / held.sum())
        return [(s, int(n)) for s, n in zip(self.shards, counts) if n > 0]

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """`batch_size` untorn rows, drawn uniformly among all rows the shards hold."""
        parts = [s.sample(n, rng) for s, n in self._split(batch_size, rng)]
        return _concat(parts)

    def sample_windows(self, batch_size: int, window: int, rng: np.random.Generator
                       ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """As `SharedRingBuffer.sample_windows`, each window inside one shard."""
        parts = [s.sample_windows(n, window, rng) for s, n in self._split(batch_size, rng)]
        return _concat([b for b, _ in parts]), np.concatenate([v for _, v in parts])

    def read_new(self, max_rows: int | None = None) -> dict[str, np.ndarray] | None:
        """The next unread transitions of one shard, in that shard's order; the shards take turns."""
        for i in range(len(self.shards)):
            k = (self._next + i) % len(self.shards)
            chunk = self.shards[k].read_new(max_rows)
            if chunk is not None:
                self._next = (k + 1) % len(self.shards)
                return chunk
        return None

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        for s in self.shards:
            s.close()

    def unlink(self) -> None:
        for s in self.shards:
            s.unlink()


def _concat(parts: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
