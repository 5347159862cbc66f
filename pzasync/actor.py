"""The actor: steps the env with each agent's latest published policy and writes transitions to its buffer.

It owns the env and iterates `agent_iter()` sequentially through `collect.run_episodes` (the same loop as
`rollout`). Before each decision it compares the agent's slot version with the version it holds and, only
when it changed, copies the new vector into its local policy. It never waits for a learner, except in the
two opt-in modes that say so in their metrics: a replay ratio (bounded lead) and on-policy backpressure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

from . import stats as S
from .collect import run_episodes
from .errors import EnvCrashedError, NonFiniteError, PzasyncError
from .learner_loop import target_updates
from .spaces import AgentLayout
from .transport import PolicySource, RunControl, TransitionWriter
from .transitions import EpisodeSummary, LayoutBook, Transition


@dataclass
class ActingAgent:
    """The actor's view of one agent: its local policy copy, slot, buffer and schedule."""

    agent: str
    layout: AgentLayout
    policy: Any
    learns: bool
    on_policy: bool = False
    slot: PolicySource | None = None
    buffer: TransitionWriter | None = None
    learning_starts: int = 0
    version: int = 0
    steps: int = 0
    vector: np.ndarray | None = None
    obs_keys: list[str] = field(default_factory=list)
    may_wait: bool = False
    nonfinite: int = 0
    float_paths: list[tuple] = field(default_factory=list)
    steps_offset: int = 0
    #: Whose learner counters apply (its own name, or its agent group's) and, in a group, its member index.
    unit: str = ""
    member: int | None = None
    #: Transitions this agent wrote (a group's buffer counts all members together).
    written: int = 0
    #: For this episode only, a policy that acts in this seat instead of the unit's newest one (a league
    #: opponent: a frozen snapshot or a scripted player). Its decisions are not recorded.
    override: Any = None

    def __post_init__(self) -> None:
        self.unit = self.unit or self.agent
        if self.slot is not None:
            self.vector = np.zeros(self.slot.size, np.float32)
        self.obs_keys = (["obs"] if not self.layout.nested_obs
                         else [f"obs/{leaf.name}" for leaf in self.layout.obs_leaves])
        self.float_paths = [leaf.path for leaf in self.layout.obs_leaves if leaf.dtype.kind == "f"]


def env_action_converter(layouts: dict[str, AgentLayout]) -> Callable[[str, Any], Any]:
    """Stored action -> what env.step gets: ints for Discrete, Box actions clipped to their bounds."""
    converters: dict[str, Callable[[Any], Any]] = {}
    for agent, layout in layouts.items():
        space = layout.action_space
        if isinstance(space, spaces.Discrete):
            converters[agent] = int
        elif isinstance(space, spaces.Box):
            low, high, dtype = space.low, space.high, space.dtype
            converters[agent] = lambda a, low=low, high=high, dtype=dtype: np.clip(a, low, high).astype(dtype)
        else:
            converters[agent] = lambda a: a
    return lambda agent, action: converters[agent](action)


class Actor:
    """Runs episodes for the whole env, one decision at a time, feeding per-agent buffers."""

    def __init__(
        self,
        env: Any,
        agents: dict[str, ActingAgent],
        stats: RunControl,
        *,
        replay_ratio: float | None,
        max_lead: int,
        backpressure: bool,
        check_rewards: bool = True,
        max_episode_steps: int | None = None,
        before_decision: Callable[[str], None] | None = None,
        env_name: str | None = None,
        raise_on_nonfinite: bool = False,
    ) -> None:
        from .learners import vector_to_policy

        self.env = env
        self.env_name = env_name or str(env)
        self.raise_on_nonfinite = raise_on_nonfinite
        self.agents = agents
        self.stats = stats
        self.replay_ratio = replay_ratio
        self.max_lead_updates = max(1, int(round((replay_ratio or 0) * max_lead)))
        self.backpressure = backpressure
        self.check_rewards = check_rewards
        self.max_episode_steps = max_episode_steps
        self.before_decision = before_decision
        self._load = vector_to_policy
        self.layouts = {a: x.layout for a, x in agents.items()}
        for a in agents.values():
            a.may_wait = self._may_wait(a)
            a.steps_offset = a.steps  # steps taken before this run (a resumed run) are not this run's
        self.total_steps = 0
        self.episodes = 0
        #: The run's `League` (RunConfig.league), which swaps opponents into seats at episode starts.
        self.league: Any = None

    # ------------------------------------------------------------------------------------------ per turn
    def refresh(self, a: ActingAgent) -> None:
        """Copy the agent's newest published policy into its local module, if the version changed."""
        if a.slot is not None and a.slot.version != a.version:
            a.version = a.slot.read(a.vector)
            self._load(a.vector, a.policy)

    def _may_wait(self, a: ActingAgent) -> bool:
        if a.buffer is None:
            return False
        return (self.backpressure and a.on_policy) or (self.replay_ratio is not None and not a.on_policy)

    def _wait_if_ahead(self, a: ActingAgent) -> None:
        """Opt-in waits: under a replay ratio (bounded lead) or on-policy backpressure. Time is reported."""
        stats, agent = self.stats, a.unit
        if stats.get(agent, S.STATUS) == S.CRASHED:
            return
        def ahead() -> bool:
            if a.on_policy:
                return self.backpressure and a.buffer.unread >= a.buffer.capacity - 1
            if self.replay_ratio is None:
                return False
            due = target_updates(self.replay_ratio, a.buffer.written, a.learning_starts)
            return due - stats.get(agent, S.UPDATES) > self.max_lead_updates
        if not ahead():
            return
        start = time.monotonic_ns()
        while ahead() and not stats.stop_requested and stats.get(agent, S.STATUS) != S.CRASHED:
            time.sleep(0.0001)
        stats.add(agent, S.ACTOR_WAIT_NS, time.monotonic_ns() - start)

    def act(self, agent: str, obs: Any, mask: np.ndarray | None) -> tuple[Any, dict]:
        a = self.agents[agent]
        if a.override is not None:
            return self._act_as_opponent(a, obs, mask)
        if self.before_decision is not None:
            self.before_decision(agent)
        if a.may_wait:
            self._wait_if_ahead(a)
        if a.slot is not None and a.slot.version != a.version:
            self.refresh(a)
        actions, extras = a.policy.act(_batch_of_one(a, obs), None if mask is None else mask[None], True)
        a.steps += 1
        a.policy.on_actor_steps(a.steps)
        self.total_steps += 1
        self.stats.record_steps(a.agent, a.steps - a.steps_offset, self.total_steps)
        out = {k: v[0] for k, v in extras.items()} if extras else {}
        out["policy_version"] = a.version
        if a.member is not None:
            out["member"] = a.member
        return actions[0], out

    def _act_as_opponent(self, a: ActingAgent, obs: Any, mask: np.ndarray | None) -> tuple[Any, dict]:
        """A league opponent's decision: counted in the run's steps, not in the seat's own schedule."""
        actions, _ = a.override.act(_batch_of_one(a, obs), None if mask is None else mask[None], True)
        self.total_steps += 1
        self.stats.record_steps(None, 0, self.total_steps)
        return actions[0], {}

    def _finite(self, a: ActingAgent, t: Transition) -> bool:
        if not math.isfinite(t.reward):
            return False
        for obs in (t.obs, t.next_obs):
            for path in a.float_paths:
                if not np.isfinite(_leaf(obs, path)).all():
                    return False
        return True

    def emit(self, t: Transition) -> None:
        a = self.agents[t.agent]
        if not self._finite(a, t):
            a.nonfinite += 1
            if self.raise_on_nonfinite:
                raise NonFiniteError(f"agent {t.agent!r}: NaN or inf in a transition (reward {t.reward!r}) after "
                                     f"{self.total_steps} agent steps; RunConfig(nonfinite='count') counts instead")
        if a.buffer is not None and a.override is None:
            a.buffer.write(t)
            a.written += 1

    # ------------------------------------------------------------------------------------------ the loop
    def run(
        self,
        *,
        agent_steps: int | None,
        seed: int | None,
        keep_going: Callable[[], bool],
        on_episode: Callable[[EpisodeSummary], None],
    ) -> int:
        """Play until `agent_steps` decisions or until `keep_going()` is False; returns decisions taken."""
        league = self.league

        def episode_done(summary: EpisodeSummary) -> None:
            self.episodes += 1
            self.stats.run[S.EPISODES] = self.episodes
            if league is not None:
                summary.match = league.end_episode(summary)
            on_episode(summary)

        try:
            return run_episodes(
                self.env, self.act, self.emit, agent_steps=agent_steps, seed=seed,
                layouts=LayoutBook(self.env, self.layouts, fixed=True), check_rewards=self.check_rewards,
                max_episode_steps=self.max_episode_steps, on_episode=episode_done, keep_going=keep_going,
                to_env=env_action_converter(self.layouts),
                on_episode_start=(lambda: league.start_episode(self.total_steps)) if league is not None else None,
            )
        except (PzasyncError, KeyboardInterrupt):
            raise
        except Exception as exc:
            agent = getattr(self.env, "agent_selection", None)
            raise EnvCrashedError(
                f"env {self.env_name!r} raised {type(exc).__name__}: {exc} during the turn of agent {agent!r}, in "
                f"episode {self.episodes} (from 0), at agent step {self.total_steps} of this run (original "
                f"traceback above)"
            ) from exc


def _batch_of_one(a: ActingAgent, obs: Any) -> dict[str, np.ndarray]:
    """One observation as the batch of one a `Policy.act` takes, keyed like the buffer's obs columns."""
    if len(a.obs_keys) == 1:
        return {"obs": obs[None]}
    return {key: np.asarray(_leaf(obs, leaf.path))[None] for key, leaf in zip(a.obs_keys, a.layout.obs_leaves)}


def _leaf(obs: Any, path: tuple) -> Any:
    for key in path:
        obs = obs[key]
    return obs
