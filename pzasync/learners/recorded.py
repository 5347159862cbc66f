"""Recorded transitions kept beside a learner's buffer (`RunConfig.dataset`, `Learner.load_dataset`): the rows of a
dataset (core/dataset.py) held in the learner's process, and batches drawn from them alone (`bc`) or from them
and the buffer together (`dqn`).

Recorded rows carry `policy_version` 0: no policy of the run made them, and the driver leaves them out of its
policy-lag figures (published versions start at 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pzasync.errors import DatasetError
from pzasync.learners.base import Batch


class RecordedRows:
    """A learner's recorded transitions (what `load_dataset` was given), drawn from uniformly; each action is checked
    against its own mask (`start`: a Discrete space's first action, mask column j being action start + j)."""

    def __init__(self, agent: str, batch: Batch, start: int = 0) -> None:
        self.columns = {key: np.ascontiguousarray(value) for key, value in batch.items()}
        self.rows = len(self.columns["reward"])
        if "policy_version" not in self.columns:
            self.columns["policy_version"] = np.zeros(self.rows, np.int64)
        mask = self.columns.get("action_mask")
        if mask is not None and self.rows:
            action = self.columns["action"].astype(np.int64) - start
            n = mask.shape[1]
            ok = (action >= 0) & (action < n)
            legal = np.zeros(self.rows, bool)
            legal[ok] = mask[np.flatnonzero(ok), action[ok]]
            if not legal.all():
                first = int(np.flatnonzero(~legal)[0])
                raise DatasetError(f"agent {agent!r}: {int((~legal).sum())} recorded action(s) are illegal under "
                                   f"their own action masks (the first at row {first}, action "
                                   f"{int(action[first]) + start}); the dataset does not number this env's actions")

    def take(self, index: np.ndarray) -> Batch:
        """The rows at `index`."""
        return {key: value[index] for key, value in self.columns.items()}

    def draw(self, count: int, rng: np.random.Generator) -> Batch:
        """`count` rows drawn uniformly, with replacement."""
        return self.take(rng.integers(self.rows, size=count))


def mixed_sample(buffer: Any, recorded: RecordedRows, batch_size: int, rng: np.random.Generator) -> Batch:
    """`batch_size` rows drawn uniformly from the recorded rows and the buffer's rows together: the recorded share
    is binomial in proportion to the rows each holds (the buffer's: those written, at most its capacity). The
    batch has the buffer's columns; a column the recorded rows lack (a `track`, the extras) is zeros there."""
    held = min(int(buffer.written), int(buffer.capacity))
    share = recorded.rows / (recorded.rows + held) if recorded.rows + held else 0.0
    take = int(rng.binomial(batch_size, share)) if held else batch_size
    mine = recorded.draw(take, rng)
    if take == batch_size:
        return mine
    theirs = buffer.sample(batch_size - take, rng)
    out: Batch = {}
    for key, value in theirs.items():
        ours = mine.get(key)
        if ours is None:
            ours = np.zeros((take, *value.shape[1:]), value.dtype)
        out[key] = np.concatenate([value, ours.astype(value.dtype, copy=False)])
    return out
