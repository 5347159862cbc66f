"""envs/forage.py (forage_v0): PettingZoo's own checks plus the game's rules."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from pettingzoo.test import api_test, max_cycles_test, parallel_api_test, seed_test

from pzasync.envs import forage


def test_api():
    api_test(forage.env(), num_cycles=200)


def test_seed():
    seed_test(forage.env)


def test_max_cycles():
    max_cycles_test(forage)


def test_parallel_api():
    parallel_api_test(forage.parallel_env(), num_cycles=200)


def test_spaces_render_and_masks():
    env = forage.env(render_mode="ansi")
    env.reset(seed=0, options={"positions": [(0, 0), (0, 1), (3, 3)], "food": []})
    obs = env.observe("forager_0")
    assert obs["observation"].shape == (76,) and obs["observation"].dtype == np.float32
    assert env.observation_space("forager_0").contains(obs)
    assert obs["action_mask"].tolist() == [1, 0, 1, 0, 0], "wall up and left, forager_1 to the right"
    text = env.render()
    assert text.splitlines()[1].startswith("#01") and len(text.splitlines()) == 9


def test_staying_foragers_starve_one_by_one_before_max_cycles():
    env = forage.env(max_cycles=100)
    env.reset(seed=3)
    death_steps = {}
    for t, agent in enumerate(env.agent_iter()):
        if any(env.last()[2:4]):
            env.step(None)
            continue
        env.step(0)
        if env.unwrapped.terminations[agent]:
            death_steps[agent] = t
            if agent == "forager_0":
                assert env.unwrapped.alive == ["forager_1", "forager_2"], "the others play on"
    raw = env.unwrapped
    assert raw.cycle == 6 < raw.max_cycles, "each turn costs 1 of the 6 start energy, staying included"
    assert sorted(death_steps) == raw.possible_agents
    assert death_steps["forager_0"] < death_steps["forager_1"] < death_steps["forager_2"]


def test_death_pays_minus_one_and_removal_waits_for_the_cycle_end():
    env = forage.env()
    env.reset(seed=0, options={"positions": [(0, 0), (3, 3), (6, 6)], "food": [], "energy": [1, 5, 5]})
    env.step(0)
    raw = env.unwrapped
    assert raw.terminations["forager_0"] and raw._cumulative_rewards["forager_0"] == -1.0
    assert env.agent_selection == "forager_1" and "forager_0" in env.agents
    env.step(0)
    env.step(0)
    assert env.agent_selection == "forager_0"
    assert env.last()[1:3] == (-1.0, True)
    env.step(None)
    assert env.agents == ["forager_1", "forager_2"] and env.agent_selection == "forager_1"


def test_eating_pays_the_others_on_the_eaters_turn():
    env = forage.env(regrow_prob=0.0)
    env.reset(seed=0, options={"positions": [(3, 3), (0, 0), (6, 6)], "food": [(2, 3)]})
    env.step(1)
    raw = env.unwrapped
    assert raw.energy["forager_0"] == 6 - 1 + 5 and not raw.food[2, 3]
    assert env.agent_selection == "forager_1"
    assert env.last()[1] == pytest.approx(-0.1), "paid at forager_0's step, seen in forager_1's last()"
    env.step(0)
    assert env.last()[1] == pytest.approx(-0.1), "forager_2 was paid too"
    env.step(0)
    assert env.last()[1] == pytest.approx(1.0), "forager_0's own reward"


def _food_trace(seed: int) -> list[np.ndarray]:
    env = forage.env(regrow_prob=0.2, max_cycles=8)
    env.reset(seed=seed)
    trace = []
    for _ in env.agent_iter():
        env.step(None if any(env.last()[2:4]) else 0)
        trace.append(env.unwrapped.food.copy())
    return trace


def test_regrowth_happens_only_at_cycle_start_in_row_major_order():
    env = forage.env(regrow_prob=0.3, max_cycles=50)
    env.reset(seed=4)
    raw = env.unwrapped
    for _ in range(12):
        before = raw.food.copy()
        ends_cycle = env.agent_selection == raw.alive[-1]
        rng = copy.deepcopy(raw.np_random)
        env.step(0)
        if not ends_cycle:
            assert (raw.food == before).all(), "no regrowth mid-cycle"
            continue
        expected = before | (rng.random(before.shape) < 0.3)
        for a in raw.alive:
            expected[tuple(raw.pos[a])] = False
        assert (raw.food == expected).all(), "one draw per cell, row-major, applied to empty free cells"
    a, b = _food_trace(7), _food_trace(7)
    assert len(a) == len(b) and all((x == y).all() for x, y in zip(a, b))
    assert any((x != y).any() for x, y in zip(a, _food_trace(8)))
