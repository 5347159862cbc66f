"""Users' own scripted players, given by `module:callable` like a user's: a plain function and Policy classes.

Each counts its decisions in `CALLS`, so a test can tell that the runtime really played it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from pzasync.learners import Policy

CALLS: Counter = Counter()


def centre_first(obs, mask):
    """Tictactoe: the centre if free, else the lowest-numbered legal cell."""
    CALLS["centre_first"] += 1
    assert obs.shape == (3, 3, 2) and mask.shape == (9,), "one observation and one mask, not a batch"
    return 4 if mask[4] else int(np.flatnonzero(mask)[0])


class LastLegalPolicy(Policy):
    """Built with the agent's layout (its __init__ takes one argument): the highest legal action."""

    def __init__(self, layout):
        super().__init__()
        self.n = layout.action_space.n

    def act(self, obs, mask, explore):
        CALLS["last_legal"] += 1
        rows = len(obs["obs"])
        if mask is None:
            return np.full(rows, self.n - 1, np.int64), {}
        return np.array([np.flatnonzero(m)[-1] for m in mask], np.int64), {}


class FirstLegalNoArgs(Policy):
    """Built with no arguments: the lowest legal action."""

    def act(self, obs, mask, explore):
        CALLS["first_legal"] += 1
        return mask.argmax(axis=1).astype(np.int64), {}


NOT_A_PLAYER = 42
