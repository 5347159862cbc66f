"""The AEC loop of one env copy as an object: it hands out pending decisions and takes actions back.

`EpisodeStepper` walks `env.agent_iter()` one live decision at a time. Dead agents' turns (stepped with None)
and the transitions they complete are handled inside `advance`; a live turn is handed to the caller as a
`PendingDecision`, and nothing about that turn is recorded until the caller either `step`s it with an action
or `cut`s the episode. That lets one loop (`collect.run_episodes`, the actor) interleave any number of copies,
each with its own assembler, reward ledger and conservation check, with exactly `rollout`'s semantics
(docs/transitions.md): an episode is never cut between an action and the turns that reveal its outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from pzasync.core.envset_env import episode_env
from pzasync.core.transitions import EpisodeSummary, LayoutBook, RewardLedger, Transition, TransitionAssembler
from pzasync.errors import RewardConservationError


class CopyStepper(Protocol):
    """One env copy stepped for the actor, the evaluator and `rollout`: `EpisodeStepper` (the AEC loop, one decision
    at a time), `ParallelStepper` (core/parallel_stepper.py: a parallel env, a cycle's decisions at once) or
    `ColumnStepper` (core/parallel_columns.py: the same in arrays, a cycle's decisions as one `CycleBlock`)."""

    copy: int
    env: Any
    in_episode: bool
    steps: int

    @property
    def episode_index(self) -> int: ...

    def reset(self, seed: int | None = None) -> None:
        """Start the next episode."""

    def next_decisions(self) -> list[Any]:
        """The decisions to answer next (none once the episode has ended): `PendingDecision`s, or a `CycleBlock`."""

    def answer(self, answered: Any) -> None:
        """Take the answers to every decision `next_decisions` gave: (decision, action, extras) each."""

    def cut(self) -> None:
        """End the episode here (docs/transitions.md, rule 5)."""

    def abandon(self) -> int:
        """Forget the episode in flight without completing anything."""


def episode_summary(assembler: TransitionAssembler, paid: dict[str, float] | None, cut: bool, copy: int,
                    env: Any) -> EpisodeSummary:
    """A copy's episode closed (every stepper's end of an episode): its summary, with the reward conservation
    checked against `paid` where given (its error naming the copy), the copy, and on an env set the env played."""
    try:
        summary = assembler.end_episode(paid, cut_by_actor=cut)
    except RewardConservationError as exc:
        raise RewardConservationError(f"env copy {copy}, {exc}") from None
    summary.copy = copy
    played = episode_env(env)
    if played is not None:
        summary.env, summary.env_args = played
    return summary


@dataclass(slots=True)
class PendingDecision:
    """A live agent's turn waiting for an action: what it observes (split into stored obs and mask)."""

    copy: int
    agent: str
    obs: Any
    mask: np.ndarray | None


class EpisodeStepper:
    """One env copy's episodes, stepped one decision at a time (module docstring).

    `emit(transition)` gets each completed transition and `on_episode(summary)` each finished or cut episode.
    The first `reset` gets `seed`, later ones none (docs/transitions.md, rule 8). `to_env(agent, action)` turns
    a stored action into what `env.step` takes.
    """

    def __init__(
        self,
        env: Any,
        emit: Callable[[Transition], None],
        *,
        copy: int = 0,
        seed: int | None = None,
        layouts: LayoutBook | None = None,
        check_rewards: bool = True,
        max_episode_steps: int | None = None,
        to_env: Callable[[str, Any], Any] | None = None,
        on_episode: Callable[[EpisodeSummary], None] | None = None,
    ) -> None:
        self.env = env
        self.copy = copy
        self.emit = emit
        self.on_episode = on_episode
        self.seed = seed
        self.layouts = layouts or LayoutBook(env)
        self.check_rewards = check_rewards
        self.max_episode_steps = max_episode_steps
        self.to_env = to_env
        self.assembler = TransitionAssembler(self.layouts)
        self.ledger = RewardLedger()
        self.in_episode = False
        #: Decisions taken in this copy (all episodes).
        self.steps = 0
        self._first_reset = True
        self._turns: Iterator[str] | None = None
        self._pending: tuple | None = None

    @property
    def episode_index(self) -> int:
        return self.assembler.episode_index

    def reset(self, seed: int | None = None) -> None:
        """Start the next episode; a `seed` given here seeds this reset whatever the first-reset rule (evaluation
        seeds every episode, so that an episode's play depends on its index, not on which copy played it)."""
        self.request_reset(seed)
        self.after_reset()

    def request_reset(self, seed: int | None = None) -> None:
        """`reset` up to the env's reset: for an env whose `reset` only queues the request (remote env copies
        send the resets of a round in one frame), which calls `after_reset` once its state has come back."""
        self.env.reset(seed=seed if seed is not None else self.seed if self._first_reset else None)
        self._first_reset = False

    def after_reset(self) -> None:
        """Complete a `request_reset`: the env's state after the reset is current."""
        self.assembler.start_episode()
        self.ledger.start(self.env)
        self._turns = iter(self.env.agent_iter())
        self._pending = None
        self.in_episode = True

    def advance(self) -> PendingDecision | None:
        """Play dead agents' turns until a live agent must act; None once the episode is over (it was then
        passed to `on_episode`, ended by the env or cut at `max_episode_steps`)."""
        if self._pending is not None:
            raise RuntimeError(f"env copy {self.copy}: advance() called with a decision still pending")
        env, assembler, last, turns = self.env, self.assembler, self.env.last, self._turns
        if turns is None:
            raise RuntimeError(f"env copy {self.copy}: advance() called before start()")
        for agent in turns:
            observation, reward, terminated, truncated, info = last()
            if terminated or truncated:
                done, _, _ = assembler.turn(agent, observation, reward, terminated, truncated, info)
                if done is not None:
                    self.emit(done)
                env.step(None)
                self.ledger.after_step(env)
                continue
            if self.max_episode_steps is not None and assembler.agent_steps >= self.max_episode_steps:
                self.cut()
                return None
            obs, mask = self.layouts.get(agent, info).split(observation, info)
            self._pending = (agent, reward, info, obs, mask)
            return PendingDecision(self.copy, agent, obs, mask)
        self._end(cut=False)
        return None

    def next_decisions(self) -> list[PendingDecision]:
        """The copy's next decisions, as every kind of copy stepper hands them out (`CopyStepper`): the next live
        decision of the episode (`advance`), or none when it ended."""
        decision = self.advance()
        return [] if decision is None else [decision]

    def answer(self, answered: list[tuple[PendingDecision, Any, dict]]) -> None:
        """Take the answer to the pending decision (`CopyStepper`: one answer here, a cycle's on the parallel
        path)."""
        (_, action, extras), = answered
        self.step(action, extras)

    def step(self, action: Any, extras: dict | None = None) -> None:
        """Take `action` at the pending decision: complete the agent's previous transition, record this one's
        start and step the env."""
        self.act(action, extras)
        self.ledger.after_step(self.env)

    def act(self, action: Any, extras: dict | None = None) -> None:
        """`step` up to the env's step, without reading what it paid: for an env whose `step` only queues the
        action (remote env copies send a round's steps in one frame), which calls `stepped` once its state has
        come back."""
        if self._pending is None:
            raise RuntimeError(f"env copy {self.copy}: step() called with no pending decision")
        agent, reward, info, obs, mask = self._pending
        self._pending = None
        done = self.assembler.completed(agent, reward, obs, mask)
        if done is not None:
            self.emit(done)
        self.assembler.decide(agent, obs, mask, action, extras)
        self.ledger.decided(agent)
        self.steps += 1
        self.env.step(action if self.to_env is None else self.to_env(agent, action))

    def stepped(self) -> None:
        """Complete an `act`: the env's state after the step is current."""
        self.ledger.after_step(self.env)

    def cut(self) -> None:
        """End the episode here (a budget, a stop request, `max_episode_steps`): every pending transition is
        completed as truncated (docs/transitions.md, rule 5). Does nothing between episodes."""
        if not self.in_episode:
            return
        self._pending = None
        for done in self.assembler.cut_episode(self.env, self.ledger.since_decision):
            self.emit(done)
        self._end(cut=True)

    def abandon(self) -> int:
        """Forget the episode in flight without completing anything: its env can no longer be observed (a
        remote server died), so its pending decisions are dropped, never completed with made-up data, and no
        summary is reported. Returns how many decisions were dropped; does nothing between episodes."""
        if not self.in_episode:
            return 0
        self._pending = None
        self._turns = None
        self.in_episode = False
        return len(self.assembler.abandon_episode())

    def _end(self, cut: bool) -> None:
        self.in_episode = False
        self._turns = None
        paid = self.ledger.paid if self.check_rewards else None
        summary = episode_summary(self.assembler, paid, cut, self.copy, self.env)
        if self.on_episode is not None:
            self.on_episode(summary)
