"""Connect four and tictactoe as pairs of Python-int bitboards (mover, opponent), with lines precomputed as
bitmasks, recognised from an agent's spaces (`game_for`). Observations follow PettingZoo's convention:
`(rows, cols, 2)` planes, plane 0 the pieces of the player to move, plane 1 the opponent's."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from pzasync.core.spaces import AgentLayout

WIN = 10_000  # a win found `p` plies from the root scores WIN - p; heuristics stay far below it


# ------------------------------------------------------------------------------------------ games
_H1 = 7  # connect four: bits per column (6 cells and a guard)
_C4_COLUMN = [((1 << 6) - 1) << (_H1 * c) for c in range(7)]
#: How many lines of four pass through each cell (rows from the bottom): the classic positional weight.
_C4_LINES_THROUGH = [[3, 4, 5, 7, 5, 4, 3], [4, 6, 8, 10, 8, 6, 4], [5, 8, 11, 13, 11, 8, 5],
                     [5, 8, 11, 13, 11, 8, 5], [4, 6, 8, 10, 8, 6, 4], [3, 4, 5, 7, 5, 4, 3]]


def _weight_masks(table: list[list[int]]) -> tuple[tuple[int, int], ...]:
    """(weight, bitboard of the cells with that weight) pairs, so a weighted piece count is a few popcounts."""
    masks: dict[int, int] = {}
    for h, row in enumerate(table):
        for c, w in enumerate(row):
            masks[w] = masks.get(w, 0) | (1 << (_H1 * c + h))
    return tuple(sorted(masks.items()))


class _BitBoard:
    """What both games share: turning the (H, W, 2) observation planes into (mover's bits, opponent's bits)."""

    CELL_BIT: np.ndarray  # obs cell (row, col) -> its bit

    @classmethod
    def from_obs(cls, obs: np.ndarray) -> tuple[int, int]:
        planes = np.asarray(obs) > 0.5
        return int(cls.CELL_BIT[planes[:, :, 0]].sum()), int(cls.CELL_BIT[planes[:, :, 1]].sum())


class ConnectFour(_BitBoard):
    """Connect four on bitboards: bit `7 * col + height` (height 0 = bottom, 6 = an always-empty guard)."""

    name = "connect_four"
    rows, cols, n_actions = 6, 7, 7
    H1 = _H1
    BOTTOM = sum(1 << (_H1 * c) for c in range(7))
    BOARD = BOTTOM * ((1 << 6) - 1)
    COLUMN = _C4_COLUMN
    TOP = [1 << (_H1 * c + 5) for c in range(7)]
    WEIGHTS = _weight_masks(_C4_LINES_THROUGH)
    ORDER = (3, 2, 4, 1, 5, 0, 6)  # centre first: better alpha-beta cut-offs
    #: obs cell (row, col) -> bit; obs row 0 is the top, row 5 the bottom
    CELL_BIT = np.array([[1 << (_H1 * c + 5 - r) for c in range(7)] for r in range(6)], dtype=object)

    @classmethod
    def move_bit(cls, me: int, opp: int, action: int) -> int:
        """The bit a move in column `action` fills (0 if the column is full)."""
        return ((me | opp) + (1 << (cls.H1 * action))) & cls.COLUMN[action]

    @classmethod
    def moves(cls, me: int, opp: int) -> list[tuple[int, int]]:
        """Legal (action, bit) pairs, centre first."""
        filled = me | opp
        return [(c, (filled + (1 << (cls.H1 * c))) & cls.COLUMN[c]) for c in cls.ORDER if not filled & cls.TOP[c]]

    @staticmethod
    def won(b: int) -> bool:
        for s in (1, 7, 6, 8):
            m = b & (b >> s)
            if m & (m >> (2 * s)):
                return True
        return False

    @classmethod
    def threats(cls, p: int, filled: int) -> int:
        """Empty cells that would complete a line of four for the player with pieces `p`."""
        r = (p << 1) & (p << 2) & (p << 3)
        for s in (7, 6, 8):
            a = (p << s) & (p << (2 * s))
            r |= a & (p << (3 * s))
            r |= a & (p >> s)
            a = (p >> s) & (p >> (2 * s))
            r |= a & (p << s)
            r |= a & (p >> (3 * s))
        return r & (cls.BOARD ^ (filled & cls.BOARD))

    @classmethod
    def playable(cls, filled: int) -> int:
        """The cells a move can fill now (the lowest empty cell of each column)."""
        return (filled + cls.BOTTOM) & cls.BOARD

    @classmethod
    def heuristic(cls, me: int, opp: int) -> int:
        """From the mover's side: 16 per empty cell that completes a four (threat), and per piece the number
        of lines of four through its cell. (Chosen by playing variants against each other: threat counts
        alone made depth 4 no stronger than depth 2.)"""
        filled = me | opp
        score = 16 * (cls.threats(me, filled).bit_count() - cls.threats(opp, filled).bit_count())
        for w, m in cls.WEIGHTS:
            score += w * ((me & m).bit_count() - (opp & m).bit_count())
        return score


def _lines(cells: list[list[int]], length: int) -> list[int]:
    rows, cols = len(cells), len(cells[0])
    out = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end_r, end_c = r + dr * (length - 1), c + dc * (length - 1)
                if 0 <= end_r < rows and 0 <= end_c < cols:
                    out.append(sum(cells[r + dr * k][c + dc * k] for k in range(length)))
    return out


class TicTacToe(_BitBoard):
    """Tictactoe on 9-bit boards: bit `a` is the cell action `a` marks, obs `[a // 3, a % 3]`."""

    name = "tictactoe"
    rows, cols, n_actions = 3, 3, 9
    FULL = (1 << 9) - 1
    LINES = _lines([[1 << (3 * r + c) for c in range(3)] for r in range(3)], 3)
    ORDER = (4, 0, 2, 6, 8, 1, 3, 5, 7)
    CELL_BIT = np.array([[1 << (3 * r + c) for c in range(3)] for r in range(3)], dtype=object)

    @classmethod
    def move_bit(cls, me: int, opp: int, action: int) -> int:
        bit = 1 << action
        return 0 if (me | opp) & bit else bit

    @classmethod
    def moves(cls, me: int, opp: int) -> list[tuple[int, int]]:
        filled = me | opp
        return [(a, 1 << a) for a in cls.ORDER if not filled >> a & 1]

    @classmethod
    def won(cls, b: int) -> bool:
        return any(b & m == m for m in cls.LINES)

    @classmethod
    def threats(cls, p: int, filled: int) -> int:
        r = 0
        for m in cls.LINES:
            if (p & m).bit_count() == 2:
                r |= m & ~p
        return r & ~filled & cls.FULL

    @staticmethod
    def playable(filled: int) -> int:
        return ~filled & TicTacToe.FULL

    @classmethod
    def heuristic(cls, me: int, opp: int) -> int:
        """Open lines weighted by how full they are, from the mover's side."""
        score = 0
        for m in cls.LINES:
            a, b = me & m, opp & m
            if not b:
                score += (0, 1, 4, 0)[a.bit_count()]
            elif not a:
                score -= (0, 1, 4, 0)[b.bit_count()]
        return score


Game = Any  # ConnectFour | TicTacToe (used as classes)
GAMES: dict[tuple[tuple[int, ...], int], Game] = {((6, 7, 2), 7): ConnectFour, ((3, 3, 2), 9): TicTacToe}
GAME_NAMES = {ConnectFour: "pettingzoo.classic.connect_four_v3", TicTacToe: "pettingzoo.classic.tictactoe_v3"}


def game_for(layout: AgentLayout) -> Game | None:
    """The board game an agent plays, recognised from its spaces (observation planes and action count)."""
    obs, act = layout.obs_space, layout.action_space
    if not (isinstance(obs, spaces.Box) and isinstance(act, spaces.Discrete) and int(act.start) == 0):
        return None
    return GAMES.get((tuple(obs.shape), int(act.n)))
