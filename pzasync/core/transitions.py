"""AEC transition assembly (docs/transitions.md, rules 1-9), free of processes and I/O.

The assembler is fed what `env.last()` returns at each agent's turns and the decisions taken there, and hands
back complete per-agent transitions. It is the single place where turn-based semantics live: rewards that
arrive on other agents' turns, terminal turns, agents that die mid-episode, and episodes the actor cuts short.
Both `rollout` and the async actor drive it through `collect.run_episodes`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pzasync.errors import RewardConservationError, UnsupportedSpaceError
from pzasync.core.spaces import MASK_KEY, AgentLayout, agent_layout, stored_obs_space


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


def _forwarding_getattrs() -> tuple[Any, ...]:
    from pettingzoo.utils.wrappers import BaseWrapper, OrderEnforcingWrapper

    return BaseWrapper.__getattr__, OrderEnforcingWrapper.__getattr__


class ForwardedAttribute:
    """`getattr(env, name)` without the walk through PettingZoo wrappers' `__getattr__`, which forward a name
    they lack to the env they wrap: about a microsecond per wrapper, at every step of a classic env's three.

    The owner is the first object down the `.env` chain that has `name` itself; the wrappers above it are
    skipped only while each forwards with PettingZoo's own `__getattr__` (after reset, OrderEnforcing's just
    forwards) and still lacks an attribute of that name, checked at every read. Anything else (another
    `__getattr__`, a wrapper that sets the attribute itself) reads through `getattr(env, name)`, as before.
    """

    def __init__(self, env: Any, name: str) -> None:
        self.env, self.name = env, name
        forwarding = _forwarding_getattrs()
        self._skipped: list[dict] = []
        self._owner: Any = None
        if name.startswith("_") and name != "_cumulative_rewards":
            return  # PettingZoo's wrappers refuse to forward other private names: leave that to them
        obj: Any = env
        while not _has_own(obj, name):
            if getattr(type(obj), "__getattr__", None) not in forwarding or "env" not in vars(obj):
                return  # an unknown way of forwarding: no owner, always ask the env
            self._skipped.append(vars(obj))
            obj = vars(obj)["env"]
        self._owner = obj if self._skipped else None

    def get(self) -> Any:
        owner, name = self._owner, self.name
        if owner is None:
            return getattr(self.env, name)
        for skipped in self._skipped:  # a loop, not any(<generator>): this runs at every step
            if name in skipped:
                return getattr(self.env, name)
        return getattr(owner, name)


def last_reader(env: Any) -> Callable[[], tuple]:
    """A function returning what `env.last()` returns, with the state dicts read by `ForwardedAttribute`.

    `AECEnv.last` reads five attributes through the wrappers' `__getattr__` forwarding, about 6 of the
    17 µs a connect four `last()` takes. Used only where the env's class keeps `AECEnv.last` (on a wrapped
    env that is what `last()` runs, whatever the inner envs define); `observe` is still called on `env`
    itself, through every wrapper. Anything else gets `env.last` unchanged."""
    from pettingzoo.utils.env import AECEnv

    if getattr(type(env), "last", None) is not AECEnv.last:
        return env.last
    names = ("agent_selection", "_cumulative_rewards", "terminations", "truncations", "infos")
    fields = [ForwardedAttribute(env, name) for name in names]
    first = fields[0]
    if all(f._owner is first._owner and f._skipped == first._skipped for f in fields) and first._owner is not None:
        # The usual case: one env down the chain owns all five. One check per skipped wrapper (does it now
        # have any of the five itself?) replaces five reads through ForwardedAttribute.
        owner, skipped, wanted = first._owner, tuple(first._skipped), frozenset(names)

        def last_from_owner() -> tuple:
            for own in skipped:
                if not wanted.isdisjoint(own):
                    return env.last()
            agent = owner.agent_selection
            assert agent is not None
            return (env.observe(agent), owner._cumulative_rewards[agent], owner.terminations[agent],
                    owner.truncations[agent], owner.infos[agent])

        return last_from_owner
    selection, cumulative, terminations, truncations, infos = (f.get for f in fields)

    def last() -> tuple:
        agent = selection()
        assert agent is not None
        return env.observe(agent), cumulative()[agent], terminations()[agent], truncations()[agent], infos()[agent]

    return last


def _has_own(obj: Any, name: str) -> bool:
    """Whether `name` is found on `obj` without its `__getattr__`: in its instance dict or its class's MRO."""
    return name in getattr(obj, "__dict__", {}) or any(name in vars(k) for k in type(obj).__mro__)


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
        self._rewards: ForwardedAttribute | None = None

    def start(self, env: Any) -> None:
        self.paid.clear()
        self.since_decision.clear()
        if self._rewards is None or self._rewards.env is not env:
            self._rewards = ForwardedAttribute(env, "rewards")
        for agent, value in env._cumulative_rewards.items():
            if value:
                self.paid[agent] += float(value)
                self.since_decision[agent] += float(value)

    def decided(self, agent: str) -> None:
        self.since_decision[agent] = 0.0

    def after_step(self, env: Any) -> None:
        paid, since = self.paid, self.since_decision
        rewards = self._rewards.get() if self._rewards is not None and self._rewards.env is env else env.rewards
        for agent, value in rewards.items():
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
                    f"carry {self.in_transitions.get(agent, 0.0)!r} plus {self.before_first_decision.get(agent, 0.0)!r} "
                    f"before its first decision (its `rewards` entries summed to the first amount, the `last()` "
                    f"rewards to the second). Does the env zero _cumulative_rewards[agent] when the agent acts "
                    f"and clear `rewards` every step, as PettingZoo requires?"
                )
