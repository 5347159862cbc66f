"""The env's global state recorded beside each decision (core/global_state.py, docs/transitions.md "The global
state"): exactly `env.state()` at the decision and at the agent's next turn, through env copies, env workers
and both runners; the fallback for envs without `state()`; clear refusals."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from gymnasium import spaces
from test_vector_actor import hashed_choice, per_copy, vector_actor

from pzasync import AsyncRunner, RunConfig, SequentialRunner, rollout
from pzasync.core.environments import EnvSpec
from pzasync.core.global_state import StateRequest
from pzasync.errors import ConfigError, EnvSpecError
from pzasync.learners.mappo import MAPPOLearner
from pzasync.runtime.plan import RunPlan

pytestmark = pytest.mark.timeout(240)

SPREAD = ("mpe2.simple_spread_v3", {"N": 3})


def _spread(source: str = "auto", agents=("agent_0", "agent_1", "agent_2")) -> EnvSpec:
    return EnvSpec.of(SPREAD[0], **SPREAD[1]).with_state(StateRequest(tuple(agents), source))


def test_state_at_each_decision_and_at_the_next_turn_equals_env_state():
    """A policy reads env.state() at every decision; each transition's obs carries that state and its next_obs
    the state read at the agent's next decision (or at the end of the episode, when the env is done)."""
    env = _spread().make()
    seen: dict[str, list[np.ndarray]] = defaultdict(list)
    rng = np.random.default_rng(0)

    def policy(agent, obs, mask):
        state = env.state()
        seen[agent].append(state.copy())
        np.testing.assert_array_equal(obs["state"], state)
        return int(rng.integers(5))

    out = rollout(env, policy, agent_steps=3 * 60, seed=3, max_episode_steps=25 * 3)
    for agent, arrays in out.items():
        states = np.stack(seen[agent])
        n = len(arrays["action"])
        np.testing.assert_array_equal(arrays["obs"]["state"], states[:n])
        goes_on = ~(arrays["terminated"] | arrays["truncated"])
        np.testing.assert_array_equal(arrays["next_obs"]["state"][:n - 1][goes_on[:n - 1]],
                                      states[1:n][goes_on[:n - 1]])
        # the agent's own observation is untouched, and MPE's state is every agent's observation side by side
        index = int(agent.split("_")[1])
        np.testing.assert_array_equal(arrays["obs"]["observation"],
                                      arrays["obs"]["state"][:, 18 * index:18 * (index + 1)])


def test_without_state_the_fallback_concatenates_every_agents_observation_mask_left_out():
    """connect_four has no state(): 'auto' falls back to both players' boards, flattened, in agent order."""
    spec = EnvSpec.of("pettingzoo.classic.connect_four_v3").with_state(StateRequest(("player_0", "player_1")))
    env = spec.make()
    assert env.observation_space("player_0")["state"].shape == (2 * 6 * 7 * 2,)
    inner = env.env

    def policy(agent, obs, mask):
        expected = np.concatenate([inner.observe(a)["observation"].astype(np.float32).ravel()
                                   for a in inner.possible_agents])
        np.testing.assert_array_equal(obs["state"], expected)
        assert obs["observation"].shape == (6, 7, 2) and mask is not None  # the mask is still split out
        return int(np.flatnonzero(mask)[0])

    out = rollout(env, policy, agent_steps=200, seed=1)
    assert set(out) == {"player_0", "player_1"}


def test_dying_agents_read_as_zeros_in_the_fallback_state():
    env = EnvSpec.of("pzasync.envs.forage", n_agents=3).with_state(StateRequest(("forager_0",), "concat")).make()
    env.reset(seed=0, options={"energy": [20, 2, 3]})  # the other two starve first
    width = env.observation_space("forager_0")["state"].shape[0] // 3
    dead_seen = False
    for agent in env.agent_iter(2000):
        obs, _, term, trunc, info = env.last()
        if agent == "forager_0":
            for i, other in enumerate(env.possible_agents):
                part = obs["state"][i * width:(i + 1) * width]
                if other not in env.agents:
                    dead_seen = True
                    assert not part.any()
        env.step(None if term or trunc else int(np.flatnonzero(obs["action_mask"])[0]))
    assert dead_seen


@pytest.mark.parametrize("copies, workers", [(3, 0), (3, 2)])
def test_env_copies_and_workers_record_the_state_as_independent_rollouts_do(copies, workers):
    """The vectorised actor's transitions (state included) equal single-env rollouts seeded seed + k."""
    from pzasync.core.collect import transitions_to_arrays

    spec = _spread()
    actor, writers = vector_actor(spec, copies, workers, max_episode_steps=20)
    taken = actor.run(agent_steps=600, seed=4, keep_going=lambda: True, on_episode=lambda s: None)
    assert taken == 600
    layouts = {a: x.layout for a, x in actor.agents.items()}
    assert all("state" in {leaf.path[0] for leaf in layout.obs_leaves} for layout in layouts.values())
    streams = {agent: per_copy(w, copies) for agent, w in writers.items()}
    for k in range(copies):
        decisions = sum(len(by_copy[k]) for by_copy in streams.values())
        expected = rollout(spec.make(), lambda agent, obs, mask: hashed_choice(obs, mask, 5),
                           agent_steps=decisions, seed=4 + k, max_episode_steps=20)
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        for agent, arrays in expected.items():
            for leaf in ("observation", "state"):
                np.testing.assert_array_equal(got[agent]["obs"][leaf], arrays["obs"][leaf])
                np.testing.assert_array_equal(got[agent]["next_obs"][leaf], arrays["next_obs"][leaf])
            np.testing.assert_array_equal(got[agent]["action"], arrays["action"])


class CheckingMAPPO(MAPPOLearner):
    """MAPPO that checks, in every batch it trains on, that each row's state holds the acting agent's own
    observation at its slot (MPE's state is every agent's observation side by side) and that `member` says
    which agent acted; a mismatch fails the learner and so the run."""

    def update(self, batch):
        own, state, member = batch["obs/observation"], batch["obs/state"], batch["member"]
        for m in np.unique(member):
            rows = member == m
            np.testing.assert_array_equal(state[rows, 18 * m:18 * (m + 1)], own[rows])
        return super().update(batch)


@pytest.mark.parametrize("runner, workers", [(SequentialRunner, 0),
                                             pytest.param(AsyncRunner, 2, marks=pytest.mark.slow),
                                             (AsyncRunner, 0)])
def test_both_runners_train_mappo_on_the_recorded_state(runner, workers):
    config = RunConfig(seed=2, agent_groups={"team": ["agent_*"]}, envs_per_actor=2, env_workers=workers,
                       max_episode_steps=60)
    result = runner(EnvSpec.of(*SPREAD[:1], **SPREAD[1]), (CheckingMAPPO, {"batch_size": 128}), config).run(
        agent_steps=1200)
    assert result.agents["agent_0"].updates >= 2, result.agents


@pytest.mark.slow  # 3 s
@pytest.mark.usefixtures("no_remote_server_left")
def test_mappo_trains_over_remote_env_copies_on_every_agents_observation():
    """A served env has no `state()` in remote protocol v1, so "auto" takes the concat fallback, built on the
    trainer's side over the remote copies; each row's state still holds the acting agent's own observation."""
    from test_remote import python_server

    config = RunConfig(seed=2, agent_groups={"team": ["agent_*"]}, envs_per_actor=2, max_episode_steps=60)
    result = SequentialRunner(python_server(SPREAD[0]), (CheckingMAPPO, {"batch_size": 128}), config).run(
        agent_steps=600)
    assert result.agents["agent_0"].updates >= 2, result.agents


def test_the_plan_wraps_the_env_only_for_the_agents_whose_learner_reads_the_state():
    plan = RunPlan(EnvSpec.of(*SPREAD[:1], **SPREAD[1]), {"agent_0": "mappo", "*": "ppo"}, RunConfig())
    assert plan.env_spec.state == StateRequest(("agent_0",), "auto")
    assert isinstance(plan.agents["agent_0"].layout.obs_space, spaces.Dict)
    assert plan.agents["agent_1"].layout.obs_space == spaces.Box(-np.inf, np.inf, (18,), np.float32)
    plan = RunPlan(EnvSpec.of(*SPREAD[:1], **SPREAD[1]), "ppo", RunConfig())
    assert plan.env_spec.state is None


def test_state_requests_are_checked_with_clear_errors():
    with pytest.raises(EnvSpecError, match="no state_space"):
        EnvSpec.of("pettingzoo.classic.connect_four_v3").with_state(StateRequest(("player_0",), "env")).make().reset()
    with pytest.raises(EnvSpecError, match="state source 'global'"):
        RunPlan("pettingzoo.classic.connect_four_v3", ("mappo", {"state": "global"}), RunConfig())
    with pytest.raises(ConfigError, match="different sources"):
        RunPlan(EnvSpec.of(*SPREAD[:1], **SPREAD[1]),
                {"agent_0": ("mappo", {"state": "env"}), "*": ("mappo", {"state": "concat"})}, RunConfig())
    with pytest.raises(EnvSpecError, match="unknown agent"):
        EnvSpec.of(*SPREAD[:1], **SPREAD[1]).with_state(StateRequest(("nobody",))).make()


def small_state(env):
    """A user state function: the first four numbers of MPE's state."""
    return env.state()[:4]


def test_a_state_function_sets_the_state_and_its_space():
    spec = EnvSpec.of(*SPREAD[:1], **SPREAD[1]).with_state(StateRequest(("agent_0",), "test_global_state:small_state"))
    env = spec.make()
    env.reset(seed=0)
    assert env.observation_space("agent_0")["state"].shape == (4,)
    obs = env.observe("agent_0")
    np.testing.assert_array_equal(obs["state"], env.env.state()[:4])


def test_the_fallback_refuses_an_observation_that_flattens_to_no_box():
    """A Sequence space, alone or inside a Dict, flattens to itself or to a Dict, not to a Box: the fallback
    refuses it as clearly as a space that cannot be flattened at all (it used to fail on `.low`)."""
    from pzasync.core.global_state import _concat_reader

    class Env:
        possible_agents = ["a"]

        def __init__(self, space: spaces.Space) -> None:
            self.space = space

        def observation_space(self, agent):
            return self.space

    sequence = spaces.Sequence(spaces.Discrete(3))
    for space in (sequence, spaces.Dict({"x": spaces.Box(0, 1, (2,)), "y": sequence})):
        with pytest.raises(EnvSpecError, match="cannot be flattened into a global state"):
            _concat_reader(Env(space), "seq")
