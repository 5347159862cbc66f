"""recall_v0: a turn-based (AEC) memory test: each agent sees a cue once and must name it `delay` cycles later.

Rules
- `n_agents` agents ("agent_0", ...) act one at a time in index order; all of them act in every cycle. A *cycle*
  is one turn of every agent. An episode is exactly `delay + 1` cycles (cycles 0 .. `delay`).
- At `reset` every agent gets its own cue, drawn uniformly from range(`n_cues`): one call
  `np_random.integers(n_cues, size=n_agents)` on the env's seeded `np_random` (agent i gets element i), so one
  seed fixes the episode. `reset(seed, options)` accepts options {"cues": [c_0, c_1, ...]} to set the cues
  exactly (used by the tests); the draw is made either way, other keys are ignored.
- Observation: Box(0, 1, (n_cues + 2,), float32) = [cue one-hot (n_cues values), answer flag, bias 1]. What an
  agent observes depends only on how many turns it has taken itself (k = 0 before its first action):
  k = 0: the one-hot of its own cue, flag 0; 0 < k < delay: all zeros, flag 0; k = delay: zeros, flag 1;
  after its answer (k = delay + 1): zeros, flag 0. The bias is always 1. So the cue is shown on the agent's
  first turn only, and no observation ever carries another agent's cue.
- Actions: Discrete(n_cues). On turns k < delay the action has no effect and pays 0. On the answering turn
  (k = delay, cycle `delay`) the agent is paid +1 if its action equals its own cue, else 0, at its own step.
- Right after the last agent's answer every agent is terminated; each sees its answer's reward and the
  termination in its next `last()` and leaves through `_was_dead_step`. Nothing is ever truncated.
- `state()`: Box(0, 1, (n_agents * n_cues + 1,), float32) = every agent's cue one-hot in agent order, then
  cycle / (delay + 1) (1.0 once the episode is over). It is for centralized critics; it holds every cue.

Chance level: a memoryless (feed-forward) policy sees the same observation on the answering turn whatever the
cue, so its answer is independent of the cue and, the cue being uniform, it is right with probability exactly
1 / n_cues (expected return 1 / n_cues per agent). A policy that remembers its first observation is right every
time (return 1). Agents do not interact: each one's return depends only on its own cue and answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import aec_to_parallel


class raw_env(AECEnv):
    metadata = {"name": "recall_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, n_agents: int = 2, n_cues: int = 2, delay: int = 4, render_mode: str | None = None) -> None:
        super().__init__()
        if n_agents < 1:
            raise ValueError(f"n_agents must be at least 1, got {n_agents}")
        if n_cues < 2:
            raise ValueError(f"n_cues must be at least 2, got {n_cues}")
        if delay < 1:
            raise ValueError(f"delay must be at least 1 (the answer comes after the cue), got {delay}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.n, self.n_cues, self.delay = n_agents, n_cues, delay
        self.render_mode = render_mode
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.observation_spaces = {a: spaces.Box(0.0, 1.0, (n_cues + 2,), np.float32) for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(n_cues) for a in self.possible_agents}
        self.state_space = spaces.Box(0.0, 1.0, (n_agents * n_cues + 1,), np.float32)
        self.np_random, _ = seeding.np_random(None)

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        options = options or {}
        drawn = self.np_random.integers(self.n_cues, size=self.n)
        cues = options.get("cues", drawn)
        if len(cues) != self.n or not all(0 <= int(c) < self.n_cues for c in cues):
            raise ValueError(f"options['cues'] must hold {self.n} cues in range({self.n_cues}), got {cues!r}")
        self.agents = list(self.possible_agents)
        self.cues = {a: int(c) for a, c in zip(self.agents, cues)}
        self.turns = dict.fromkeys(self.agents, 0)
        self.answers: dict[str, int] = {}
        self.cycle = 0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._skip_agent_selection = None
        self.agent_selection = self.agents[0]

    def observe(self, agent: str) -> np.ndarray:
        obs = np.zeros(self.n_cues + 2, np.float32)
        k = self.turns[agent]
        if k == 0:
            obs[self.cues[agent]] = 1.0
        elif k == self.delay:
            obs[self.n_cues] = 1.0
        obs[self.n_cues + 1] = 1.0
        return obs

    def state(self) -> np.ndarray:
        state = np.zeros(self.n * self.n_cues + 1, np.float32)
        for i, a in enumerate(self.possible_agents):
            state[i * self.n_cues + self.cues[a]] = 1.0
        state[-1] = self.cycle / (self.delay + 1)
        return state

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._clear_rewards()
        self._cumulative_rewards[agent] = 0.0
        if self.turns[agent] == self.delay:
            self.answers[agent] = int(action)
            self.rewards[agent] = float(int(action) == self.cues[agent])
        self.turns[agent] += 1
        index = self.agents.index(agent)
        if index + 1 < len(self.agents):
            self.agent_selection = self.agents[index + 1]
        else:
            self.cycle += 1
            if self.cycle > self.delay:
                for a in self.agents:
                    self.terminations[a] = True
            self.agent_selection = self.agents[0]
        self._accumulate_rewards()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        seats = ", ".join(f"{a}: cue {self.cues[a]} answer {self.answers.get(a, '-')}" for a in self.possible_agents)
        return f"cycle {min(self.cycle, self.delay)}/{self.delay} | {seats}"

    def close(self) -> None:
        pass


def env(**kwargs: Any) -> AECEnv:
    """The AEC env, wrapped as PettingZoo recommends (action bounds asserted, call order enforced)."""
    return wrappers.OrderEnforcingWrapper(wrappers.AssertOutOfBoundsWrapper(raw_env(**kwargs)))


def parallel_env(**kwargs: Any) -> ParallelEnv:
    """The same game through PettingZoo's aec_to_parallel conversion (one call = one cycle)."""
    return aec_to_parallel(env(**kwargs))
