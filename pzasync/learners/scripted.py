"""Scripted players: yardsticks that never learn, for PettingZoo's connect_four_v3 and tictactoe_v3.

A trained policy's win rate against random players says little on board games (an untrained network
already wins most games); these players give a fixed, meaningful bar:

  - `one_ply`: win now if possible, else block the opponent's immediate win, else a random legal move;
  - `negamax` (`depth`, default 4): depth-limited negamax with alpha-beta and a threat-count heuristic,
    faster wins preferred, ties broken at random with its own seeded RNG;
  - `perfect` (tictactoe only): full-depth memoised search, random among the best moves.

The game is recognised from the agent's spaces. Observations follow PettingZoo's convention (verified
against the envs by the tests): `(rows, cols, 2)` planes, plane 0 the pieces of the player to move,
plane 1 the opponent's. Connect four: 6x7, action = column, a piece falls to the highest-index empty row
(row 5 is the bottom). Tictactoe: 3x3, action `a` marks cell `[a // 3, a % 3]`.

Boards are pairs of Python-int bitboards (mover, opponent); lines are precomputed bitmasks, so a depth-4
connect four move takes a few milliseconds.

`ScriptedPlayer` wraps a user's own player, given as a `module:callable` learner spec: a function
`fn(obs, mask) -> action` of one observation, or a `Policy` subclass.
"""

from __future__ import annotations

import importlib
import inspect
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import torch
from gymnasium import spaces

from ..errors import ConfigError, UnsupportedSpaceError
from ..spaces import AgentLayout
from .base import Option, Policy
from .players import _NoUpdates

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


# ------------------------------------------------------------------------------------------ search
def negamax(game: Game, me: int, opp: int, depth: int, alpha: int, beta: int, ply: int) -> int:
    """Score of the position for the player to move (`me`), searched `depth` plies with alpha-beta."""
    filled = me | opp
    playable = game.playable(filled)
    if not playable:
        return 0  # board full: a draw
    if game.threats(me, filled) & playable:
        return WIN - ply - 1  # win on this move
    forced = game.threats(opp, filled) & playable
    if forced & (forced - 1):
        return -(WIN - ply - 2)  # two immediate threats: one of them wins next move
    if depth <= 0:
        return game.heuristic(me, opp)
    best = -WIN - 1
    for _action, bit in game.moves(me, opp):
        if forced and bit != forced:
            continue  # the only move that does not lose at once
        score = -negamax(game, opp, me | bit, depth - 1, -beta, -alpha, ply + 1)
        if score > best:
            best = score
            if score > alpha:
                alpha = score
                if alpha >= beta:
                    break
    return best


def root_scores(game: Game, me: int, opp: int, legal: list[int], depth: int) -> dict[int, int]:
    """Exact scores of the moves within one point of the best (others get upper bounds below it).

    Each root move is searched with the window (best - 1, inf), so every move that ties the best is scored
    exactly and ties can be broken at random.
    """
    scores: dict[int, int] = {}
    best = -WIN - 1
    for action in sorted(legal, key=game.ORDER.index):
        bit = game.move_bit(me, opp, action)
        if game.won(me | bit):
            score = WIN - 1
        else:
            score = -negamax(game, opp, me | bit, depth - 1, -WIN - 1, -(best - 1), 1)
        scores[action] = score
        best = max(best, score)
    return scores


@lru_cache(maxsize=None)
def solve_tictactoe(me: int, opp: int) -> int:
    """Exact value for the player to move: +/-(10 - plies to the end) for a win/loss, 0 for a draw."""
    best = -100
    for _action, bit in TicTacToe.moves(me, opp):
        if TicTacToe.won(me | bit):
            return 9
        score = -solve_tictactoe(opp, me | bit)
        best = max(best, score - 1 if score > 0 else score + 1 if score < 0 else 0)
    return 0 if best == -100 else best


# ------------------------------------------------------------------------------------------ policies
class BoardPolicy(Policy):
    """Base of the board players: decodes each row's planes and mask, and picks one move per row."""

    def __init__(self, game: Game) -> None:
        super().__init__()
        self.game = game
        self.rng = np.random.default_rng(torch.initial_seed())

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        boards = obs["obs"]
        out = np.empty(len(boards), np.int64)
        for i, board in enumerate(boards):
            me, opp = self.game.from_obs(board)
            if mask is not None and np.any(mask[i]):
                legal = [int(a) for a in np.flatnonzero(mask[i])]
            else:
                legal = sorted(a for a, _bit in self.game.moves(me, opp)) or list(range(self.game.n_actions))
            out[i] = self.choose(me, opp, legal)
        return out, {}

    def choose(self, me: int, opp: int, legal: list[int]) -> int:
        raise NotImplementedError

    def _pick(self, actions: list[int]) -> int:
        return int(actions[self.rng.integers(len(actions))])


class OnePlyPolicy(BoardPolicy):
    """Win now, else block the opponent's immediate win (one of them if several), else a random legal move."""

    def choose(self, me: int, opp: int, legal: list[int]) -> int:
        game = self.game
        bits = {a: game.move_bit(me, opp, a) for a in legal}
        wins = [a for a, bit in bits.items() if bit and game.won(me | bit)]
        if wins:
            return self._pick(wins)
        blocks = [a for a, bit in bits.items() if bit and game.won(opp | bit)]
        return self._pick(blocks or legal)


class NegamaxPolicy(BoardPolicy):
    """Depth-limited negamax with alpha-beta; a random move among the equally best."""

    def __init__(self, game: Game, depth: int) -> None:
        super().__init__(game)
        self.depth = depth

    def choose(self, me: int, opp: int, legal: list[int]) -> int:
        playable = [a for a in legal if self.game.move_bit(me, opp, a)] or legal
        scores = root_scores(self.game, me, opp, playable, self.depth)
        best = max(scores.values())
        return self._pick([a for a in playable if scores[a] == best])


class PerfectTicTacToePolicy(BoardPolicy):
    """Tictactoe solved exactly (memoised): a random move among those with the best value."""

    def __init__(self) -> None:
        super().__init__(TicTacToe)

    def choose(self, me: int, opp: int, legal: list[int]) -> int:
        scores = {}
        for a in legal:
            bit = TicTacToe.move_bit(me, opp, a)
            if not bit:
                scores[a] = -100
            elif TicTacToe.won(me | bit):
                scores[a] = 9
            else:
                score = -solve_tictactoe(opp, me | bit)
                scores[a] = score - 1 if score > 0 else score + 1 if score < 0 else 0
        best = max(scores.values())
        return self._pick([a for a in legal if scores[a] == best])


# ------------------------------------------------------------------------------------------ players
class _BoardPlayer(_NoUpdates):
    """A never-learning board player; `games` lists the games it plays."""

    games: tuple[Game, ...] = (ConnectFour, TicTacToe)

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        if game_for(layout) not in cls.games:
            supported = " and ".join(GAME_NAMES[g] for g in cls.games)
            raise UnsupportedSpaceError(
                f"agent {layout.agent!r}: the scripted player {cls.__name__} supports only {supported}; this "
                f"agent has observations {layout.obs_space!r} and actions {layout.action_space!r}"
            )

    @classmethod
    def _game(cls, layout: AgentLayout) -> Game:
        cls.check_spaces(layout)
        return game_for(layout)


class OnePlyPlayer(_BoardPlayer):
    """`"one_ply"`: win now, else block an immediate loss, else random (connect four, tictactoe)."""

    defaults: dict[str, Any] = {}

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> Policy:
        return OnePlyPolicy(cls._game(layout))


class NegamaxPlayer(_BoardPlayer):
    """`("negamax", {"depth": 4})`: depth-limited negamax with alpha-beta (connect four, tictactoe)."""

    defaults: dict[str, Any] = {"depth": 4}
    schema = {"depth": Option(int, ge=1)}

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> Policy:
        return NegamaxPolicy(cls._game(layout), int(config.get("depth", cls.defaults["depth"])))


class PerfectPlayer(_BoardPlayer):
    """`"perfect"`: tictactoe played perfectly (never loses), random among the best moves."""

    defaults: dict[str, Any] = {}
    games = (TicTacToe,)

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> Policy:
        cls._game(layout)
        return PerfectTicTacToePolicy()


# ------------------------------------------------------------------------------------------ user players
class FunctionPolicy(Policy):
    """A user's `fn(obs, mask) -> action` of one observation, applied row by row.

    `obs` is the agent's observation without the action mask (an array; for nested observations a dict of
    the `obs/<leaf>` arrays), `mask` its boolean action mask or None.
    """

    def __init__(self, fn: Callable[[Any, np.ndarray | None], Any]) -> None:
        super().__init__()
        self.fn = fn

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        n = len(next(iter(obs.values())))
        rows = [obs["obs"][i] if list(obs) == ["obs"] else {k: v[i] for k, v in obs.items()} for i in range(n)]
        return np.stack([np.asarray(self.fn(row, None if mask is None else mask[i])) for i, row in enumerate(rows)]), {}


def import_player(path: str, agent: str = "?") -> Any:
    """Import `module:attr` (or `module.attr`), with errors that name the agent."""
    from . import import_object

    return import_object(path, agent, "player")


def is_player_object(obj: Any) -> bool:
    """A plain function (any non-class callable) or a `Policy` subclass: what `ScriptedPlayer` wraps."""
    return (isinstance(obj, type) and issubclass(obj, Policy)) or (callable(obj) and not isinstance(obj, type))


def player_reference(obj: Any) -> Any:
    """`module:qualname` of an importable object (so run.json can name it and runs can resume), else obj."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    try:
        if module and name and getattr(importlib.import_module(module), name, None) is obj:
            return f"{module}:{name}"
    except Exception:  # noqa: BLE001 - not importable: keep the object itself
        pass
    return obj


def player_policy(obj: Any, layout: AgentLayout) -> Policy:
    """A user's player as a `Policy`: a Policy subclass is built with the layout if its __init__ takes an
    argument (else with none); a function is wrapped in `FunctionPolicy`."""
    if isinstance(obj, type):
        takes = [p for p in inspect.signature(obj).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return obj(layout) if takes else obj()
    return FunctionPolicy(obj)


class ScriptedPlayer(_NoUpdates):
    """A user's never-learning player, `("pzasync.learners.scripted:ScriptedPlayer", {"player": ...})`.

    `resolve_learner` builds this spec from a `module:callable` that is a function or a `Policy` subclass;
    `player` is that path (or the object itself when it cannot be imported by name).
    """

    defaults: dict[str, Any] = {"player": None}

    @classmethod
    def validate_config(cls, agent: str, config: dict[str, Any]) -> dict[str, Any]:
        config = super().validate_config(agent, config)
        player = config["player"]
        if player is None:
            raise ConfigError(f"agent {agent!r}: ScriptedPlayer needs {{'player': 'module:callable'}}")
        obj = import_player(player, agent) if isinstance(player, str) else player
        if not is_player_object(obj):
            raise ConfigError(f"agent {agent!r}: player {player!r} is neither a function nor a Policy subclass")
        return config

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> Policy:
        player = config["player"]
        return player_policy(import_player(player, layout.agent) if isinstance(player, str) else player, layout)

