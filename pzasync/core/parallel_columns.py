"""The parallel path in columns: one parallel env copy stepped a cycle at a time, its decisions and transitions
as arrays per acting unit rather than one object per agent (docs/transitions.md, "The parallel path").

`ParallelStepper` (core/parallel_stepper.py) is the reference: it hands out a `PendingDecision` per live agent and
emits a `Transition` per completed step, which costs a few microseconds of Python per agent and step. On an env
of many agents, where a forward answers hundreds of decisions at once, that is most of the actor's own work.
`ColumnStepper` keeps the same rules, in the same order, on arrays: each cycle it stacks every live agent's
observation into one array per unit (the agents sharing a policy, `units`), takes one array of actions (and of
extras) per unit back, and emits each unit's completed transitions as columns, what `SharedRingBuffer.write_rows`
takes. A test compares the two field by field (tests/test_parallel_columns.py).

It applies where every agent's observation is one array without an action mask (`columns_apply`); the actor
uses the reference elsewhere (masks, nested observations, recurrent policies, a league, env workers).

Rules, as the reference's: an agent's transition is completed by its next decision, with the reward the step
paid it and the observation it then decides on; an agent the step ends gets its last transition completed at
once, with the observation the step returned for it; an agent that leaves without being done gets its last one
completed as truncated; rewards before an agent's first decision belong to no transition (rule 4); a cut
completes every open transition as truncated (rule 5), between cycles.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import numpy as np

from pzasync.core.spaces import AgentLayout
from pzasync.core.stepper import episode_summary
from pzasync.core.transitions import EpisodeSummary, LayoutBook, TransitionAssembler

#: Columns of one unit's completed transitions, keyed as `SharedRingBuffer.read_new` returns them, and the
#: agent of each row.
Rows = dict[str, np.ndarray]
#: `emit_rows(unit, agents, rows, follows)`: a unit's transitions completed together, in order; `follows[i]`: row
#: i's obs is its agent's previous row's next_obs (the decision was not the agent's first of the episode), which
#: `SharedRingBuffer.write_rows` takes as a fact rather than comparing the observations.
EmitRows = Callable[[Hashable, list[str], Rows, np.ndarray], None]


def columns_apply(layouts: dict[str, AgentLayout]) -> bool:
    """Whether a `ColumnStepper` can step agents of these layouts: one observation array each, no action mask."""
    return all(not (layout.nested_obs or layout.has_mask) for layout in layouts.values())


@dataclass(frozen=True)
class ColumnSink:
    """What an actor gives env copies stepped in columns: each agent's unit (`ColumnStepper`'s `units`) and
    `emit_rows(copy, unit, agents, rows)`, which takes every unit's completed transitions."""

    units: dict[str, Hashable]
    emit_rows: Callable[[int, Hashable, list[str], Rows, np.ndarray], None]


@dataclass(slots=True)
class UnitDecisions:
    """The members of one unit deciding in a cycle (in `env.agents` order) and their observations, stacked."""

    agents: list[str]
    obs: np.ndarray


@dataclass(slots=True)
class CycleBlock:
    """One copy's cycle: every live agent's decision, by unit. Answered with one (actions, extras) per unit."""

    copy: int
    units: dict[Hashable, UnitDecisions]
    size: int = 0
    #: Whether units' members alternate in `env.agents` order (then actions are put back in that order).
    interleaved: bool = False

    @property
    def agent(self) -> str | None:
        """The cycle's first agent (for error messages, as a `PendingDecision`'s agent)."""
        for decisions in self.units.values():
            return decisions.agents[0]
        return None


#: A unit's answer: its actions and the extras stored with each row (arrays of one row per decision).
UnitAnswer = tuple[np.ndarray, dict[str, np.ndarray]]


@dataclass(slots=True)
class _Decided:
    """A unit's decisions of the last cycle, whose transitions are open until their agents' next decisions."""

    agents: list[str]
    obs: np.ndarray
    actions: np.ndarray
    extras: dict[str, np.ndarray]
    #: Per decision: whether the agent had decided before in this episode.
    follows: np.ndarray
    row: dict[str, int] = field(default_factory=dict)


class ColumnStepper:
    """One parallel env copy's episodes, a cycle at a time, in columns (module docstring).

    `units[agent]` names the unit whose policy answers the agent (agents sharing a policy module share one). `emit_rows`
    gets each unit's completed transitions and `on_episode(summary)` each finished or cut episode. The first
    `reset` gets `seed`, later ones none. `to_env(agent, action)` turns a stored action into what `env.step`
    takes.
    """

    def __init__(
        self,
        env: Any,
        emit_rows: EmitRows,
        units: dict[str, Hashable],
        *,
        copy: int = 0,
        seed: int | None = None,
        layouts: LayoutBook,
        check_rewards: bool = True,
        max_episode_steps: int | None = None,
        to_env: Callable[[str, Any], Any] | None = None,
        on_episode: Callable[[EpisodeSummary], None] | None = None,
    ) -> None:
        self.env = env
        self.copy = copy
        self.emit_rows = emit_rows
        self.units = units
        self.on_episode = on_episode
        self.seed = seed
        self.layouts = layouts
        self.check_rewards = check_rewards
        self.max_episode_steps = max_episode_steps
        self.to_env = to_env
        #: The reference's tallies (returns, rewards in transitions and before first decisions), and its
        #: summary and conservation check; its per-agent records are not used here.
        self.tally = TransitionAssembler(layouts)
        self.in_episode = False
        self.steps = 0
        self.paid: dict[str, float] = defaultdict(float)
        self._first_reset = True
        self._observations: dict[str, Any] = {}
        self._infos: dict[str, Any] = {}
        self._block: CycleBlock | None = None
        #: Per unit, its last decisions; per agent whose transition is open, the reward the last step paid it.
        self._decided: dict[Hashable, _Decided] = {}
        self._open: dict[str, float] = {}
        self._acted: list[str] = []
        #: Agents that have decided in this episode.
        self._started: set[str] = set()

    @property
    def episode_index(self) -> int:
        return self.tally.episode_index

    @property
    def agent_selection(self) -> str | None:
        return self._block.agent if self._block is not None else None

    # ------------------------------------------------------------------------------------------ an episode
    def reset(self, seed: int | None = None) -> None:
        """Start the next episode; a `seed` given here seeds this reset whatever the first-reset rule."""
        outcome = self.env.reset(seed=seed if seed is not None else self.seed if self._first_reset else None)
        self._first_reset = False
        observations, infos = outcome
        self.tally.start_episode()
        self.paid.clear()
        self._open.clear()
        self._decided.clear()
        self._started.clear()
        self._observations, self._infos = dict(observations), dict(infos or {})
        self.in_episode = True
        self._open_cycle()

    def next_decisions(self) -> list[CycleBlock]:
        """The cycle's decisions as one block, none once the episode has ended (`CopyStepper`)."""
        return [] if self._block is None else [self._block]

    def answer(self, answered: list[tuple[CycleBlock, dict[Hashable, UnitAnswer], dict]]) -> None:
        """Take the answers to the block `next_decisions` gave (`CopyStepper`)."""
        ((block, by_unit, _),) = answered
        self.step(block, by_unit)

    def _open_cycle(self) -> None:
        """The next cycle's block, or the episode's end (no live agent left, or `max_episode_steps` that the cycle
        would pass)."""
        self._block = None
        live = list(self.env.agents)
        if self._open and not self._open.keys() <= set(live):
            alive = set(live)
            left = [a for a in self._open if a not in alive]  # left without being done: truncated there
            self._complete(left, [self._open.pop(a) for a in left], truncated=True)
        if not live:
            self._end(cut=False)
            return
        if self.max_episode_steps is not None and self.tally.agent_steps + len(live) > self.max_episode_steps:
            self.cut()
            return
        units, book, observations = self.units, self.layouts, self._observations
        members: dict[Hashable, list[str]] = {}
        previous, interleaved = None, False
        for agent in live:
            unit = units.get(agent)
            if unit is None:
                book.get(agent, self._infos.get(agent))  # an agent the run does not know: refused there
                raise RuntimeError(f"agent {agent!r} has no acting unit")
            if unit != previous:
                interleaved |= unit in members
                previous = unit
            members.setdefault(unit, []).append(agent)
        self._block = CycleBlock(self.copy, {
            unit: UnitDecisions(agents, self._stack(agents, [observations[a] for a in agents]))
            for unit, agents in members.items()}, len(live), interleaved)

    def _stack(self, agents: list[str], values: list[Any]) -> np.ndarray:
        """The observations as one array in the storage dtype: a private copy (an env may reuse its arrays)."""
        return np.array(values, dtype=self.layouts.layouts[agents[0]].obs_leaves[0].dtype)

    def step(self, block: CycleBlock, by_unit: dict[Hashable, UnitAnswer]) -> None:
        """Take the cycle's actions: complete each agent's open transition with its decision now (rules 1, 2),
        step the env with every action, and complete at once the transitions of the agents the step ended."""
        if block is not self._block:
            raise RuntimeError(f"env copy {self.copy}: an answer to a block that is not this copy's cycle")
        actions: dict[str, Any] = {}
        to_env, opened, decided = self.to_env, self._open, self._decided
        for unit, decisions in block.units.items():
            unit_actions, extras = by_unit[unit]
            agents = decisions.agents
            if opened:
                following = [a for a in agents if a in opened]
                if following:
                    before = decided[unit]
                    self._emit(unit, before, following, [opened.pop(a) for a in following],
                               self._rows_of(decisions, following), np.zeros(len(following), bool),
                               np.zeros(len(following), bool))
            started = self._started
            follows = np.fromiter((a in started for a in agents), bool, len(agents))
            started.update(agents)
            decided[unit] = _Decided(agents, decisions.obs, unit_actions, extras, follows)
            for agent, action in zip(agents, unit_actions.tolist() if to_env is None else unit_actions):
                actions[agent] = action if to_env is None else to_env(agent, action)
        if block.interleaved:  # the env gets its actions in env.agents order, as on the reference path
            actions = {agent: actions[agent] for agent in self.env.agents}
        self.tally.agent_steps += block.size
        self.steps += block.size
        self._block = None
        self._acted = list(actions)
        self.stepped(self.env.step(actions))

    def stepped(self, outcome: tuple[dict, dict, dict, dict, dict]) -> None:
        """Complete a step with the (observations, rewards, terminations, truncations, infos) it returned."""
        observations, rewards, terminations, truncations, infos = outcome
        acted, self._acted = self._acted, []
        paid = self.paid
        for agent, reward in rewards.items():
            paid[agent] += float(reward)
        self._observations.update(observations)
        self._infos.update(infos or {})
        acting = set(acted)
        tally = self.tally
        for agent, reward in rewards.items():
            if agent not in acting:  # paid before its first decision (rule 4)
                tally.returns[agent] += float(reward)
                tally.before_first_decision[agent] += float(reward)
        ended, ended_rewards, ended_terminated, ended_truncated = [], [], [], []
        opened = self._open
        for agent in acted:
            reward = float(rewards.get(agent, 0.0))
            terminated, truncated = bool(terminations.get(agent, False)), bool(truncations.get(agent, False))
            if terminated or truncated:
                ended.append(agent)
                ended_rewards.append(reward)
                ended_terminated.append(terminated)
                ended_truncated.append(truncated)
            else:
                opened[agent] = reward
        if ended:
            self._complete(ended, ended_rewards, np.array(ended_terminated), np.array(ended_truncated))
        self._open_cycle()

    def _complete(self, agents: list[str], rewards: list[float], terminated: Any = False,
                  truncated: Any = False) -> None:
        """Complete the agents' open transitions with their current observations (the step's, or their last),
        unit by unit, each unit's rows in the order given."""
        n = len(agents)
        terminated = np.broadcast_to(np.asarray(terminated, bool), (n,))
        truncated = np.broadcast_to(np.asarray(truncated, bool), (n,))
        by_unit: dict[Hashable, list[int]] = {}
        for i, agent in enumerate(agents):
            by_unit.setdefault(self.units[agent], []).append(i)
        observations = self._observations
        for unit, rows in by_unit.items():
            who = [agents[i] for i in rows]
            self._emit(unit, self._decided[unit], who, [rewards[i] for i in rows],
                       self._stack(who, [observations[a] for a in who]), terminated[rows], truncated[rows])

    def _rows_of(self, decisions: UnitDecisions, agents: list[str]) -> np.ndarray:
        """The observations these agents decide on now (rows of the cycle's stacked array)."""
        if len(agents) == len(decisions.agents):
            return decisions.obs
        where = {a: i for i, a in enumerate(decisions.agents)}
        return decisions.obs[[where[a] for a in agents]]

    def _emit(self, unit: Hashable, before: _Decided, agents: list[str], rewards: list[float], next_obs: np.ndarray,
              terminated: np.ndarray, truncated: np.ndarray) -> None:
        """The agents' transitions from their decisions in `before` to `next_obs`, as one unit's columns."""
        tally = self.tally
        returns, in_transitions = tally.returns, tally.in_transitions
        for agent, reward in zip(agents, rewards):
            returns[agent] += reward
            in_transitions[agent] += reward
        if agents == before.agents:
            obs, actions, extras, follows = before.obs, before.actions, before.extras, before.follows
        else:
            if not before.row:
                before.row = {a: i for i, a in enumerate(before.agents)}
            index = [before.row[a] for a in agents]
            obs, actions, follows = before.obs[index], before.actions[index], before.follows[index]
            extras = {k: v[index] for k, v in before.extras.items()}
        self.emit_rows(unit, agents, {"obs": obs, "action": actions, "reward": np.array(rewards, np.float32),
                                      "next_obs": next_obs, "terminated": terminated, "truncated": truncated,
                                      **extras}, follows)

    def cut(self) -> None:
        """End the episode here: every open transition is completed as truncated, with the observation the agent
        would decide on next and the reward the last step paid it (rule 5). Does nothing between episodes."""
        if not self.in_episode:
            return
        self._block = None
        if self._open:
            agents = list(self._open)
            self._complete(agents, [self._open.pop(a) for a in agents], truncated=True)
        self._end(cut=True)

    def abandon(self) -> int:
        """Forget the episode in flight without completing anything; returns how many open transitions were
        dropped; does nothing between episodes."""
        if not self.in_episode:
            return 0
        dropped = len(self._open) + (self._block.size if self._block is not None else 0)
        self._block, self._open, self._acted = None, {}, []
        self._decided.clear()
        self.in_episode = False
        return dropped

    def _end(self, cut: bool) -> None:
        self.in_episode = False
        self._block = None
        self._decided.clear()
        summary = episode_summary(self.tally, self.paid if self.check_rewards else None, cut, self.copy, self.env)
        if self.on_episode is not None:
            self.on_episode(summary)
