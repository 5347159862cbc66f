"""forage_v0: a turn-based (AEC) gridworld where foragers compete for regrowing food and starve mid-episode.

Rules
- `n_agents` foragers ("forager_0", ...) live on a `grid_size` x `grid_size` grid walled in on all sides. They act
  one at a time in index order, skipping the dead. A *cycle* is one turn of every forager alive at its start.
- Food regrows at the start of every cycle, before its first living forager acts (the first cycle starts at
  `reset`, later ones right after the previous cycle's last turn, so the first forager already observes the new
  food). Regrowth draws one uniform number per cell from the env's seeded `np_random`, in row-major order
  (row 0 left to right, then row 1, ...); a cell sprouts food if its draw is below `regrow_prob` and it holds
  neither food nor a living forager. The number of draws is fixed, so one seed fixes the whole trajectory.
- Actions: Discrete(5) = 0 stay, 1 up, 2 down, 3 left, 4 right. Moving into a wall or onto a living forager is
  illegal and masked out in `observation["action_mask"]` (stay is always legal); an illegal action taken anyway
  is played as stay.
- Every own turn, stay included, costs 1 energy. Stepping onto food eats it: reward +1 and `eat_energy` energy
  (capped at `max_energy`). At that same step every *other* living forager is paid -0.1, so foragers receive
  rewards on other foragers' turns (seen in their next `last()`).
- A forager whose energy reaches 0 on its own turn dies at that step: reward -1, terminated, gone from the grid.
  The others play on. A dead forager stays in `agents` until the cycle ends, then is removed by `_was_dead_step`
  (PettingZoo's `aec_to_parallel` needs agents to leave at cycle boundaries). The episode terminates once no
  forager is alive; after `max_cycles` cycles every forager still alive is truncated.
- Observation "observation": a 5x5 window centred on the forager with three channels (food, other living
  foragers, wall/outside), flattened channel-major, then energy / `max_energy`: 76 float32 values in [0, 1].
- `reset(seed, options)` accepts options {"positions": [(r, c), ...] one per forager, "food": [(r, c), ...],
  "energy": int or list} to set up a layout exactly (used by the tests); omitted keys are random/default.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import aec_to_parallel

MOVES = np.array([(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)])
VIEW = 2
OBS_SIZE = 3 * (2 * VIEW + 1) ** 2 + 1


class raw_env(AECEnv):
    metadata = {"name": "forage_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, n_agents: int = 3, grid_size: int = 7, max_cycles: int = 100, regrow_prob: float = 0.1,
                 start_energy: int = 6, eat_energy: int = 5, max_energy: int = 10, food_density: float = 0.15,
                 render_mode: str | None = None) -> None:
        super().__init__()
        if not 2 <= n_agents <= 8:
            raise ValueError(f"n_agents must be in 2..8, got {n_agents}")
        if grid_size < 3 or n_agents > grid_size * grid_size // 2:
            raise ValueError(f"{n_agents} foragers do not fit a {grid_size}x{grid_size} grid")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.n, self.size, self.max_cycles = n_agents, grid_size, max_cycles
        self.regrow_prob, self.food_density = regrow_prob, food_density
        self.start_energy, self.eat_energy, self.max_energy = start_energy, eat_energy, max_energy
        self.render_mode = render_mode
        self.possible_agents = [f"forager_{i}" for i in range(n_agents)]
        obs = spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self.observation_spaces = {
            a: spaces.Dict({"observation": obs, "action_mask": spaces.Box(0, 1, (5,), np.int8)})
            for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(5) for a in self.possible_agents}
        self.np_random, _ = seeding.np_random(None)

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        options = options or {}
        self.agents = list(self.possible_agents)
        if "positions" in options:
            cells = [tuple(int(x) for x in p) for p in options["positions"]]
        else:
            cells = [divmod(int(c), self.size) for c in self.np_random.permutation(self.size ** 2)[: self.n]]
        self.pos = {a: np.array(c) for a, c in zip(self.agents, cells)}
        if "food" in options:
            self.food = np.zeros((self.size, self.size), bool)
            for r, c in options["food"]:
                self.food[r, c] = True
        else:
            self.food = self.np_random.random((self.size, self.size)) < self.food_density
        energy = options.get("energy", self.start_energy)
        energies = energy if isinstance(energy, (list, tuple)) else [energy] * self.n
        self.energy = {a: int(e) for a, e in zip(self.agents, energies)}
        self.alive = list(self.agents)
        for p in self.pos.values():
            self.food[tuple(p)] = False
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._skip_agent_selection = None
        self.cycle = 0
        self._regrow()
        self.agent_selection = self.agents[0]

    def _occupied(self, cell: np.ndarray) -> bool:
        return any((self.pos[a] == cell).all() for a in self.alive)

    def _mask(self, agent: str) -> np.ndarray:
        mask = np.zeros(5, np.int8)
        mask[0] = 1
        for i in range(1, 5):
            cell = self.pos[agent] + MOVES[i]
            inside = bool((cell >= 0).all() and (cell < self.size).all())
            mask[i] = int(inside and not self._occupied(cell))
        return mask

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        window = np.zeros((3, 2 * VIEW + 1, 2 * VIEW + 1), np.float32)
        r0, c0 = self.pos[agent]
        for dr in range(-VIEW, VIEW + 1):
            for dc in range(-VIEW, VIEW + 1):
                r, c = r0 + dr, c0 + dc
                if not (0 <= r < self.size and 0 <= c < self.size):
                    window[2, dr + VIEW, dc + VIEW] = 1.0
                elif self.food[r, c]:
                    window[0, dr + VIEW, dc + VIEW] = 1.0
        for other in self.alive:
            dr, dc = self.pos[other] - self.pos[agent]
            if other != agent and abs(dr) <= VIEW and abs(dc) <= VIEW:
                window[1, dr + VIEW, dc + VIEW] = 1.0
        energy = np.array([min(max(self.energy[agent], 0), self.max_energy) / self.max_energy], np.float32)
        return {"observation": np.concatenate([window.ravel(), energy]), "action_mask": self._mask(agent)}

    def _regrow(self) -> None:
        sprout = self.np_random.random((self.size, self.size)) < self.regrow_prob
        for a in self.alive:
            sprout[tuple(self.pos[a])] = False
        self.food |= sprout

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._clear_rewards()
        self._cumulative_rewards[agent] = 0.0
        action = int(action)
        if self._mask(agent)[action]:
            self.pos[agent] = self.pos[agent] + MOVES[action]
        self.energy[agent] -= 1
        cell = tuple(self.pos[agent])
        if self.food[cell]:
            self.food[cell] = False
            self.rewards[agent] += 1.0
            self.energy[agent] = min(self.max_energy, self.energy[agent] + self.eat_energy)
            for other in self.alive:
                if other != agent:
                    self.rewards[other] -= 0.1
        if self.energy[agent] <= 0:
            self.rewards[agent] -= 1.0
            self.terminations[agent] = True
            self.alive.remove(agent)
        self._advance(agent)
        self._accumulate_rewards()

    def _advance(self, agent: str) -> None:
        index = self.possible_agents.index
        later = [a for a in self.alive if index(a) > index(agent)]
        if later:
            self.agent_selection = later[0]
            return
        self.cycle += 1
        if self.cycle >= self.max_cycles:
            for a in self.alive:
                self.truncations[a] = True
        else:
            self._regrow()
        self.agent_selection = self.alive[0] if self.alive else agent
        self._deads_step_first()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        grid = [["*" if f else "." for f in row] for row in self.food]
        for a in self.alive:
            r, c = self.pos[a]
            grid[r][c] = a.rsplit("_", 1)[1]
        wall = "#" * (self.size + 2)
        return "\n".join([wall, *("#" + "".join(row) + "#" for row in grid), wall])

    def close(self) -> None:
        pass


def env(**kwargs: Any) -> AECEnv:
    """The AEC env, wrapped as PettingZoo recommends (action bounds asserted, call order enforced)."""
    return wrappers.OrderEnforcingWrapper(wrappers.AssertOutOfBoundsWrapper(raw_env(**kwargs)))


def parallel_env(**kwargs: Any) -> ParallelEnv:
    """The same game through PettingZoo's aec_to_parallel conversion (one call = one cycle)."""
    return aec_to_parallel(env(**kwargs))
