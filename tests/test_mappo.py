"""`mappo` (learners/mappo.py): PPO with a centralized critic over the env's global state. It learns on a
cooperative game, works for a shared group and for independent agents, with masks and Box actions, saves its
critic in checkpoints, and its policy (which reads only the agent's observation) serves evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.core.environments import EnvSpec
from pzasync.core.global_state import StateRequest, carries_state
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.errors import ConfigError, UnsupportedSpaceError
from pzasync.evaluation.evaluate import (
    evaluate_against,
    load_run_policies,
    play,
    policy_actor,
    random_actor,
    run_env,
)
from pzasync.evaluation.report import evaluate
from pzasync.learners import LearnerContext, policy_to_vector, vector_to_policy
from pzasync.learners.base import policy_tensors
from pzasync.learners.mappo import MAPPOLearner, RunningNorm

pytestmark = pytest.mark.timeout(300)

SPREAD = EnvSpec.of("mpe2.simple_spread_v3", N=3)


def team_returns(spec, actors, episodes, seed):
    return np.array([sum(s.returns.values()) for s in play(spec, actors, episodes, seed)])


@pytest.mark.slow
def test_mappo_beats_a_random_team_on_simple_spread(tmp_path):
    """80k agent steps of one shared policy (20-40 s here), on the parallel path: the team returns of seeds 0, 1, 2
    were -70.7, -64.9, -72.4 against the random team's -87.5 (margin about 12). At 40k they were -84, -94, -73 (and
    -63, -84, -81 before Adam's fused kernel went: a float's rounding sends a run this short anywhere)."""
    config = RunConfig(seed=0, agent_groups={"team": ["agent_*"]}, out_dir=str(tmp_path))
    result = SequentialRunner(SPREAD, "mappo", config).run(agent_steps=80_000)
    policies = load_run_policies(result.run_dir)  # built for what each agent observes: no global state to act
    spec = SPREAD
    # sampled actions: after a short run the policy is still broad, and its argmax alone drifts off (greedy -163)
    trained = team_returns(spec, {a: policy_actor(p, layout, explore=True) for a, (p, layout) in policies.items()},
                           60, 5)
    probe = spec.make()
    rand = team_returns(spec, {a: random_actor(spec.make(), 3 + i) for i, a in enumerate(probe.possible_agents)},
                        60, 5)
    margin = 2 * (trained.std() / np.sqrt(len(trained)) + rand.std() / np.sqrt(len(rand)))
    assert trained.mean() > rand.mean() + margin, (trained.mean(), rand.mean(), margin)


def test_the_critic_reads_the_state_and_the_published_policy_does_not():
    spec = SPREAD.with_state(StateRequest(("agent_0", "agent_1", "agent_2")))
    env = spec.make()
    layout = env_layouts(env, probe_info_masks(env))["agent_0"]
    learner = MAPPOLearner(LearnerContext("team", layout, {}, members=["agent_0", "agent_1", "agent_2"]))
    assert learner.critic.state.keys == ["obs/state"] and learner.critic.members == 3
    assert learner.net.encoder.keys == ["obs/observation"] and learner.net.v is None
    assert not any("critic" in k for k in learner.policy.state_dict())
    assert "critic" in learner.state_dict()
    # the actor's forward stores only the log-probability (no value: the critic is not published)
    _, extras = learner.policy.act({"obs/observation": np.zeros((2, 18), np.float32),
                                    "obs/state": np.zeros((2, 54), np.float32)}, None, True)
    assert set(extras) == {"log_prob"}
    with pytest.raises(UnsupportedSpaceError, match="global state"):
        MAPPOLearner.check_spaces(env_layouts(SPREAD.make(), set())["agent_0"])
    with pytest.raises(ConfigError, match="critic_hidden"):
        MAPPOLearner.validate_config("team", {"critic_hidden": [0]})


def test_a_critic_of_an_image_state_gets_the_image_defaults_and_the_policy_of_vectors_keeps_tanh():
    """activation="auto" is decided per network: the critic reading an image state has ReLU layers and orthogonal
    convs with zero biases, the policy reading a vector observation tanh layers; a critic reading an image
    observation (critic_obs) beside a vector state has ReLU layers too."""
    from gymnasium import spaces

    from pzasync.core.spaces import agent_layout

    observation = spaces.Dict({"observation": spaces.Box(-1, 1, (4,), np.float32),
                               "state": spaces.Box(0, 255, (40, 40, 3), np.uint8)})
    learner = MAPPOLearner(LearnerContext("team", agent_layout("a", observation, spaces.Discrete(3)), {},
                                          members=["a", "b"]))

    def activations(module):
        return {type(m) for m in module.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.Tanh))}

    assert learner.critic.state.reads_images and activations(learner.critic.v) == {torch.nn.ReLU}
    assert all(torch.count_nonzero(m.bias) == 0 for m in learner.critic.state.modules()
               if isinstance(m, torch.nn.Conv2d))
    assert not learner.net.encoder.reads_images and activations(learner.net.pi) == {torch.nn.Tanh}

    # A critic reading an image observation beside a vector state (critic_obs) reads images too.
    observation = spaces.Dict({"observation": spaces.Box(0, 255, (40, 40, 3), np.uint8),
                               "state": spaces.Box(-1, 1, (6,), np.float32)})
    for critic_obs, expected in [(True, torch.nn.ReLU), (False, torch.nn.Tanh)]:
        learner = MAPPOLearner(LearnerContext("team", agent_layout("a", observation, spaces.Discrete(3)),
                                              {"critic_obs": critic_obs}, members=["a", "b"]))
        assert not learner.critic.state.reads_images and activations(learner.critic.v) == {expected}, critic_obs
        assert activations(learner.net.pi) == {torch.nn.ReLU}


def test_value_normalisation_tracks_the_returns_moments():
    norm = RunningNorm()
    data = torch.randn(3000, dtype=torch.float64) * 7 + 40
    for part in data.split(250):
        norm.update(part)
    assert abs(float(norm.mean) - float(data.mean())) < 1e-9
    assert abs(float(norm.var) - float(data.var(unbiased=False))) < 1e-6
    np.testing.assert_allclose(norm.denormalize(norm.normalize(data)).numpy(), data.numpy())


@pytest.mark.parametrize("env, kwargs, learner, groups", [
    ("mpe2.simple_speaker_listener_v4", {}, ("mappo", {"batch_size": 128}), {}),  # independent agents, unequal spaces
    ("mpe2.simple_spread_v3", {"N": 2, "continuous_actions": True}, ("mappo", {"batch_size": 128}),
     {"team": ["agent_*"]}),                                                        # Box actions
    pytest.param("pettingzoo.classic.connect_four_v3", {}, ("mappo", {"batch_size": 128, "critic_obs": True}), {},
                 marks=pytest.mark.slow),                                           # masks (3 s)
    ("pzasync.envs.recall", {}, ("mappo", {"batch_size": 128, "memory": "gru", "seq_len": 4}),
     {"team": ["agent_*"]}),                                                        # a recurrent policy
    pytest.param("pzasync.envs.recall", {}, ("mappo", {"batch_size": 128, "memory": "gru", "seq_len": 4,
                                                       "critic_memory": True}),
                 {"team": ["agent_*"]}, marks=pytest.mark.slow),                    # and a recurrent critic (3 s)
])
def test_mappo_trains_on_each_kind_of_env(env, kwargs, learner, groups, tmp_path):
    config = RunConfig(seed=1, agent_groups=groups, out_dir=str(tmp_path), max_episode_steps=100)
    result = SequentialRunner(EnvSpec.of(env, **kwargs), learner, config).run(agent_steps=800)
    assert all(r.updates >= 1 for r in result.agents.values()), result.agents
    policies = load_run_policies(result.run_dir)  # checkpoints load for the env without the state
    assert set(policies) == set(result.agents)
    assert not any(carries_state(layout) for _policy, layout in policies.values())
    assert run_env(result.run_dir).state is None  # and are evaluated on it: acting never calls env.state()
    results = evaluate_against(EnvSpec.of(env, **kwargs), policies, "random", 2, max_episode_steps=20)
    assert {r.agent for r in results} == set(policies)
    report = evaluate(result.run_dir, episodes=2, max_episode_steps=20, copies=2)  # untrained networks too
    assert {r.policy for r in report.results} >= {"trained", "untrained"}


def test_the_policy_acts_alike_with_the_state_beside_its_observation_and_without_it():
    """Training builds the policy for observations with the state beside them, evaluation and export for the env
    without it: the same parameters (a checkpoint or a policy vector fits both) give the same actions."""
    full_env = SPREAD.with_state(StateRequest(("agent_0", "agent_1", "agent_2"))).make()
    full = env_layouts(full_env, probe_info_masks(full_env))["agent_0"]
    plain = env_layouts(SPREAD.make(), set())["agent_0"]
    torch.manual_seed(0)
    trained = MAPPOLearner.build_policy(full, {})
    acting = MAPPOLearner.build_policy(plain, {})
    assert [k for k, _ in policy_tensors(trained)] == [k for k, _ in policy_tensors(acting)]
    vector_to_policy(policy_to_vector(trained), acting)
    full_env.reset(seed=0)
    seen = []
    for agent in full_env.agent_iter(60):
        seen.append(full_env.observe(agent))
        full_env.step(None if full_env.terminations[agent] or full_env.truncations[agent] else 1)
    with_state, _ = trained.act(full.batch(seen), None, False)
    without, _ = acting.act(plain.batch([o["observation"] for o in seen]), None, False)
    np.testing.assert_array_equal(with_state, without)
    assert len(set(with_state.tolist())) > 1  # the observations differ enough to move the greedy action


@pytest.mark.slow
def test_mappo_in_an_async_run_with_a_league_and_the_evaluator(tmp_path):
    config = RunConfig(seed=2, out_dir=str(tmp_path), league={"*": "latest=0.5,snapshot=0.5"},
                       league_snapshot_every=300, eval_every_s=2, eval_vs="random", eval_episodes=20)
    result = AsyncRunner("pettingzoo.classic.connect_four_v3", ("mappo", {"batch_size": 128}), config).run(
        agent_steps=3000)
    assert result.evaluations and result.league is not None


RECALL = EnvSpec.of("pzasync.envs.recall").with_state(StateRequest(("agent_0", "agent_1")))


def recurrent_critic(**options):
    env = RECALL.make()
    layout = env_layouts(env, probe_info_masks(env))["agent_0"]
    config = {"memory": "gru", "memory_size": 8, "critic_memory": True, "seq_len": 3, **options}
    return MAPPOLearner(LearnerContext("team", layout, config, members=["agent_0", "agent_1"], seed=3))


def interleaved_batch(n=30, seed=0):
    """Two tracks' rows interleaved, with episode ends on both; memory columns as the actor would store them."""
    rng = np.random.default_rng(seed)
    track = np.arange(n) % 2
    done = np.zeros(n, bool)
    done[[7, 12, 21]] = True
    batch = {"obs/observation": rng.random((n, 4)).astype(np.float32),
             "obs/state": rng.random((n, 5)).astype(np.float32),
             "next_obs/observation": rng.random((n, 4)).astype(np.float32),
             "next_obs/state": rng.random((n, 5)).astype(np.float32),
             "terminated": done, "truncated": np.zeros(n, bool), "track": track, "member": track,
             "reward": rng.random(n), "memory": rng.random((n, 8)).astype(np.float32)}
    return batch


def rows_of(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


def test_a_recurrent_critic_carries_its_memory_along_each_track_and_across_chunks_restarting_at_episode_ends():
    learner, batch = recurrent_critic(), interleaved_batch()
    critic = learner.critic
    # reference: each track stepped row by row, from zeros, back to zeros after every episode end
    expected_in = np.zeros((30, 8), np.float32)
    expected_out = np.zeros((30, 8), np.float32)
    with torch.no_grad():
        features = critic.features({"obs/observation": torch.as_tensor(batch["obs/observation"]),
                                    "obs/state": torch.as_tensor(batch["obs/state"])},
                                   torch.as_tensor(batch["member"]))
        for t in (0, 1):
            h = torch.zeros(1, 8)
            for row in np.flatnonzero(batch["track"] == t):
                expected_in[row] = h[0].numpy()
                h = critic.core(features[row:row + 1], h)
                expected_out[row] = h[0].numpy()
                if batch["terminated"][row]:
                    h = torch.zeros(1, 8)
    memory_in, memory_out = learner.critic_memory_pass(batch)
    np.testing.assert_allclose(memory_in.numpy(), expected_in, atol=1e-6)
    np.testing.assert_allclose(memory_out.numpy(), expected_out, atol=1e-6)
    assert not memory_in[[0, 1, 9, 14, 23]].any()  # each track's first row, and its row after each episode end
    assert memory_in[[2, 3, 8, 10]].abs().sum(dim=1).min() > 0
    # the same rows in two chunks: the second goes on from where the first left each track
    split = recurrent_critic()
    first_in, _ = split.critic_memory_pass(rows_of(batch, np.arange(17)))
    second_in, second_out = split.critic_memory_pass(rows_of(batch, np.arange(17, 30)))
    np.testing.assert_allclose(torch.cat([first_in, second_in]).numpy(), expected_in, atol=1e-6)
    np.testing.assert_allclose(second_out.numpy(), expected_out[17:], atol=1e-6)


@pytest.mark.parametrize("burn_in", [0, 2])
def test_a_recurrent_critics_training_sequences_reproduce_its_memory_pass(burn_in):
    """The values a minibatch of sequences trains on (each from the memory the pass left at its first row)
    equal the values of the pass itself, row for row, at the same parameters."""
    learner, batch = recurrent_critic(burn_in=burn_in), interleaved_batch(seed=1)
    pass_values, _ = learner.value_pair(batch)
    inputs = learner.train_inputs(batch)
    with torch.no_grad():
        rows, _, values = learner.evaluate_sequences(inputs, learner.chunks(batch))
    expected = pass_values[rows]
    if learner.critic.norm is not None:
        expected = learner.critic.norm.normalize(torch.as_tensor(expected)).numpy()
    np.testing.assert_allclose(values.double().numpy(), expected, rtol=1e-5, atol=1e-5)
    assert sorted(rows.tolist()) == list(range(30))


def test_a_recurrent_critic_needs_a_recurrent_policy():
    with pytest.raises(ConfigError, match="critic_memory=True needs memory='gru'"):
        MAPPOLearner.validate_config("team", {"critic_memory": True})
