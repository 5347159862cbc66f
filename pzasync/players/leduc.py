"""Leduc hold'em as PettingZoo's `leduc_holdem_v4` plays it (RLCard's rules), as pure functions over small states.

What the exploitability of a leduc policy is computed on (`pzasync.evaluation.exploitability`): every deal and
every betting line, with the observations and action masks the env would give (the tests replay the env's own
hands through these rules and compare every observation, mask and reward).

The rules (RLCard 1.2's `leducholdem` game):
  - a deck of two jacks, two queens and two kings; each player one private card, one public card after the
    first betting round;
  - a random seat posts the small blind (1 chip) and acts first; the other posts the big blind (2 chips);
  - two betting rounds, raises of 2 chips in the first and 4 in the second, at most 2 raises a round; a round
    ends when both players have acted since the last raise (`call` or `check`), the hand when one folds;
  - at showdown a player whose card pairs the public card wins, else the higher card, else the pot is split;
  - rewards are chips won divided by the big blind (2 chips), as the env reports them.

Actions are the env's indices: 0 call, 1 raise, 2 fold, 3 check. Ranks: 0 jack, 1 queen, 2 king.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

CALL, RAISE, FOLD, CHECK = 0, 1, 2, 3
ACTIONS = ("call", "raise", "fold", "check")
RANKS = ("J", "Q", "K")
SMALL_BLIND, BIG_BLIND = 1, 2
RAISE_SIZES = (2, 4)  # chips a raise adds in the first and the second round
MAX_RAISES = 2
OBS_SIZE = 36  # hand (3), public card (3), own chips 0..14 (15), opponent's chips 0..14 (15)


@dataclass(frozen=True, slots=True)
class Deal:
    """The chance part of a hand: each seat's card, the public card (dealt now, shown in round 2), who acts first."""

    hands: tuple[int, int]
    public: int
    first: int


@dataclass(frozen=True, slots=True)
class LeducState:
    """A hand in progress: the deal, the betting so far (`history`, action indices) and what it left."""

    deal: Deal
    history: tuple[int, ...] = ()
    chips: tuple[int, int] = (0, 0)
    raised: tuple[int, int] = (0, 0)  # chips put in this round
    round: int = 0  # 0, 1; 2 once the second round is over
    raises: int = 0  # raises this round
    unraised: int = 0  # players who acted since the last raise
    to_move: int = 0
    folded: int | None = None

    @property
    def terminal(self) -> bool:
        return self.folded is not None or self.round >= 2

    @property
    def public_shown(self) -> int | None:
        """The public card's rank once the second round has started, else None."""
        return self.deal.public if self.round >= 1 else None


def start(deal: Deal) -> LeducState:
    """The hand before anyone acts: blinds posted, the small blind to move."""
    chips = [0, 0]
    chips[deal.first], chips[1 - deal.first] = SMALL_BLIND, BIG_BLIND
    return LeducState(deal=deal, chips=(chips[0], chips[1]), raised=(chips[0], chips[1]), to_move=deal.first)


def deals() -> Iterator[tuple[Deal, float]]:
    """Every deal with its probability (ranks only: the two cards of a rank play alike)."""
    for first in (0, 1):
        for mine in range(3):
            for theirs in range(3):
                p_hands = (2 / 6) * ((2 - (theirs == mine)) / 5)
                for public in range(3):
                    left = 2 - (public == mine) - (public == theirs)
                    if left:
                        yield Deal((mine, theirs), public, first), 0.5 * p_hands * left / 4


def legal_actions(state: LeducState) -> tuple[int, ...]:
    """The mover's legal actions, in index order (fold is always legal; check only when nothing is owed)."""
    me = state.to_move
    owed = max(state.raised) - state.raised[me]
    actions = [CALL] if owed else []
    if state.raises < MAX_RAISES:
        actions.append(RAISE)
    actions.append(FOLD)
    if not owed:
        actions.append(CHECK)
    return tuple(actions)


def step(state: LeducState, action: int) -> LeducState:
    """The state after the mover plays `action` (which must be legal)."""
    me = state.to_move
    chips, raised = list(state.chips), list(state.raised)
    raises, unraised, folded = state.raises, state.unraised, state.folded
    if action == CALL:
        chips[me] += max(raised) - raised[me]
        raised[me] = max(raised)
        unraised += 1
    elif action == RAISE:
        top = max(raised) + RAISE_SIZES[state.round]
        chips[me] += top - raised[me]
        raised[me] = top
        raises, unraised = raises + 1, 1
    elif action == FOLD:
        folded = me
    elif action == CHECK:
        unraised += 1
    else:
        raise ValueError(f"leduc action {action!r}: not one of 0..3 ({', '.join(ACTIONS)})")
    after = replace(state, history=state.history + (action,), chips=(chips[0], chips[1]), raised=(raised[0], raised[1]),
                    raises=raises, unraised=unraised, to_move=1 - me, folded=folded)
    if folded is None and unraised >= 2:  # the round is over; the next one starts with whoever is to move
        after = replace(after, round=state.round + 1, raised=(0, 0), raises=0, unraised=0)
    return after


def payoffs(state: LeducState) -> tuple[float, float]:
    """Each seat's reward at the end of the hand, in big blinds (the env's units)."""
    if state.folded is not None:
        winners = [seat != state.folded for seat in (0, 1)]
    else:
        hands, public = state.deal.hands, state.deal.public
        paired = [hand == public for hand in hands]
        winners = paired if any(paired) else [hand == max(hands) for hand in hands]
    pot = sum(state.chips)
    share = pot / sum(winners)
    first, second = ((share * won - state.chips[seat]) / BIG_BLIND for seat, won in enumerate(winners))
    return first, second


def observation(state: LeducState, seat: int) -> np.ndarray:
    """What `seat` observes (the env's 36 floats): its card, the public card once shown, both players' chips."""
    obs = np.zeros(OBS_SIZE, np.float32)
    obs[state.deal.hands[seat]] = 1
    if state.public_shown is not None:
        obs[3 + state.public_shown] = 1
    obs[6 + state.chips[seat]] = 1
    obs[21 + state.chips[1 - seat]] = 1
    return obs


def action_mask(state: LeducState) -> np.ndarray:
    """The mover's legal actions as the env's int8 mask of 4."""
    mask = np.zeros(len(ACTIONS), np.int8)
    mask[list(legal_actions(state))] = 1
    return mask
