"""A two-player env whose every transition says where it comes from, so that each row a learner reads can be
checked on its own: not torn, not lost, not duplicated, not given to the wrong actor, copy or agent.

Each copy takes the seed of its first reset as its `tag` (copy k of actor a gets seed + a * envs_per_actor + k,
so tag - seed is the row's track). c0 and c1 alternate, LENGTH decisions each per episode; an observation is
[tag, agent, episode, own decisions so far], and a decision's reward is `row_reward(tag, agent, episode, t)`,
paid to the agent that took it. A transition from decision t thus has obs [tag, agent, e, t], next_obs
[tag, agent, e, t + 1] and reward row_reward(tag, agent, e, t); its episode ends (terminated) after its LENGTH-th,
unless the actor cut the episode first (docs/transitions.md, rule 5): the env never truncates, so a truncated row
is a cut, and a cut between c0's last decision and c1's leaves c0's last row truncated, not terminated.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils.agent_selector import AgentSelector

LENGTH = 5


def row_reward(tag, agent, episode, t):
    """What decision t of `agent` in `episode` of copy `tag` pays: every field of the row in one number."""
    return tag * 100_000 + agent * 10_000 + (episode % 1000) * 10 + t


class CounterEnv(AECEnv):
    metadata = {"name": "counter_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["c0", "c1"]
        self._obs_space = spaces.Box(0, 1e9, (4,), np.float64)
        self._act_space = spaces.Discrete(2)
        self.tag: int | None = None
        self.episode = -1

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def observe(self, agent):
        i = self.possible_agents.index(agent)
        return np.array([self.tag, i, self.episode, self.decisions[agent]], dtype=np.float64)

    def reset(self, seed=None, options=None):
        if self.tag is None:
            self.tag = int(seed or 0)
        self.episode += 1
        self.agents = list(self.possible_agents)
        self.decisions = dict.fromkeys(self.agents, 0)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        i = self.possible_agents.index(agent)
        self.rewards[agent] = float(row_reward(self.tag, i, self.episode, self.decisions[agent]))
        self.decisions[agent] += 1
        if all(self.decisions[a] >= LENGTH for a in self.agents):
            self.terminations = dict.fromkeys(self.agents, True)
        self._accumulate_rewards()
        self.agent_selection = self._selector.next()


def check_rows(rows: dict, seed: int) -> dict[int, list[tuple[int, int]]]:
    """Check every row on its own (module doc); returns, per track, the (episode, t) of its rows in read order."""
    obs, nxt, reward = rows["obs"], rows["next_obs"], rows["reward"]
    tag, agent, episode, t = (obs[:, i].astype(np.int64) for i in range(4))
    assert (reward == row_reward(tag, agent, episode, t)).all(), "a torn row: its reward is not its observation's"
    assert (nxt[:, :3] == obs[:, :3]).all() and (nxt[:, 3] == obs[:, 3] + 1).all(), "a torn row: next_obs"
    cut = rows["truncated"].astype(bool)
    assert not (rows["terminated"] & cut).any(), "a row both terminated and truncated"
    assert (rows["terminated"] == ((t == LENGTH - 1) & ~cut)).all(), "a row's terminated flag is not its decision's"
    assert (rows["track"] == tag - seed).all(), "a row given to another actor or copy than the one that made it"
    tracks: dict[int, list[tuple[int, int]]] = {}
    for k, e, s in zip((tag - seed).tolist(), episode.tolist(), t.tolist()):
        tracks.setdefault(k, []).append((e, s))
    return tracks


def missing(steps: list[tuple[int, int]]) -> int:
    """How many of a track's rows are missing before its last one read; asserts none is read twice or out of
    order."""
    order = [e * LENGTH + s for e, s in steps]
    assert all(b > a for a, b in zip(order, order[1:])), "a row read twice, or out of its track's order"
    return order[-1] + 1 - len(order) if order else 0


def is_prefix(steps: list[tuple[int, int]]) -> bool:
    """Whether one track's rows (read order) are its first episodes' decisions, none missing or twice."""
    return steps == [(e, s) for e in range(len(steps) // LENGTH + 1) for s in range(LENGTH)][:len(steps)]
