"""Prioritized experience replay for DQN (Schaul et al., 2016, proportional variant), kept by the learner.

The actor writes transitions as always; the learner alone decides which rows to replay. Each row of its
buffer has a priority: a new row gets the largest priority seen so far (so it is replayed soon), a replayed
row gets `(|TD error| + EPSILON) ** ALPHA`. Rows are drawn with probability proportional to priority, and
each sampled row's loss is weighted by `(N * P(row)) ** -BETA`, normalised by the batch's largest weight,
which corrects the bias of drawing unevenly. Sampling is a cumulative sum over the buffer's rows (about
0.26 ms for 100,000 rows with 64 draws, against about 3 ms for an update); a sum tree would make it
O(log n) and is not built yet.

Priorities live in the learner's process, indexed by buffer row; the learner notices rows written since its
last draw through `buffer.written` and gives them the top priority, whatever transition they held before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Priority exponent (0: uniform replay), importance-sampling exponent, and the floor that keeps a row
#: with zero TD error drawable. The paper's values for the proportional variant.
ALPHA, BETA, EPSILON = 0.6, 0.4, 1e-3


class PrioritizedReplay:
    """Which rows of one `SharedRingBuffer` to replay next, and with what loss weights."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.capacity = int(buffer.capacity)
        self.priority = np.zeros(self.capacity, np.float64)
        self.top = 1.0
        #: Logical transitions written when rows last got their priority.
        self.seen = 0

    def _admit_new_rows(self, written: int) -> None:
        """Rows written since the last draw (new transitions, possibly over old ones) get the top priority."""
        start = max(self.seen, written - self.capacity)
        if written > start:
            rows = np.arange(start, written) % self.capacity
            self.priority[rows] = self.top
        self.seen = written

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A batch drawn by priority, with `weight` (importance-sampling loss weights) and `logical` (which
        transitions, for `update`)."""
        written = int(self.buffer.written)
        self._admit_new_rows(written)
        oldest = max(0, written - self.capacity)
        cumulative = np.cumsum(self.priority)
        total = cumulative[-1]
        rows = np.minimum(np.searchsorted(cumulative, rng.random(batch_size) * total, side="right"),
                          self.capacity - 1)
        # Row r holds the newest logical transition t < written with t % capacity == r.
        logical = written - 1 - ((written - 1 - rows) % self.capacity)
        batch, valid = self.buffer.gather_logical(logical)
        weight = (min(written - oldest, self.capacity) * self.priority[rows] / total) ** -BETA
        # A row the actor overwrote while it was copied is dropped (a batch may come out a row or two short).
        keep = np.flatnonzero(valid)
        batch = {name: values[keep] for name, values in batch.items()}
        weight = weight[keep]
        batch["weight"] = (weight / weight.max()).astype(np.float32) if len(keep) else weight.astype(np.float32)
        batch["logical"] = logical[keep]
        return batch

    def update(self, logical: np.ndarray, td_error: np.ndarray) -> None:
        """Set the replayed rows' priorities from their TD errors (rows overwritten since are left alone:
        they get the top priority as new rows)."""
        current = logical >= int(self.buffer.written) - self.capacity
        rows = logical[current] % self.capacity
        priority = (np.abs(td_error[current]) + EPSILON) ** ALPHA
        self.priority[rows] = priority
        if len(priority):
            self.top = max(self.top, float(priority.max()))
