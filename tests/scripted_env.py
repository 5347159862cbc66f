"""A two-player turn-based env whose rewards are easy to work out by hand, used as an oracle of the rules in
docs/transitions.md.

Rules: p0 and p1 alternate, p0 first. A live step by X with action a pays X `a` and pays the other live agent
+10 (a reward on another agent's turn). p1 dies (terminated, -100) on its 2nd action; p0 plays on alone and
is truncated by its 4th action. Observations are [own decisions so far, agent index]; the action mask
(info["action_mask"]) allows action 1 only on odd own-decision counts, both actions otherwise.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils.agent_selector import AgentSelector


class ScriptedEnv(AECEnv):
    metadata = {"name": "scripted_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, mask_in_obs: bool = False) -> None:
        super().__init__()
        self.possible_agents = ["p0", "p1"]
        self.mask_in_obs = mask_in_obs
        obs = spaces.Box(0, 10, (2,), np.float32)
        mask = spaces.Box(0, 1, (2,), np.int8)
        self._obs_space = spaces.Dict({"observation": obs, "action_mask": mask}) if mask_in_obs else obs
        self._act_space = spaces.Discrete(2)
        self.reset_seeds: list[int | None] = []

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _mask(self, agent):
        return np.array([0, 1] if self.decisions[agent] % 2 == 1 else [1, 1], dtype=np.int8)

    def observe(self, agent):
        obs = np.array([self.decisions[agent], self.possible_agents.index(agent)], dtype=np.float32)
        return {"observation": obs, "action_mask": self._mask(agent)} if self.mask_in_obs else obs

    def _info(self, agent):
        return {} if self.mask_in_obs else {"action_mask": self._mask(agent)}

    def reset(self, seed=None, options=None):
        self.reset_seeds.append(seed)
        self.agents = list(self.possible_agents)
        self.decisions = dict.fromkeys(self.agents, 0)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: self._info(a) for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._clear_rewards()
        self._cumulative_rewards[agent] = 0.0
        self.decisions[agent] += 1
        self.rewards[agent] += float(action)
        for other in self.agents:
            if other != agent:
                self.rewards[other] += 10.0
        if agent == "p1" and self.decisions[agent] == 2:
            self.rewards[agent] -= 100.0
            self.terminations[agent] = True
        if agent == "p0" and self.decisions[agent] == 4:
            self.truncations[agent] = True
        for a in self.agents:
            self.infos[a] = self._info(a)
        self._accumulate_rewards()
        live = [a for a in self.agents if not (self.terminations[a] or self.truncations[a])]
        self._selector.reinit(live or self.agents)
        nxt = [a for a in self.agents if a != agent and a in live]
        self.agent_selection = nxt[0] if nxt else agent
        self._deads_step_first()


def env(mask_in_obs: bool = False) -> ScriptedEnv:
    return ScriptedEnv(mask_in_obs)


class StartOffsetEnv(AECEnv):
    """One agent, actions Discrete(3, start=5), one legal action per turn (info["action_mask"], index i is action
    5 + i); an illegal action raises. Ends after 6 decisions. Checks that mask indices are offset by `start`."""

    metadata = {"name": "start_offset_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["solo"]
        self._act_space = spaces.Discrete(3, start=5)
        self._obs_space = spaces.Box(0, 10, (1,), np.float32)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _mask(self):
        mask = np.zeros(3, np.int8)
        mask[self.turn % 3] = 1
        return mask

    def observe(self, agent):
        return np.array([self.turn], np.float32)

    def reset(self, seed=None, options=None):
        self.agents = ["solo"]
        self.turn = 0
        self.rewards = {"solo": 0.0}
        self._cumulative_rewards = {"solo": 0.0}
        self.terminations = {"solo": False}
        self.truncations = {"solo": False}
        self.infos = {"solo": {"action_mask": self._mask()}}
        self.agent_selection = "solo"

    def step(self, action):
        if self.terminations["solo"]:
            self._was_dead_step(action)
            return
        legal = 5 + self.turn % 3
        if action != legal:
            raise ValueError(f"illegal action {action}: only {legal} is legal")
        self._cumulative_rewards["solo"] = 0.0
        self.turn += 1
        self.rewards["solo"] = 1.0
        self.terminations["solo"] = self.turn >= 6
        self.infos["solo"] = {"action_mask": self._mask()}
        self._accumulate_rewards()
