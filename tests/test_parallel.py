"""The parallel path (docs/transitions.md, "The parallel path"): a simultaneous-move env stepped through its parallel
API, every live agent's decision of a cycle handed out at once; the same transitions as the AEC path where the two
coincide, cuts between cycles, agents that die or join, masks, the global state, and the runtime on top of it."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

import pzasync
from pzasync.config import RunConfig
from pzasync.core.collect import run_episodes
from pzasync.core.environments import EnvSpec, make_env, make_parallel_env
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition
from pzasync.errors import ConfigError
from pzasync.runtime.plan import RunPlan


class Comings(ParallelEnv):
    """Agents that die and join: a0, a1, a2 start; a1 dies at step 2; a3 joins at step 3 (and is paid at the step
    it appears, before its first decision); everyone left is truncated at step 6. Observations: the step count
    and the agent's own number; rewards: the action plus the agent's number."""

    metadata = {"name": "comings"}
    possible_agents = ["a0", "a1", "a2", "a3"]

    def __init__(self, steps: int = 6) -> None:
        self.steps = steps

    def observation_space(self, agent):
        return spaces.Box(0, 100, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(4)

    def _obs(self, agents):
        return {a: np.array([self.t, int(a[1])], np.float32) for a in agents}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, ["a0", "a1", "a2"]
        return self._obs(self.agents), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        acted = list(self.agents)
        rewards = {a: float(actions[a]) + int(a[1]) for a in acted}
        terminations = {a: a == "a1" and self.t == 2 for a in acted}
        truncations = dict.fromkeys(acted, self.t >= self.steps)
        live = [a for a in acted if not (terminations[a] or truncations[a])]
        if self.t == 3:
            live.append("a3")
            rewards["a3"], terminations["a3"], truncations["a3"] = 0.5, False, False
        obs = self._obs(set(acted) | set(live))
        self.agents = live
        return obs, rewards, terminations, truncations, {a: {} for a in obs}


GENERATED = "test_parallel:Comings"


def hashed_action(agent: str, obs, mask, space) -> int:
    """A deterministic legal action of the observation and agent alone (so both paths choose alike)."""
    leaves = [obs] if not isinstance(obs, dict) else [obs[k] for k in sorted(obs)]
    digest = hashlib.blake2b(agent.encode() + b"".join(np.ascontiguousarray(v).tobytes() for v in leaves),
                             digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    if mask is not None and mask.any():
        legal = np.flatnonzero(mask)
        return int(legal[value % len(legal)])
    return value % int(space.n)


def episodes_of(env, parallel: bool, episodes: int, seed: int, **kwargs) -> tuple[list[Transition], list]:
    """Every transition of `episodes` whole episodes (no cut), in emission order, and their summaries."""
    collected: list[Transition] = []
    summaries: list[EpisodeSummary] = []
    run_episodes(env, lambda a, o, m: (hashed_action(a, o, m, env.action_space(a)), {}), collected.append,
                 agent_steps=None, seed=seed, layouts=LayoutBook(env), on_episode=summaries.append,
                 keep_going=lambda: len(summaries) < episodes, parallel=parallel, **kwargs)
    return collected, summaries


def per_agent(transitions: list[Transition]) -> dict[str, list[Transition]]:
    out: dict[str, list[Transition]] = {}
    for t in transitions:
        out.setdefault(t.agent, []).append(t)
    return out


def assert_same_transitions(a: list[Transition], b: list[Transition]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in ("agent", "action", "reward", "terminated", "truncated"):
            assert getattr(x, name) == getattr(y, name), name
        for name in ("obs", "next_obs", "action_mask", "next_action_mask"):
            left, right = getattr(x, name), getattr(y, name)
            if isinstance(left, dict):
                assert left.keys() == right.keys()
                for key in left:
                    np.testing.assert_array_equal(left[key], right[key], err_msg=name)
            else:
                np.testing.assert_array_equal(left, right, err_msg=name)


# ------------------------------------------------------------------------------------------------ equality
@pytest.mark.parametrize("env_id, kwargs", [
    ("pettingzoo.classic.rps_v2", {}),
    (GENERATED, {}),                                           # agents die and join mid-episode
    ("mpe2.simple_spread_v3", {"N": 3, "max_cycles": 12}),
    ("mpe2.simple_tag_v3", {"max_cycles": 12}),                # two teams, unequal spaces
    ("mpe2.simple_speaker_listener_v4", {"max_cycles": 12}),
], ids=["rps", "generated-agents", "simple_spread", "simple_tag", "speaker_listener"])
def test_the_parallel_path_gives_the_aec_paths_transitions_field_by_field(env_id, kwargs):
    """On envs that are simultaneous-move underneath, stepping the parallel API a cycle at a time gives each
    agent exactly the transitions the AEC path gives it (rules 1-4, 6-7), and the same episode returns."""
    aec, aec_episodes = episodes_of(make_env(env_id, **kwargs), False, episodes=3, seed=7)
    parallel, parallel_episodes = episodes_of(make_parallel_env(env_id, **kwargs), True, episodes=3, seed=7)
    assert len(aec) > 20
    by_agent_aec, by_agent_parallel = per_agent(aec), per_agent(parallel)
    assert by_agent_aec.keys() == by_agent_parallel.keys()
    for agent in by_agent_aec:
        assert_same_transitions(by_agent_aec[agent], by_agent_parallel[agent])
    assert [(e.returns, e.agent_steps) for e in aec_episodes] == [(e.returns, e.agent_steps)
                                                                   for e in parallel_episodes]
    assert any(t.terminated or t.truncated for t in parallel), "episodes end with their real terminal transitions"


def test_agents_that_die_and_join_on_the_parallel_path():
    """An agent that dies gets its last transition at once, with the step's flags and observation; one that joins
    decides from the cycle after it appears, and what it was paid before is in its return, in no transition
    (rule 4); rewards are conserved per episode (the stepper checks it)."""
    transitions, (episode,) = episodes_of(make_parallel_env(GENERATED), True, episodes=1, seed=1)
    agents = per_agent(transitions)
    assert [t.terminated for t in agents["a1"]] == [False, True] and agents["a1"][-1].next_obs.tolist() == [2, 1]
    assert len(agents["a3"]) == 3 and agents["a3"][0].obs.tolist() == [3, 3], "decides from step 3 on"
    assert [t.truncated for t in agents["a0"]] == [False] * 5 + [True] and len(agents["a2"]) == 6
    assert episode.returns["a3"] == pytest.approx(0.5 + sum(t.reward for t in agents["a3"]))
    assert not episode.cut_by_actor


# ------------------------------------------------------------------------------------------------ cuts
def test_a_budget_takes_whole_cycles_and_cuts_the_open_transitions_as_truncated():
    env_id = "mpe2.simple_spread_v3"
    episodes: list = []
    out = pzasync.rollout(env_id, lambda a, o, m: 0, agent_steps=3 * 5 + 2, seed=0, env_api="parallel",
                          episodes=episodes)
    assert {a: len(v["reward"]) for a, v in out.items()} == {"agent_0": 5, "agent_1": 5, "agent_2": 5}, \
        "17 decisions of budget: 5 whole cycles of 3 agents, never a part of the sixth"
    assert [e.cut_by_actor for e in episodes] == [True]
    for arrays in out.values():
        assert arrays["truncated"].tolist() == [False] * 4 + [True], "the open transition, cut (rule 5)"
        assert not arrays["terminated"].any()
        np.testing.assert_array_equal(arrays["obs"][1:], arrays["next_obs"][:-1])


def test_max_episode_steps_cuts_before_the_cycle_that_would_pass_it():
    episodes: list = []
    pzasync.rollout("mpe2.simple_spread_v3", lambda a, o, m: 0, agent_steps=60, seed=0, env_api="parallel",
                    max_episode_steps=10, episodes=episodes)
    assert [e.agent_steps for e in episodes[:-1]] == [9] * (len(episodes) - 1), "3 cycles of 3: a 4th would pass 10"
    assert all(e.cut_by_actor for e in episodes)


# ------------------------------------------------------------------------------------------------ masks
class MaskedPair(ParallelEnv):
    """Two agents, 3 actions; infos carry each agent's mask: at step t agent_0 may not take t % 3."""

    metadata = {"name": "masked_pair"}
    possible_agents = ["agent_0", "agent_1"]

    def __init__(self) -> None:
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(0, 10, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _infos(self):
        mask = np.ones(3, np.int8)
        mask[self.t % 3] = 0
        return {"agent_0": {"action_mask": mask}, "agent_1": {"action_mask": np.ones(3, np.int8)}}

    def _obs(self):
        return {a: np.array([self.t], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), self._infos()

    def step(self, actions):
        self.t += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        done = self.t >= 4
        obs, infos = self._obs(), self._infos()
        terminations = dict.fromkeys(self.agents, done)
        if done:
            self.agents = []
        return obs, rewards, terminations, dict.fromkeys(terminations, False), infos


def test_masks_in_infos_go_with_the_decision_and_the_next_one():
    out = pzasync.rollout(MaskedPair, lambda a, o, m: int(np.flatnonzero(m)[-1]), agent_steps=8, seed=0,
                          env_api="parallel")
    first = out["agent_0"]
    assert first["action_mask"].tolist() == [[0, 1, 1], [1, 0, 1], [1, 1, 0], [0, 1, 1]]
    assert first["next_action_mask"][:-1].tolist() == first["action_mask"][1:].tolist()
    assert first["action"].tolist() == [2, 2, 1, 2] and first["reward"].tolist() == [2, 2, 1, 2]
    assert first["terminated"].tolist() == [False, False, False, True]


# ------------------------------------------------------------------------------------------------ the runtime
def test_the_plan_takes_the_parallel_path_where_the_env_has_one_and_says_why():
    assert RunPlan("mpe2.simple_spread_v3", "ppo", RunConfig()).env_api == "parallel"
    plan = RunPlan("mpe2.simple_spread_v3", "ppo", RunConfig())
    assert "simultaneous-move" in plan.auto["env_api"]
    assert RunPlan("mpe2.simple_spread_v3", "ppo", RunConfig(env_api="aec")).env_api == "aec"
    assert RunPlan("pettingzoo.classic.connect_four_v3", "dqn", RunConfig()).env_api == "aec"
    with pytest.raises(ConfigError, match=r"option env_api='parallel': env 'pettingzoo.classic.connect_four_v3' "
                                          r"has no parallel API"):
        RunPlan("pettingzoo.classic.connect_four_v3", "dqn", RunConfig(env_api="parallel"))


def test_the_global_state_rides_beside_every_agents_observation_once_a_cycle():
    spec = EnvSpec.of("mpe2.simple_spread_v3", N=3, max_cycles=6).with_state(
        pzasync.core.global_state.StateRequest(("agent_0", "agent_1", "agent_2"), "env"))
    env = spec.make_parallel()
    observations, _ = env.reset(seed=0)
    state = env.unwrapped.state()
    for agent, obs in observations.items():
        np.testing.assert_array_equal(obs["state"], state)
        assert env.observation_space(agent)["state"].shape == state.shape
    observations, *_ = env.step(dict.fromkeys(env.agents, 1))
    np.testing.assert_array_equal(observations["agent_2"]["state"], env.unwrapped.state())


# ------------------------------------------------------------------------------------------------ the actor
@pytest.mark.timeout(240)
@pytest.mark.parametrize("env_id, kwargs, copies, workers, live", [
    ("mpe2.simple_spread_v3", {"N": 3, "max_cycles": 9}, 3, 0, 3),
    (GENERATED, {}, 4, 0, 3),                                    # agents that die and join: 3 alive at most
    ("mpe2.simple_tag_v3", {"max_cycles": 8}, 3, 1, 3),          # two teams of unequal spaces, one env worker
    (GENERATED, {}, 4, 2, 3),                                    # dying and joining agents over two workers' pipes
])
def test_each_parallel_copy_of_the_actor_equals_its_own_parallel_rollout(env_id, kwargs, copies, workers, live):
    """The actor on the parallel path, in its process or over env workers: copy k plays exactly what a parallel
    rollout seeded seed + k plays, field by field; one module shared by every agent answers a round of every
    copy's whole cycle in one forward."""
    from test_vector_actor import FIELDS, Counters, HashedPolicy, ListWriter, hashed_choice, per_copy

    from pzasync.core.collect import transitions_to_arrays
    from pzasync.core.spaces import env_layouts, probe_info_masks
    from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
    from pzasync.runtime.copies import EnvWorkers, LocalEnvs

    spec, seed = EnvSpec.of(env_id, **kwargs), 5
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    writers = {agent: ListWriter(agent) for agent in layouts}
    shared = {}  # one module per observation shape: every agent of a team in one forward
    for layout in layouts.values():
        shared.setdefault(layout.obs_space.shape, LocalPolicy(HashedPolicy(layout)))
    agents = {agent: ActingAgent(agent, layout, shared[layout.obs_space.shape], learns=False,
                                 buffer=writers[agent], tracks=copies) for agent, layout in layouts.items()}
    envs = (EnvWorkers(spec, copies, workers, 60.0, parallel=True) if workers
            else LocalEnvs([spec.make_parallel() for _ in range(copies)], parallel=True))
    actor = Actor(ActorContext(envs, agents, Counters()))
    budget = 400
    taken = actor.run(agent_steps=budget, seed=seed, keep_going=lambda: True, on_episode=lambda s: None)
    assert budget - copies * len(layouts) < taken <= budget, "whole cycles, never past the budget"
    streams = {agent: per_copy(w, copies) for agent, w in writers.items()}
    for k in range(copies):
        decisions = sum(len(by_copy[k]) for by_copy in streams.values())
        n = {a: layouts[a].action_space.n for a in layouts}
        expected = pzasync.rollout(spec, lambda agent, obs, mask, n=n: hashed_choice(obs, mask, n[agent]),
                                   agent_steps=decisions, seed=seed + k, env_api="parallel")
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        assert set(got) == set(expected)
        for agent, arrays in expected.items():
            for name in FIELDS:
                if name in arrays:
                    np.testing.assert_array_equal(got[agent][name], arrays[name], err_msg=f"copy {k} {agent} {name}")
    sizes = [n for local in shared.values() for n in local.module.batch_sizes]
    largest_group = copies if workers == 0 else -(-copies // (2 * workers))  # a worker's group of copies
    assert max(sizes) == largest_group * live, "a round answers every live agent of a group's cycles in one forward"


def test_a_turn_based_game_declared_so_stays_on_the_aec_path_under_auto():
    """forage's parallel_env() is aec_to_parallel over a turn-based game: a later forager would no longer see where
    an earlier one just moved, so the transitions differ, and "auto" keeps the AEC path (recipes.TURN_BASED)."""
    aec, _ = episodes_of(make_env("pzasync.envs.forage"), False, episodes=2, seed=7)
    parallel, _ = episodes_of(make_parallel_env("pzasync.envs.forage"), True, episodes=2, seed=7)
    assert [(t.agent, t.reward) for t in aec] != [(t.agent, t.reward) for t in parallel], "the paths differ here"
    plan = RunPlan(EnvSpec.of("pzasync.envs.forage"), "random", RunConfig())
    assert plan.env_api == "aec" and "env_api" not in plan.auto
    assert RunPlan(EnvSpec.of("pzasync.envs.forage"), "random", RunConfig(env_api="parallel")).env_api == "parallel"
