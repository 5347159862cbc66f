"""envs/recall.py (recall_v0): PettingZoo's own checks plus the game's rules, chance level and oracle score."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test, state_test

from pzasync.envs import recall

# A policy for one episode: called with (agent, observation) on each of the agent's live turns.
Policy = Callable[[str, np.ndarray], int]


def _play(env, policy: Policy) -> tuple[dict[str, float], dict[str, list[np.ndarray]], int]:
    """Returns each agent's return, the observations it acted on, and the number of live steps."""
    returns = dict.fromkeys(env.possible_agents, 0.0)
    seen: dict[str, list[np.ndarray]] = {a: [] for a in env.possible_agents}
    live_steps = 0
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        returns[agent] += reward
        if terminated or truncated:
            env.step(None)
            continue
        seen[agent].append(obs)
        live_steps += 1
        env.step(policy(agent, obs))
    return returns, seen, live_steps


def _oracle(n_cues: int) -> Policy:
    """Remembers the one-hot of its first observation and answers with it."""
    memory: dict[str, int] = {}

    def policy(agent: str, obs: np.ndarray) -> int:
        if agent not in memory:
            memory[agent] = int(np.argmax(obs[:n_cues]))
        return memory[agent]
    return policy


def test_api():
    api_test(recall.env(), num_cycles=200)
    api_test(recall.env(n_agents=4, n_cues=5, delay=2), num_cycles=200)


def test_seed():
    seed_test(recall.env)
    parallel_seed_test(recall.parallel_env)


def test_parallel_api():
    parallel_api_test(recall.parallel_env(), num_cycles=200)


def test_state():
    state_test(recall.env(), recall.parallel_env())


def test_rejects_bad_arguments():
    for kwargs in ({"n_agents": 0}, {"n_cues": 1}, {"delay": 0}, {"render_mode": "human"}):
        with pytest.raises(ValueError):
            recall.raw_env(**kwargs)
    with pytest.raises(ValueError, match="cues"):
        recall.env().reset(options={"cues": [0, 2]})


def test_spaces_and_render():
    env = recall.env(n_agents=3, n_cues=4, delay=2, render_mode="ansi")
    env.reset(seed=0, options={"cues": [3, 0, 2]})
    for agent in env.possible_agents:
        assert env.observation_space(agent) == spaces.Box(0.0, 1.0, (6,), np.float32)
        assert env.action_space(agent) == spaces.Discrete(4)
    assert env.unwrapped.state_space.shape == (3 * 4 + 1,)
    assert env.render() == "cycle 0/2 | agent_0: cue 3 answer -, agent_1: cue 0 answer -, agent_2: cue 2 answer -"
    _play(env, lambda agent, obs: 1)
    assert env.render().startswith("cycle 2/2 | agent_0: cue 3 answer 1,")


def test_seeded_cues_are_one_integers_draw():
    env = recall.env(n_agents=5, n_cues=3)
    env.reset(seed=11)
    expected = np.random.Generator(np.random.PCG64(11)).integers(3, size=5)
    assert [env.unwrapped.cues[a] for a in env.possible_agents] == expected.tolist()
    cues = set()
    for seed in range(30):
        env.reset(seed=seed)
        first = [env.unwrapped.cues[a] for a in env.possible_agents]
        env.reset(seed=seed)
        assert [env.unwrapped.cues[a] for a in env.possible_agents] == first
        cues.update(first)
    assert cues == {0, 1, 2}


def test_the_cue_shows_on_the_first_turn_only_and_the_flag_on_the_answer_turn_only():
    n_cues, delay = 3, 4
    env = recall.env(n_agents=3, n_cues=n_cues, delay=delay)
    env.reset(seed=0, options={"cues": [2, 0, 1]})
    _, seen, live_steps = _play(env, lambda agent, obs: 0)
    blank = np.array([0, 0, 0, 0, 1], np.float32)
    answer = np.array([0, 0, 0, 1, 1], np.float32)
    for agent, cue in zip(env.possible_agents, [2, 0, 1]):
        obs = seen[agent]
        assert len(obs) == delay + 1, "one turn per cycle, delay + 1 cycles"
        assert obs[0].tolist() == [float(i == cue) for i in range(n_cues)] + [0.0, 1.0]
        assert all((o == blank).all() for o in obs[1:delay])
        assert (obs[delay] == answer).all()
        assert all(o.dtype == np.float32 for o in obs)
    assert live_steps == 3 * (delay + 1)


def test_observations_never_reveal_another_agents_cue():
    """Changing agent_0's cue (and the actions that follow from it) changes nothing that agent_1 observes."""
    traces = []
    for cue_0 in range(3):
        env = recall.env(n_agents=2, n_cues=3, delay=3)
        env.reset(seed=0, options={"cues": [cue_0, 1]})
        _, seen, _ = _play(env, _oracle(3))
        traces.append(seen["agent_1"])
    assert all(all((a == b).all() for a, b in zip(traces[0], t)) for t in traces[1:])


def test_a_memoryless_policy_sees_the_same_answer_turn_whatever_the_cue():
    """What makes chance level exact: every observation after the first is independent of the cue."""
    later = set()
    for cue in range(4):
        env = recall.env(n_agents=1, n_cues=4, delay=3)
        env.reset(seed=0, options={"cues": [cue]})
        _, seen, _ = _play(env, lambda agent, obs: 0)
        later.add(tuple(np.concatenate(seen["agent_0"][1:]).tolist()))
    assert len(later) == 1


def test_rewards_only_on_the_answer_and_paid_at_the_agents_own_step():
    env = recall.env(n_agents=2, n_cues=2, delay=2)
    env.reset(seed=0, options={"cues": [1, 0]})
    raw = env.unwrapped
    for _ in range(2 * 2):
        env.step(1)
        assert all(r == 0.0 for r in raw.rewards.values())
        assert not any(raw.terminations.values())
    env.step(1)  # agent_0 answers 1, its cue: +1 at its own step
    assert raw.rewards == {"agent_0": 1.0, "agent_1": 0.0} and not any(raw.terminations.values())
    assert env.agent_selection == "agent_1" and env.last()[1] == 0.0
    env.step(1)  # agent_1 answers 1, its cue is 0: nothing, and the episode is over
    assert all(raw.terminations.values()) and not any(raw.truncations.values())
    assert env.agent_selection == "agent_0" and env.last()[1:3] == (1.0, True)
    env.step(None)
    assert env.agent_selection == "agent_1" and env.last()[1:3] == (0.0, True)
    env.step(None)
    assert env.agents == []


def test_an_oracle_that_remembers_the_cue_always_scores_one():
    for n_agents, n_cues, delay in [(2, 2, 4), (3, 5, 1), (4, 3, 8)]:
        env = recall.env(n_agents=n_agents, n_cues=n_cues, delay=delay)
        for seed in range(20):
            env.reset(seed=seed)
            returns, _, _ = _play(env, _oracle(n_cues))
            assert returns == dict.fromkeys(env.possible_agents, 1.0)


@pytest.mark.parametrize("n_cues", [2, 3, 5])
def test_a_fixed_answer_scores_chance(n_cues):
    """Over many seeds a fixed answer is right 1 / n_cues of the time (4 binomial standard deviations)."""
    env = recall.env(n_agents=2, n_cues=n_cues, delay=1)
    episodes = 1000
    total = 0.0
    for seed in range(episodes):
        env.reset(seed=seed)
        returns, _, _ = _play(env, lambda agent, obs: n_cues - 1)
        assert set(returns.values()) <= {0.0, 1.0}
        total += sum(returns.values())
    n, p = 2 * episodes, 1 / n_cues
    assert abs(total / n - p) <= 4 * math.sqrt(p * (1 - p) / n)


def test_state_holds_every_cue_and_the_normalised_cycle():
    n_agents, n_cues, delay = 3, 4, 2
    env = recall.env(n_agents=n_agents, n_cues=n_cues, delay=delay)
    env.reset(seed=0, options={"cues": [3, 0, 2]})
    raw = env.unwrapped
    cues = np.zeros(n_agents * n_cues, np.float32)
    cues[[0 * n_cues + 3, 1 * n_cues + 0, 2 * n_cues + 2]] = 1.0
    expected_cycles = []
    seen_cycles = []
    for step in range(n_agents * (delay + 1)):
        state = raw.state()
        assert state.dtype == np.float32 and raw.state_space.contains(state)
        assert (state[:-1] == cues).all()
        seen_cycles.append(float(state[-1]))
        expected_cycles.append((step // n_agents) / (delay + 1))
        env.step(0)
    assert seen_cycles == pytest.approx(expected_cycles)
    assert raw.state()[-1] == 1.0 and raw.state_space.contains(raw.state())
    assert recall.parallel_env(n_agents=n_agents, n_cues=n_cues, delay=delay).state_space == raw.state_space


def test_parallel_episode_is_delay_plus_one_steps():
    par = recall.parallel_env(n_agents=3, n_cues=2, delay=4)
    observations, _ = par.reset(seed=5)
    cues = {a: int(np.argmax(observations[a][:2])) for a in par.agents}
    for cycle in range(4 + 1):
        assert par.agents == ["agent_0", "agent_1", "agent_2"]
        observations, rewards, terminations, truncations, _ = par.step(dict(cues))
        assert all(o[:2].sum() == 0 for o in observations.values()), "the cue is gone after the first cycle"
        done = cycle == 4
        assert rewards == dict.fromkeys(rewards, 1.0 if done else 0.0)
        assert terminations == dict.fromkeys(terminations, done) and not any(truncations.values())
    assert par.agents == []
