"""envs/forage.py: PettingZoo's own checks, plus the rules the runtime tests rely on."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, max_cycles_test, parallel_api_test, seed_test

import pzasync
from pzasync.envs import forage


def test_pettingzoo_api_seed_and_max_cycles_checks():
    api_test(forage.env(), num_cycles=300)
    seed_test(forage.env)
    max_cycles_test(forage)
    parallel_api_test(forage.parallel_env(), num_cycles=300)


def test_eating_pays_the_other_foragers_on_the_eaters_turn():
    env = forage.raw_env(n_agents=3)
    env.reset(seed=0)
    env.pos = {"forager_0": np.array([3, 3]), "forager_1": np.array([0, 0]), "forager_2": np.array([6, 6])}
    env.food[:] = False
    env.food[2, 3] = True
    env.step(1)  # forager_0 moves up onto the food
    assert env.agent_selection == "forager_1"
    assert env.last()[1] == pytest.approx(-0.1), "paid on forager_0's turn, seen at forager_1's"
    assert env._cumulative_rewards["forager_2"] == pytest.approx(-0.1)
    assert env._cumulative_rewards["forager_0"] == 1.0 and env.energy["forager_0"] == 8 - 1 + 5


def test_food_regrows_only_when_a_cycle_starts():
    env = forage.raw_env(n_agents=3, regrow_prob=0.3)
    env.reset(seed=4)
    changes = []
    for _ in range(12):  # four cycles of three foragers who stay put
        before = env.food.copy()
        last_of_cycle = env.agent_selection == "forager_2"
        env.step(0)
        if (env.food != before).any():
            changes.append(last_of_cycle)
    assert changes and all(changes), "regrowth happens right after the cycle's last forager acted"


def test_same_seed_same_regrowth():
    grids = []
    for _ in range(2):
        env = forage.raw_env(regrow_prob=0.3)
        env.reset(seed=11)
        for _ in range(15):
            env.step(0)
        grids.append(env.food.copy())
    assert (grids[0] == grids[1]).all()


def test_foragers_die_mid_episode_while_others_play_on():
    rng = np.random.default_rng(0)
    out = pzasync.rollout("pzasync.envs.forage", lambda a, o, m: int(rng.choice(np.flatnonzero(m))),
                          agent_steps=5000, seed=0)
    ends = {a: [("terminated" if t else "truncated") for t, u in zip(v["terminated"], v["truncated"]) if t or u]
            for a, v in out.items()}
    n = min(len(e) for e in ends.values())
    mixed = [k for k in range(n) if len({ends[a][k] for a in ends}) == 2]
    assert mixed, "some episode had a forager starve while another lived to the end"
    starving = pzasync.rollout("pzasync.envs.forage", lambda a, o, m: 0, agent_steps=24, seed=0)
    assert all(v["terminated"][-1] and v["reward"][-1] == -1.0 for v in starving.values()), \
        "foragers who never move starve after start_energy cycles"
