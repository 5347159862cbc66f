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
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch

from pzasync.config.declare import option
from pzasync.core.spaces import AgentLayout
from pzasync.errors import ConfigError, UnsupportedSpaceError
from pzasync.learners.base import Policy
from pzasync.learners.options import LearnerOptions, Option
from pzasync.learners.players import _NoUpdates
from pzasync.players.boards import GAME_NAMES, ConnectFour, Game, TicTacToe, game_for
from pzasync.players.search import root_scores, solve_tictactoe
from pzasync.specs import import_object


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

    defaults: ClassVar[dict[str, Any]] = {}

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
        return OnePlyPolicy(cls._game(layout))


@dataclass(kw_only=True, eq=False)
class NegamaxOptions(LearnerOptions):
    """The `negamax` player's search depth."""

    depth: int = option(4, "Plies searched (alpha-beta).", Option(int, ge=1))


class NegamaxPlayer(_BoardPlayer):
    """`("negamax", {"depth": 4})`: depth-limited negamax with alpha-beta (connect four, tictactoe)."""

    Options = NegamaxOptions

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
        return NegamaxPolicy(cls._game(layout), cls.checked(layout.agent, config).depth)


class PerfectPlayer(_BoardPlayer):
    """`"perfect"`: tictactoe played perfectly (never loses), random among the best moves."""

    defaults: ClassVar[dict[str, Any]] = {}
    games = (TicTacToe,)

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
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


@dataclass(kw_only=True, eq=False)
class ScriptedOptions(LearnerOptions):
    """A user's player: a `module:callable` path, or the object itself."""

    player: Any = option(None, "The player: 'module:callable' naming a function fn(obs, mask) -> action or a "
                               "Policy subclass, or that object (required).", Option(optional=True))

    def check_together(self, agent: str, learner: str) -> None:
        if self.player is None:
            raise ConfigError(f"agent {agent!r}: ScriptedPlayer needs {{'player': 'module:callable'}}")
        obj = import_player(self.player, agent) if isinstance(self.player, str) else self.player
        if not is_player_object(obj):
            raise ConfigError(f"agent {agent!r}: player {self.player!r} is neither a function nor a Policy "
                              f"subclass")


class ScriptedPlayer(_NoUpdates):
    """A user's never-learning player, `("pzasync.learners.scripted:ScriptedPlayer", {"player": ...})`.

    `resolve_learner` builds this spec from a `module:callable` that is a function or a `Policy` subclass;
    `player` is that path (or the object itself when it cannot be imported by name).
    """

    Options = ScriptedOptions

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> Policy:
        player = cls.checked(layout.agent, config).player
        return player_policy(import_player(player, layout.agent) if isinstance(player, str) else player, layout)

