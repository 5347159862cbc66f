"""A Gymnasium env seen as a one-agent PettingZoo AEC env, so single-agent tasks use the same runtime."""

from __future__ import annotations

from typing import Any

import gymnasium
from pettingzoo import AECEnv


class GymnasiumAECEnv(AECEnv):
    """One agent, named `agent_name`, whose turns are the Gymnasium env's steps."""

    def __init__(self, env: gymnasium.Env, agent_name: str = "agent_0") -> None:
        super().__init__()
        self.env = env
        self.possible_agents = [agent_name]
        self.agents: list[str] = []
        name = env.spec.id if env.spec else type(env).__name__
        self.metadata = {**getattr(env, "metadata", {}), "name": f"gymnasium:{name}",
                         "is_parallelizable": True}
        self.render_mode = getattr(env, "render_mode", None)
        self._obs: Any = None

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._obs, info = self.env.reset(seed=seed, options=options)
        agent = self.possible_agents[0]
        self.agents = [agent]
        self.agent_selection = agent
        self.rewards = {agent: 0.0}
        self._cumulative_rewards = {agent: 0.0}
        self.terminations = {agent: False}
        self.truncations = {agent: False}
        self.infos = {agent: info}

    def observe(self, agent: str) -> Any:
        return self._obs

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self._obs, reward, terminated, truncated, info = self.env.step(action)
        self.rewards[agent] = float(reward)
        self.terminations[agent] = bool(terminated)
        self.truncations[agent] = bool(truncated)
        self.infos[agent] = info
        self._accumulate_rewards()

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
