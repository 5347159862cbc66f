"""forage_v0: a turn-based gridworld where agents compete for regrowing food and starve mid-episode.

Rules
- `n_agents` foragers on a `grid_size` square grid act one at a time, in index order, skipping the dead.
- A *cycle* is one turn of every living forager. At the start of each cycle, before its first forager acts,
  food regrows: empty cells are visited in row-major order and each sprouts food with probability
  `regrow_prob` (drawn from the env's seeded generator, so one seed fixes everything).
- Actions: 0 stay, 1 up, 2 down, 3 left, 4 right. Moving off the grid or onto another forager is illegal
  (masked out in `observation["action_mask"]`; if taken anyway, the forager stays).
- Every turn costs 1 energy. Stepping onto food eats it: +1 reward and `eat_energy` energy (capped at
  `max_energy`); every *other* living forager is paid -0.1 at that moment (a reward on another agent's turn).
- A forager whose energy reaches 0 dies when the cycle ends: reward -1, terminated, removed at its next turn,
  while the others play on. After `max_cycles` cycles every living forager is truncated. (Deaths wait for
  the cycle's end so that PettingZoo's aec_to_parallel conversion, which requires it, works.)
- Observation: a 5x5 window around the forager with three channels (food, other foragers, outside the grid),
  flattened, plus its energy / `max_energy`: 76 floats in [0, 1].
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import aec_to_parallel

MOVES = np.array([(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)])
VIEW = 2  # window radius


class raw_env(AECEnv):
    metadata = {"name": "forage_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, n_agents: int = 3, grid_size: int = 7, max_cycles: int = 100, regrow_prob: float = 0.05,
                 start_energy: int = 8, eat_energy: int = 5, max_energy: int = 12, food_density: float = 0.25,
                 render_mode: str | None = None) -> None:
        super().__init__()
        if not 1 <= n_agents <= grid_size * grid_size // 2:
            raise ValueError(f"n_agents={n_agents} does not fit a {grid_size}x{grid_size} grid")
        self.n, self.size, self.max_cycles = n_agents, grid_size, max_cycles
        self.regrow_prob, self.food_density = regrow_prob, food_density
        self.start_energy, self.eat_energy, self.max_energy = start_energy, eat_energy, max_energy
        self.render_mode = render_mode
        self.possible_agents = [f"forager_{i}" for i in range(n_agents)]
        obs = spaces.Box(0.0, 1.0, (3 * (2 * VIEW + 1) ** 2 + 1,), np.float32)
        self.observation_spaces = {a: spaces.Dict({"observation": obs, "action_mask": spaces.Box(0, 1, (5,), np.int8)})
                                   for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(5) for a in self.possible_agents}
        self.np_random, _ = seeding.np_random(None)

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    # ------------------------------------------------------------------------------------------ state
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        self.agents = list(self.possible_agents)
        cells = self.np_random.permutation(self.size * self.size)[: self.n]
        self.pos = {a: np.array(divmod(int(c), self.size)) for a, c in zip(self.agents, cells)}
        self.food = self.np_random.random((self.size, self.size)) < self.food_density
        for p in self.pos.values():
            self.food[tuple(p)] = False
        self.energy = dict.fromkeys(self.agents, self.start_energy)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.cycle = 0
        self.agent_selection = self.agents[0]

    def _occupied(self, cell: np.ndarray, but: str) -> bool:
        return any(a != but and not self.terminations[a] and (p == cell).all() for a, p in self.pos.items()
                   if a in self.terminations)

    def _mask(self, agent: str) -> np.ndarray:
        mask = np.zeros(5, np.int8)
        mask[0] = 1
        for i, move in enumerate(MOVES[1:], start=1):
            cell = self.pos[agent] + move
            inside = (0 <= cell).all() and (cell < self.size).all()
            mask[i] = int(inside and not self._occupied(cell, agent))
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
        for other, p in self.pos.items():
            if other != agent and other in self.terminations and not self.terminations[other]:
                dr, dc = p[0] - r0, p[1] - c0
                if abs(dr) <= VIEW and abs(dc) <= VIEW:
                    window[1, dr + VIEW, dc + VIEW] = 1.0
        energy = np.array([self.energy.get(agent, 0) / self.max_energy], np.float32)
        return {"observation": np.concatenate([window.ravel(), energy]), "action_mask": self._mask(agent)}

    # ------------------------------------------------------------------------------------------ dynamics
    def _regrow(self) -> None:
        occupied = {tuple(p) for a, p in self.pos.items() if a in self.terminations and not self.terminations[a]}
        for r in range(self.size):
            for c in range(self.size):
                if not self.food[r, c] and (r, c) not in occupied and self.np_random.random() < self.regrow_prob:
                    self.food[r, c] = True

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
            for other in self.agents:
                if other != agent and not self.terminations[other]:
                    self.rewards[other] -= 0.1
        self._next_turn(agent)
        self._accumulate_rewards()
        self._deads_step_first()

    def _next_turn(self, agent: str) -> None:
        living = [a for a in self.agents if not (self.terminations[a] or self.truncations[a])]
        order = self.possible_agents
        later = [a for a in living if order.index(a) > order.index(agent)]
        if later:
            self.agent_selection = later[0]
            return
        # Every living forager has acted: the cycle ends. Starved foragers die now (at a cycle boundary, so the
        # env converts to the parallel API), then a new cycle starts with regrowth.
        self.cycle += 1
        for a in living:
            if self.energy[a] <= 0:
                self.rewards[a] -= 1.0
                self.terminations[a] = True
        living = [a for a in living if not self.terminations[a]]
        if self.cycle >= self.max_cycles:
            for a in living:
                self.truncations[a] = True
        else:
            self._regrow()
        self.agent_selection = living[0] if living else agent

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        grid = [["*" if f else "." for f in row] for row in self.food]
        for a, (r, c) in self.pos.items():
            if a in self.terminations and not self.terminations[a]:
                grid[r][c] = a.rsplit("_", 1)[1]
        return "\n".join("".join(row) for row in grid)

    def close(self) -> None:
        pass


def env(**kwargs: Any) -> AECEnv:
    """The AEC env, wrapped as PettingZoo recommends (action bounds asserted, call order enforced)."""
    return wrappers.OrderEnforcingWrapper(wrappers.AssertOutOfBoundsWrapper(raw_env(**kwargs)))


def parallel_env(**kwargs: Any) -> Any:
    return aec_to_parallel(env(**kwargs))
