"""Search over the board engines: depth-limited negamax with alpha-beta (faster wins preferred), exact root
scores for random tie-breaking, and a memoised full-depth tictactoe solver."""

from __future__ import annotations

from functools import lru_cache

from pzasync.players.boards import WIN, Game, TicTacToe


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
