"""pzasync.testing: the checks users run on their own envs and learners."""

from __future__ import annotations

import pytest
from scripted_env import ScriptedEnv

from pzasync.errors import RewardConservationError
from pzasync.testing import check_env, check_learner


def test_check_env_on_a_turn_based_env_with_masks():
    report = check_env("pettingzoo.classic.tictactoe_v3", agent_steps=500)
    assert report["agents"] == ["player_1", "player_2"] and report["transitions"] == 500
    assert report["layouts"]["player_1"].mask_shape == (9,)


def test_check_env_rejects_an_env_that_breaks_reward_bookkeeping():
    class NeverZeroes(ScriptedEnv):
        """Forgets to zero an agent's cumulative reward when it acts: last() then repeats old rewards."""

        def step(self, action):
            agent = self.agent_selection
            carried = self._cumulative_rewards.get(agent, 0.0)
            super().step(action)
            if action is not None and agent in self._cumulative_rewards:
                self._cumulative_rewards[agent] += carried

    with pytest.raises(RewardConservationError, match=r"episode 0, agent 'p0': the env paid .* Does the env zero"):
        check_env(lambda: NeverZeroes(), agent_steps=60, spawn=False)


def test_check_learner_runs_a_plugin_in_both_runners():
    results = check_learner(("custom_learners:RecordingLearner", {}), "pettingzoo.classic.connect_four_v3",
                            agent_steps=800)
    assert set(results) == {"sequential", "async"}
    assert all(r.agents["player_0"].updates > 0 for r in results.values())


def test_check_learner_reports_a_learner_that_never_updates():
    with pytest.raises(AssertionError, match=r"the learner of 'player_0' never updated in 200 steps"):
        check_learner(("custom_learners:RecordingLearner", {"batch_size": 10_000}),
                      "pettingzoo.classic.connect_four_v3", agent_steps=200)
