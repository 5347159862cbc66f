"""The parallel path in columns (core/parallel_columns.py) against its reference, the path of one `PendingDecision`
and one `Transition` per agent and step: the same rows in every buffer, field by field and in order, the same
episodes, counts and NaN reports, on envs whose agents die and join, teams of unequal spaces, groups, several
copies, budgets and `max_episode_steps` that cut episodes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.core.parallel_columns import columns_apply
from pzasync.core.spaces import agent_layout
from pzasync.runtime.actor import Actor, acting_agents, build_actor
from pzasync.runtime.plan import RunPlan

IDLE_DQN = ("dqn", {"learning_starts": 10**9})


class Glitchy(ParallelEnv):
    """Three agents; b pays NaN at step 2; c ends at step 3 with an infinite final observation; the rest are
    truncated at step 5."""

    metadata = {"name": "glitchy"}
    possible_agents = ["a", "b", "c"]

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.array([0, i], np.float32) for i, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        acted = list(self.agents)
        rewards = {a: float(actions[a]) - 1.0 for a in acted}
        if self.t == 2 and "b" in rewards:
            rewards["b"] = float("nan")
        terminations = {a: a == "c" and self.t == 3 for a in acted}
        truncations = dict.fromkeys(acted, self.t >= 5)
        obs = {a: np.array([self.t, i], np.float32) for i, a in enumerate(self.possible_agents) if a in acted}
        if terminations.get("c"):
            obs["c"] = np.array([np.inf, 2], np.float32)
        self.agents = [a for a in acted if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, {a: {} for a in acted}


def _actors(env_id, learners, config: RunConfig, **kwargs):
    """The actor of a plan twice, on the same seeds: in columns, and on the reference path."""
    out = []
    for columns in (True, False):
        plan = RunPlan(EnvSpec.of(env_id, **kwargs), learners, config)
        plan.allocate()
        actor = build_actor(plan, acting_agents(plan), plan.stats, paced=False)
        if not columns:
            actor = Actor(dataclasses.replace(actor.context, columns=False))
        out.append((plan, actor))
    return out


def _run(plan, actor, steps, seed):
    summaries = []
    taken = actor.run(agent_steps=steps, seed=seed, keep_going=lambda: True, on_episode=summaries.append)
    rows = {}
    for unit in plan.learning:
        chunks = []
        while (chunk := unit.buffer.read_new(None)) is not None:
            chunks.append(chunk)
        rows[unit.agent] = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]} if chunks else {}
    counts = {a: (x.count.steps, x.count.written, x.count.nonfinite) for a, x in actor.agents.items()}
    episodes = [(s.index, s.copy, {a: repr(r) for a, r in s.returns.items()}, s.agent_steps, s.cut_by_actor)
                for s in summaries]  # repr: exact, and NaN equals NaN
    return taken, rows, episodes, counts


@pytest.mark.timeout(240)
@pytest.mark.parametrize("env_id, kwargs, learners, groups, copies, steps, max_steps", [
    ("test_parallel:Comings", {}, IDLE_DQN, {}, 3, 700, None),             # agents die and join, one per unit
    ("test_parallel_columns:Glitchy", {}, IDLE_DQN, {"all": ["*"]}, 2, 500, None),   # NaN reward, inf final obs
    ("mpe2.simple_spread_v3", {"N": 3, "max_cycles": 10}, IDLE_DQN, {"team": ["agent_*"]}, 4, 1_000, None),
    ("mpe2.simple_tag_v3", {"max_cycles": 9}, {"chasers": IDLE_DQN, "agent_0": "ppo"},
     {"chasers": ["adversary_*"]}, 3, 900, 20),                            # unequal spaces; PPO's extras; a cut
    pytest.param("pettingzoo.sisl.pursuit_v5", {"max_cycles": 30}, IDLE_DQN, {"pursuers": ["pursuer_*"]}, 1, 1_000,
                 None, marks=pytest.mark.slow),                            # 3 s
], ids=["dying-and-joining", "nonfinite", "simple_spread-group", "simple_tag-teams", "pursuit"])
def test_columns_write_what_the_reference_writes(env_id, kwargs, learners, groups, copies, steps, max_steps):
    config = RunConfig(envs_per_actor=copies, env_api="parallel", agent_groups=groups, progress=False,
                       out_dir=None, max_episode_steps=max_steps, seed=3,
                       check_rewards="Glitchy" not in env_id)  # a NaN reward fails conservation on both paths
    (plan_c, columns), (plan_r, reference) = _actors(env_id, learners, config, **kwargs)
    try:
        assert columns._column_sink() is not None and reference._column_sink() is None
        got, expected = _run(plan_c, columns, steps, seed=9), _run(plan_r, reference, steps, seed=9)
        assert got[0] == expected[0] and steps - copies * len(plan_c.agents) < got[0] <= steps
        assert got[2] == expected[2] and any(s[4] for s in got[2]), "the same episodes, some cut"
        assert max_steps is not None or any(not s[4] for s in got[2]), "some episodes ended by the env"
        assert got[3] == expected[3], "the same steps, rows written and NaN reports per agent"
        assert got[1].keys() == expected[1].keys()
        for unit, columns_rows in got[1].items():
            reference_rows = expected[1][unit]
            assert columns_rows.keys() == reference_rows.keys(), unit
            assert len(reference_rows["reward"]) > 0
            for name, values in reference_rows.items():
                np.testing.assert_array_equal(columns_rows[name], values, err_msg=f"{unit} {name}")
    finally:
        for plan, actor in ((plan_c, columns), (plan_r, reference)):
            actor.close()
            plan.release()  # conftest's no_leaks checks that nothing is left


def test_the_nonfinite_env_is_reported_alike():
    """Glitchy's NaN reward and infinite final observation are counted on both paths (the equality test above
    compares the counts; here they are not zero)."""
    config = RunConfig(env_api="parallel", progress=False, out_dir=None, agent_groups={"all": ["*"]},
                       check_rewards=False)
    (plan_c, columns), (plan_r, reference) = _actors("test_parallel_columns:Glitchy", IDLE_DQN, config)
    try:
        for actor in (columns, reference):
            actor.run(agent_steps=60, seed=1, keep_going=lambda: True, on_episode=lambda s: None)
            assert actor.agents["b"].count.nonfinite > 0 and actor.agents["c"].count.nonfinite > 0
            assert actor.agents["a"].count.nonfinite == 0
    finally:
        for plan, actor in ((plan_c, columns), (plan_r, reference)):
            actor.close()
            plan.release()


def test_columns_stay_off_where_they_do_not_apply():
    """Action masks, nested observations, a recurrent policy and env workers keep the reference path."""
    box, discrete = spaces.Box(0, 1, (3,), np.float32), spaces.Discrete(2)
    assert columns_apply({"a": agent_layout("a", box, discrete)})
    assert not columns_apply({"a": agent_layout("a", box, discrete, info_mask=True)})
    assert not columns_apply({"a": agent_layout("a", spaces.Dict({"x": box, "y": box}), discrete)})
    config = RunConfig(env_api="parallel", progress=False, out_dir=None)
    plan = RunPlan(EnvSpec.of("mpe2.simple_spread_v3", N=2), ("ppo", {"memory": "gru"}), config)
    plan.allocate()
    try:
        actor = build_actor(plan, acting_agents(plan), plan.stats, paced=False)
        assert actor._column_sink() is None, "a recurrent policy's memory is per (copy, agent)"
        actor.close()
    finally:
        plan.release()
    plan = RunPlan(EnvSpec.of("mpe2.simple_spread_v3", N=2), IDLE_DQN,
                   RunConfig(env_api="parallel", progress=False, out_dir=None, env_workers=1, envs_per_actor=2))
    plan.allocate()
    try:
        actor = build_actor(plan, acting_agents(plan), plan.stats, paced=False)
        assert actor._column_sink() is None, "env workers step the reference path"
        actor.close()
    finally:
        plan.release()
