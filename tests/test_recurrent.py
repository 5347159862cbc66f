"""Recurrent policies (learners/recurrent.py, `memory="gru"`): the actor carries each (env copy, agent)'s memory
and starts it at zeros exactly when that agent's episode starts, through env copies, env workers, league
opponents and evaluation; training sequences never cross an episode's end and reproduce the actor's memory;
and on the bundled memory env (`recall_v0`) a recurrent policy solves what a feed-forward one cannot."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from test_vector_actor import Counters, ListWriter

from pzasync import RunConfig, SequentialRunner
from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.errors import ConfigError
from pzasync.evaluation.evaluate import load_run_policies, play, policy_actor
from pzasync.learners import LearnerContext, Policy
from pzasync.learners.ppo import PPOLearner
from pzasync.learners.recurrent import sequence_chunks
from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
from pzasync.runtime.copies import LocalEnvs
from pzasync.runtime.copies.workers import EnvWorkers

pytestmark = pytest.mark.timeout(300)


class CountingPolicy(Policy):
    """A recurrent test policy whose memory counts the agent's decisions since its episode started; it stores
    the count it was given (`memory` extra) and acts uniformly among legal actions."""

    memory_size = 1

    def __init__(self, layout):
        super().__init__()
        self.rng = np.random.default_rng(0)
        self.n = layout.action_space.n

    def act_with_memory(self, obs, mask, explore, memory):
        actions = np.array([self.rng.choice(np.flatnonzero(m)) if m is not None else self.rng.integers(self.n)
                            for m in (mask if mask is not None else [None] * len(memory))], np.int64)
        return actions, {"memory": memory[:, 0].copy()}, memory + 1


def counting_actor(env_id, copies, workers=0):
    spec = EnvSpec.of(env_id)
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    writers = {agent: ListWriter() for agent in layouts}
    agents = {agent: ActingAgent(agent, layout, LocalPolicy(CountingPolicy(layout)), learns=False,
                                 buffer=writers[agent], tracks=copies)
              for agent, layout in layouts.items()}
    envs = EnvWorkers(spec, copies, workers, 60.0) if workers else LocalEnvs([spec.make() for _ in range(copies)])
    actor = Actor(ActorContext(envs, agents, Counters(), max_episode_steps=30))
    return actor, writers


@pytest.mark.parametrize("env_id, copies, workers", [
    ("pzasync.envs.forage", 3, 0),                  # agents die mid-episode; episodes end at different turns
    ("pettingzoo.classic.connect_four_v3", 4, 2),   # over env workers
])
def test_memory_starts_at_zeros_exactly_when_each_agents_episode_starts(env_id, copies, workers):
    actor, writers = counting_actor(env_id, copies, workers)
    starts = []
    actor.run(agent_steps=1500, seed=3, keep_going=lambda: True, on_episode=starts.append)
    assert len(starts) > copies  # several episodes per copy, so memories were reset mid-run
    checked = 0
    for agent, writer in writers.items():
        by_track = defaultdict(list)
        for t in writer.rows:
            by_track[t.extras["track"]].append(t)
        for rows in by_track.values():
            since = 0
            for t in rows:
                assert t.extras["memory"] == since, (agent, since, t.extras["memory"])
                since = 0 if (t.terminated or t.truncated) else since + 1
                checked += 1
    assert checked == 1500


def test_evaluation_and_league_opponents_start_each_episode_with_fresh_memory():
    """`play` (the evaluator and `pzasync eval`) resets a recurrent player's memory at every episode start."""
    spec = EnvSpec.of("pzasync.envs.recall")
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe))
    seen: list[float] = []

    class Recorder(CountingPolicy):
        def act_with_memory(self, obs, mask, explore, memory):
            seen.append(float(memory[0, 0]))
            return super().act_with_memory(obs, mask, explore, memory)

    actors = {a: policy_actor(Recorder(layouts[a]), layouts[a]) for a in probe.possible_agents}
    play(spec, actors, 6, seed=0)
    per_agent_episode = probe.unwrapped.delay + 1 if hasattr(probe.unwrapped, "delay") else 5
    assert seen == [float(i) for _ in range(6) for i in range(per_agent_episode) for _ in range(2)]


def test_league_opponents_carry_their_own_memory_through_the_actor():
    """A league opponent standing in for a seat is answered with memory kept like the seat's own."""
    config = RunConfig(seed=0, league={"agent_0": "latest=0.5,snapshot=0.5"}, league_snapshot_every=200)
    options = {"memory": "gru", "memory_size": 8, "seq_len": 4, "batch_size": 64}
    result = SequentialRunner("pzasync.envs.recall", ("ppo", options), config).run(agent_steps=1200)
    assert result.agents["agent_0"].updates > 0
    assert result.league is not None


def test_sequence_chunks_never_cross_an_episode_end_and_train_every_row_once():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        track = rng.integers(0, 4, n)
        done = rng.random(n) < 0.15
        seq_len, burn_in = int(rng.integers(1, 9)), int(rng.integers(0, 5))
        chunks = sequence_chunks(track, done, seq_len, burn_in)
        trained = np.concatenate([c.trained for c in chunks])
        assert sorted(trained.tolist()) == list(range(n))  # every row trained exactly once
        for c in chunks:
            assert len(set(track[c.rows])) == 1  # one trajectory
            assert list(c.rows) == sorted(c.rows)  # in its order
            assert len(c.trained) <= seq_len and c.context <= burn_in
            assert not done[c.rows[:-1]].any()  # only the last row may end an episode
            # consecutive rows of the chunk are consecutive rows of the trajectory
            positions = np.flatnonzero(track == track[c.rows[0]])
            where = np.searchsorted(positions, c.rows)
            assert (np.diff(where) == 1).all()
            # burn-in only where the trained rows continue an episode (never before an episode's first row)
            start = where[c.context]
            starts_episode = start == 0 or done[positions[start - 1]]
            assert c.context == 0 or not starts_episode


def test_the_learners_sequences_reproduce_the_memory_the_actor_carried():
    """Core outputs from the learner's sequence pass (stored memory at each chunk's start) equal those of
    stepping the policy decision by decision as the actor does."""
    env = EnvSpec.of("pzasync.envs.recall").make()
    layout = env_layouts(env, probe_info_masks(env))["agent_0"]
    options = {"memory": "gru", "memory_size": 16, "seq_len": 3, "burn_in": 2}
    learner = PPOLearner(LearnerContext("agent_0", layout, options, seed=1))
    policy = learner.net
    rng = np.random.default_rng(0)
    n = 40
    obs = rng.random((n, 4)).astype(np.float32)
    done = np.zeros(n, bool)
    done[[6, 13, 30]] = True
    memory = np.zeros((n, 16), np.float32)
    after = np.zeros((n, 16), np.float32)
    carried = np.zeros((1, 16), np.float32)
    for i in range(n):
        _, extras, out = policy.act_with_memory({"obs": obs[i:i + 1]}, None, True, carried)
        memory[i], after[i] = extras["memory"][0], out[0]
        carried = np.zeros_like(out) if done[i] else out
    batch = {"obs": obs, "terminated": done, "truncated": np.zeros(n, bool), "memory": memory}
    inputs = {"obs": {"obs": torch.as_tensor(obs)}, "mask": None, "memory": torch.as_tensor(memory)}
    with torch.no_grad():
        rows, outputs = learner.sequence_pass(inputs, learner.chunks(batch))
    np.testing.assert_allclose(outputs.numpy(), after[rows], rtol=1e-5, atol=1e-6)
    assert sorted(rows.tolist()) == list(range(n))


def test_recurrent_options_are_checked():
    env = EnvSpec.of("pzasync.envs.recall").make()
    layout = env_layouts(env, probe_info_masks(env))["agent_0"]
    with pytest.raises(ConfigError, match="memory='lstm'"):
        PPOLearner(LearnerContext("agent_0", layout, {"memory": "lstm"}))
    with pytest.raises(ConfigError, match="seq_len=0"):
        PPOLearner(LearnerContext("agent_0", layout, {"memory": "gru", "seq_len": 0}))
    assert PPOLearner.extra_fields({"memory": "gru", "memory_size": 8})["memory"] == "float32[8]"
    assert "memory" not in PPOLearner.extra_fields({"memory": "none", "memory_size": 8})


def correct_rate(memory: str, seed: int, steps: int, tmp_path) -> tuple[float, int]:
    """Train shared PPO on recall_v0 (2 agents, 2 cues, a delay of 4 cycles) and score it greedily: the rate of
    correct answers over 200 episodes (400 answers)."""
    options = {"memory": memory, "memory_size": 32, "seq_len": 8, "batch_size": 256, "minibatch_size": 64,
               "lr": 1e-3}
    config = RunConfig(agent_groups={"team": ["agent_*"]}, seed=seed, out_dir=str(tmp_path / memory))
    result = SequentialRunner("pzasync.envs.recall", ("ppo", options), config).run(agent_steps=steps)
    policies = load_run_policies(result.run_dir)
    summaries = play("pzasync.envs.recall", {a: policy_actor(p, layout) for a, (p, layout) in policies.items()},
                     200, seed + 7)
    answers = [r for s in summaries for r in s.returns.values()]
    return float(np.mean(answers)), len(answers)


@pytest.mark.slow
def test_a_recurrent_policy_solves_the_memory_env_and_a_feed_forward_one_stays_at_chance(tmp_path):
    # 5k agent steps: the GRU answered all 400 correctly after 4k and after 6k on each of seeds 0-2 (loaded 2-core
    # machine, 2026-11-25), and after 4k and 5k on seed 0 (2026-11-26); the feed-forward policy cannot beat chance
    # at any length (the cue is gone by the answer).
    recurrent, n = correct_rate("gru", 0, 5_000, tmp_path)
    feed_forward, _ = correct_rate("none", 0, 5_000, tmp_path)
    assert recurrent >= 0.95, recurrent
    half_width = 3.3 * math.sqrt(0.25 / n)  # chance's 99.9% interval for n answers at p = 1/2
    assert abs(feed_forward - 0.5) <= half_width, (feed_forward, half_width)
