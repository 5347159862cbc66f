"""Image observations an env draws only when it renders (core/drawn_observations.py): such an env is made with
render_mode="rgb_array" by the run's plan, and every other env is left as the user gave it."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from pzasync.config import RunConfig
from pzasync.core.drawn_observations import RENDER_MODE, drawn, observations_change
from pzasync.core.environments import EnvSpec
from pzasync.runtime.plan import RunPlan


class Screen(ParallelEnv):
    """Two agents observing a 6x6 RGB screen that shows the step count, drawn only with a render mode (as
    pistonball_v6 draws its frames); `vector=True` observes the count as a number instead."""

    metadata = {"name": "screen"}
    possible_agents = ["a", "b"]

    def __init__(self, render_mode=None, vector=False, always_drawn=False):
        self.render_mode, self.vector, self.always_drawn = render_mode, vector, always_drawn
        self.screen = np.zeros((6, 6, 3), np.uint8)

    def observation_space(self, agent):
        return (spaces.Box(0, 255, (1,), np.float32) if self.vector
                else spaces.Box(0, 255, (6, 6, 3), np.uint8))

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _observe(self):
        if self.vector:
            return {a: np.array([self.t], np.float32) for a in self.agents}
        return {a: self.screen.copy() for a in self.agents}

    def _draw(self):
        if self.render_mode is not None or self.always_drawn:
            self.screen[:] = self.t

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        self._draw()
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        self._draw()
        done = self.t >= 20
        return (self._observe(), dict.fromkeys(self.agents, 0.0), dict.fromkeys(self.agents, False),
                dict.fromkeys(self.agents, done), {a: {} for a in self.agents})


def screen_env(**kwargs):
    return parallel_to_aec(Screen(**kwargs))


def test_an_env_that_draws_only_when_it_renders_is_made_with_a_render_mode():
    spec, note = drawn(EnvSpec.of(screen_env))
    assert spec.kwargs == {"render_mode": RENDER_MODE} and "stay the same frame" in note
    assert observations_change(spec) is True


@pytest.mark.parametrize("kwargs, why", [
    ({"always_drawn": True}, "its frames change without a render mode"),
    ({"vector": True}, "no image observation"),
    ({"render_mode": None}, "the user chose the render mode"),
])
def test_other_envs_are_left_as_given(kwargs, why):
    spec = EnvSpec.of(screen_env, **kwargs)
    assert drawn(spec) == (spec, None), why


def test_the_plan_makes_every_copy_with_it_and_says_so():
    plan = RunPlan(EnvSpec.of(screen_env), "random", RunConfig(envs_per_actor=2))
    assert plan.env_spec.kwargs["render_mode"] == RENDER_MODE and "render_mode" in plan.auto
    env = plan.env_spec.make()
    try:
        env.reset(seed=0)
        first = np.asarray(env.observe("a")).copy()
        env.step(0)
        env.step(1)
        assert not np.array_equal(first, env.observe("a")), "the copies see their frames change"
    finally:
        env.close()


def test_pettingzoos_cooperative_pong_is_one_of_them():
    """PettingZoo 1.27's cooperative_pong_v6 (and pistonball_v6) draw nothing without a render mode."""
    spec, note = drawn(EnvSpec.of("pettingzoo.butterfly.cooperative_pong_v6"))
    assert spec.kwargs.get("render_mode") == RENDER_MODE and note
    assert observations_change(EnvSpec.of("pettingzoo.butterfly.cooperative_pong_v6")) is False
