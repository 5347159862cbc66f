"""The parallel API of an AEC-native env (PettingZoo's `aec_to_parallel`) observes each agent once a cycle, and
gives exactly what the env's own `parallel_env()` gives (pzasync/core/observed_once.py)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import aec_to_parallel_wrapper
from pettingzoo.utils.wrappers import BaseWrapper

from pzasync.core.environments import EnvSpec, make_parallel_env
from pzasync.core.observed_once import LastWithoutObservation, observed_once

#: AEC-native envs whose `parallel_env()` is PettingZoo's conversion, with short episodes so that the cycles
#: compared cross resets, truncations and (knights_archers_zombies) agents that die.
ENVS = [
    ("pettingzoo.butterfly.knights_archers_zombies_v11", {"max_cycles": 40}),
    ("mpe2.simple_spread_v3", {"max_cycles": 20}),
    ("pettingzoo.sisl.multiwalker_v9", {"max_cycles": 30}),
    ("pettingzoo.sisl.pursuit_v5", {"max_cycles": 30}),
]


def same(a, b) -> bool:
    """Equal values, arrays compared element by element, through dicts, lists and tuples."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("env_id,kwargs", ENVS, ids=[e.rsplit(".", 1)[-1] for e, _ in ENVS])
def test_the_same_cycles_as_the_envs_own_parallel_api(env_id: str, kwargs: dict) -> None:
    ours = make_parallel_env(env_id, **kwargs)
    theirs = importlib.import_module(env_id).parallel_env(**kwargs)
    assert isinstance(ours.aec_env, LastWithoutObservation) and not isinstance(theirs.aec_env, LastWithoutObservation)
    rng = np.random.default_rng(7)
    resets = 0
    for episode in range(3):
        assert same(ours.reset(seed=episode), theirs.reset(seed=episode))
        resets += 1
        while theirs.agents:
            assert ours.agents == theirs.agents
            actions = {}
            for a in theirs.agents:  # the same draw for both, from the test's own generator
                space = theirs.action_space(a)
                actions[a] = (int(rng.integers(space.n)) if hasattr(space, "n")
                              else rng.uniform(space.low, space.high).astype(space.dtype))
            assert same(ours.step(actions), theirs.step(actions)), f"{env_id}: cycles differ"
        assert not ours.agents
    assert resets == 3
    ours.close()
    theirs.close()


class CountingObserve(BaseWrapper):
    """Counts the observations its env computes."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.observed = 0

    def observe(self, agent):
        self.observed += 1
        return super().observe(agent)


def test_each_observation_is_computed_once_a_cycle() -> None:
    from pettingzoo.butterfly import knights_archers_zombies_v11

    def factory():
        return aec_to_parallel_wrapper(CountingObserve(knights_archers_zombies_v11.env(max_cycles=20)))

    env = make_parallel_env(factory)
    counter = env.aec_env.env
    assert isinstance(counter, CountingObserve)
    env.reset(seed=0)
    cycles, moves = 0, 0
    counter.observed = 0
    while env.agents:
        moves += len(env.agents)
        env.step(dict.fromkeys(env.agents, 0))
        cycles += 1
    # Once per agent that moved in a cycle (the conversion's observations at the cycle's end); PettingZoo's
    # conversion alone computes each twice (its step's last() before every agent's move as well).
    assert counter.observed == moves and cycles == 20
    env.close()


def test_the_same_cycles_through_supersuit_wrappers() -> None:
    """SuperSuit's observation lambdas convert a parallel env to AEC and back: the run's wrapped parallel env
    (`EnvSpec.make_parallel`, pistonball with the frames of its recipe) gives what SuperSuit's own wrapping gives."""
    import supersuit
    from pettingzoo.butterfly import pistonball_v6

    from pzasync.recipes.registry import IMAGE_WRAPPERS

    kwargs = {"max_cycles": 12, "render_mode": "rgb_array"}
    ours = EnvSpec.of("pettingzoo.butterfly.pistonball_v6", wrappers=IMAGE_WRAPPERS, **kwargs).make_parallel()
    theirs = pistonball_v6.parallel_env(**kwargs)
    theirs = supersuit.color_reduction_v0(theirs, mode="full")
    theirs = supersuit.frame_stack_v1(supersuit.resize_v1(theirs, x_size=64, y_size=64), stack_size=3)
    layers, env = 0, ours
    while env is not None:  # every conversion under the wrappers observes once
        if isinstance(env, aec_to_parallel_wrapper):
            assert isinstance(env.aec_env, LastWithoutObservation)
            layers += 1
        env = vars(env).get("aec_env") or vars(env).get("env")  # not getattr: wrappers forward attributes
    assert layers == 1  # SuperSuit unwraps the conversions between its wrappers: one is left, observing once
    rng = np.random.default_rng(3)
    for episode in range(2):
        assert same(ours.reset(seed=episode), theirs.reset(seed=episode))
        while theirs.agents:
            actions = {a: rng.uniform(-1, 1, size=(1,)).astype(np.float32) for a in theirs.agents}
            assert same(ours.step(actions), theirs.step(actions))
    ours.close()
    theirs.close()


def test_other_parallel_envs_are_left_as_they_are() -> None:
    class Native(ParallelEnv):  # a parallel env of its own, as MAgent2's are
        possible_agents = ["a"]

    native = Native()
    assert observed_once(native) is native
    once = make_parallel_env("mpe2.simple_spread_v3")
    assert observed_once(once) is once  # converted once, not twice
    once.close()
