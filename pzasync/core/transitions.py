"""AEC transition assembly (docs/transitions.md, rules 1-9), free of processes and I/O.

The assembler is fed what `env.last()` returns at each agent's turns and the decisions taken there, and hands
back complete per-agent transitions. It is the single place where turn-based semantics live: rewards that
arrive on other agents' turns, terminal turns, agents that die mid-episode, and episodes the actor cuts short.
`EpisodeStepper` (core/stepper.py) drives it, one env copy at a time, for `rollout` and the actor alike.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pzasync.core.spaces import MASK_KEY, AgentLayout, agent_layout, stored_obs_space
from pzasync.errors import RewardConservationError, UnsupportedSpaceError


@dataclass(slots=True)
class Transition:
    """One agent's step: what it saw and did, and what followed at its next turn."""

    agent: str
    obs: Any
    action: Any
    reward: float
    next_obs: Any
    terminated: bool
    truncated: bool
    action_mask: np.ndarray | None = None
    next_action_mask: np.ndarray | None = None
    extras: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Decision:
    obs: Any
    mask: np.ndarray | None
    action: Any
    extras: dict[str, float]


@dataclass
class EpisodeSummary:
    """Per-agent returns of one finished (or cut) episode and the number of decisions in it."""

    index: int
    returns: dict[str, float]
    agent_steps: int
    cut_by_actor: bool
    #: Under a league (RunConfig.league): who played whom in this episode (`league.Match.as_dict`).
    match: dict | None = None
    #: Which of the actor's env copies played it (RunConfig.envs_per_actor).
    copy: int = 0
    #: On an env set (core/envset_env.py): the label of the env that played it, and the arguments it was made with.
    env: str | None = None
    env_args: dict | None = None


class LayoutBook:
    """Agent layouts, fixed up front (the runtime's shared buffers) or found on first sight (`rollout`).

    With `fixed=False`, an agent seen for the first time gets its layout from the env's spaces and from whether
    its `info` carries an action mask; agents that appear mid-episode (generated agents) are handled this way.
    """

    def __init__(self, env: Any, layouts: dict[str, AgentLayout] | None = None, fixed: bool = False) -> None:
        self.env = env
        self.layouts: dict[str, AgentLayout] = dict(layouts or {})
        self.fixed = fixed
        self._checked: set[str] = set()

    def new_episode(self) -> None:
        self._checked.clear()

    def get(self, agent: str, info: dict | None) -> AgentLayout:
        layout = self.layouts.get(agent)
        if layout is not None and (self.fixed or agent in self._checked):
            return layout
        obs_space, act_space = self.env.observation_space(agent), self.env.action_space(agent)
        if layout is None:
            if self.fixed:
                raise UnsupportedSpaceError(
                    f"agent {agent!r} appeared but is not among the env's possible_agents "
                    f"{sorted(self.layouts)}; the runtime needs every agent known before it starts"
                )
            info_mask = isinstance(info, dict) and MASK_KEY in info
            layout = self.layouts[agent] = agent_layout(agent, obs_space, act_space, info_mask)
        elif layout.action_space != act_space or layout.obs_space != stored_obs_space(obs_space):
            if self.fixed:
                raise UnsupportedSpaceError(
                    f"agent {agent!r}: its spaces changed between episodes; the runtime needs fixed spaces per agent"
                )
            layout = self.layouts[agent] = agent_layout(agent, obs_space, act_space, layout.has_mask)
        self._checked.add(agent)
        return layout


class RewardLedger:
    """What the env paid each agent, summed from `env.rewards` after every step, independently of `last()`.

    PettingZoo defines `rewards` as what the last step paid and `_cumulative_rewards[agent]` (what `last()`
    shows) as what was paid since the agent last acted. The assembler reads the second at turns; this ledger
    sums the first, so an env or an assembly that loses, repeats or misplaces a reward makes them disagree.
    It also knows what each agent was paid since its last decision, which is what a transition cut by the
    actor gets: `_cumulative_rewards` cannot be trusted mid-cycle (PettingZoo's parallel_to_aec conversion
    only overwrites it when a cycle ends, so it still shows an already-consumed reward).
    """

    def __init__(self) -> None:
        self.paid: dict[str, float] = defaultdict(float)
        self.since_decision: dict[str, float] = defaultdict(float)

    def start(self, env: Any) -> None:
        self.paid.clear()
        self.since_decision.clear()
        for agent, value in env._cumulative_rewards.items():
            if value:
                self.paid[agent] += float(value)
                self.since_decision[agent] += float(value)

    def decided(self, agent: str) -> None:
        self.since_decision[agent] = 0.0

    def after_step(self, env: Any) -> None:
        paid, since = self.paid, self.since_decision
        for agent, value in env.rewards.items():
            if value:
                paid[agent] += float(value)
                since[agent] += float(value)


class TransitionAssembler:
    """Turns successive `last()` results and decisions into complete per-agent transitions."""

    def __init__(self, layouts: LayoutBook) -> None:
        self.layouts = layouts
        self.episode_index = -1
        self._pending: dict[str, _Decision] = {}
        self.returns: dict[str, float] = defaultdict(float)
        self.before_first_decision: dict[str, float] = defaultdict(float)
        self.in_transitions: dict[str, float] = defaultdict(float)
        self.agent_steps = 0

    def start_episode(self) -> None:
        self.episode_index += 1
        self._pending.clear()
        self.layouts.new_episode()
        for tally in (self.returns, self.before_first_decision, self.in_transitions):
            tally.clear()
        self.agent_steps = 0

    def turn(
        self, agent: str, observation: Any, reward: float, terminated: bool, truncated: bool, info: dict,
    ) -> tuple[Transition | None, Any, np.ndarray | None]:
        """Record a turn; return the transition it completes (if any), the stored obs and the mask."""
        obs, mask = self.layouts.get(agent, info).split(observation, info)
        return self.completed(agent, reward, obs, mask, bool(terminated), bool(truncated)), obs, mask

    def completed(self, agent: str, reward: float, obs: Any, mask: np.ndarray | None, terminated: bool = False,
                  truncated: bool = False) -> Transition | None:
        """`turn` for an observation already split (a live turn, where the stepper split it to decide): the
        transition the turn completes, if any."""
        reward = float(reward)
        self.returns[agent] += reward
        pending = self._pending.pop(agent, None)
        if pending is None:
            # docs/transitions.md, rule 4: a reward before the agent's first decision belongs to no transition.
            self.before_first_decision[agent] += reward
            return None
        self.in_transitions[agent] += reward
        return Transition(agent, pending.obs, pending.action, reward, obs, terminated, truncated, pending.mask, mask,
                          pending.extras)

    def decide(self, agent: str, obs: Any, mask: np.ndarray | None, action: Any, extras: dict | None = None) -> None:
        """Record the decision taken at the agent's current turn; it stays pending until its next turn."""
        self._pending[agent] = _Decision(obs, mask, action, extras or {})
        self.agent_steps += 1

    def cut_episode(self, env: Any, since_decision: dict[str, float]) -> list[Transition]:
        """docs/transitions.md, rule 5: the actor stops the episode; complete every pending transition as
        truncated, with the reward paid to the agent since its decision (from a RewardLedger)."""
        done = []
        for agent in list(env.agents):
            reward = float(since_decision.get(agent, 0.0))
            self.returns[agent] += reward
            pending = self._pending.pop(agent, None)
            if pending is None:
                self.before_first_decision[agent] += reward
                continue
            self.in_transitions[agent] += reward
            obs, mask = self.layouts.get(agent, env.infos.get(agent)).split(env.observe(agent), env.infos.get(agent))
            done.append(
                Transition(agent, pending.obs, pending.action, reward, obs, False, True, pending.mask, mask,
                           pending.extras)
            )
        self._pending.clear()
        return done

    def abandon_episode(self) -> list[str]:
        """Drop the pending decisions of an episode that cannot be observed any more (a remote server died):
        nothing is completed. Returns the agents whose decision was dropped."""
        dropped = sorted(self._pending)
        self._pending.clear()
        return dropped

    def end_episode(self, paid: dict[str, float] | None = None, cut_by_actor: bool = False) -> EpisodeSummary:
        """Close the episode; with `paid` (a RewardLedger's), check that every reward was accounted for."""
        if self._pending:
            raise RuntimeError(f"episode ended with pending decisions of {sorted(self._pending)}")
        if paid is not None:
            self.check_conservation(paid)
        return EpisodeSummary(self.episode_index, dict(self.returns), self.agent_steps, cut_by_actor)

    def check_conservation(self, paid: dict[str, float]) -> None:
        """docs/transitions.md, invariant 8: per agent, transition rewards plus pre-decision rewards equal what the
        env paid."""
        for agent in sorted(set(paid) | set(self.returns)):
            total = self.in_transitions.get(agent, 0.0) + self.before_first_decision.get(agent, 0.0)
            expected = paid.get(agent, 0.0)
            if not math.isclose(total, expected, rel_tol=1e-9, abs_tol=1e-6):
                raise RewardConservationError(
                    f"episode {self.episode_index}, agent {agent!r}: the env paid {expected!r} but transitions "
                    f"carry {self.in_transitions.get(agent, 0.0)!r} plus "
                    f"{self.before_first_decision.get(agent, 0.0)!r} "
                    f"before its first decision (its `rewards` entries summed to the first amount, the `last()` "
                    f"rewards to the second). Does the env zero _cumulative_rewards[agent] when the agent acts "
                    f"and clear `rewards` every step, as PettingZoo requires?"
                )
