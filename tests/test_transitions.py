"""docs/transitions.md, rules 1-9: `rollout` assembles exactly the AEC transitions, on a hand-checked env and on
real ones."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.utils.wrappers import BaseWrapper
from scripted_env import ScriptedEnv

import pzasync
from pzasync.core.collect import run_episodes, transitions_to_arrays
from pzasync.core.transitions import LayoutBook, TransitionAssembler
from pzasync.errors import RewardConservationError, UnsupportedSpaceError


def always_one(agent, obs, mask):
    return 1


# ------------------------------------------------------------------------------------------------ hand-checked
@pytest.mark.parametrize("mask_in_obs", [False, True], ids=["mask-in-info", "mask-in-obs"])
def test_scripted_episode_matches_hand_derivation(mask_in_obs):
    episodes = []
    out = pzasync.rollout(ScriptedEnv(mask_in_obs), always_one, agent_steps=6, seed=3, episodes=episodes)
    p0, p1 = out["p0"], out["p1"]
    # p0: +10 from each of p1's two moves, +1 from its own; its last decision is cut by its own truncation.
    np.testing.assert_array_equal(p0["reward"], [11, 11, 1, 1])
    np.testing.assert_array_equal(p0["terminated"], [False] * 4)
    np.testing.assert_array_equal(p0["truncated"], [False, False, False, True])
    np.testing.assert_array_equal(p0["obs"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(p0["next_obs"][:, 0], [1, 2, 3, 4])
    # p1: its first +10 came before it ever acted (pre-decision); it dies on its second move.
    np.testing.assert_array_equal(p1["reward"], [11, -99])
    np.testing.assert_array_equal(p1["terminated"], [False, True])
    np.testing.assert_array_equal(p1["truncated"], [False, False])
    np.testing.assert_array_equal(p0["action_mask"], [[1, 1], [0, 1], [1, 1], [0, 1]])
    np.testing.assert_array_equal(p0["next_action_mask"], [[0, 1], [1, 1], [0, 1], [1, 1]])
    assert p0["obs"].shape == (4, 2), "the stored observation excludes the mask"
    assert episodes[0].returns == {"p0": 24.0, "p1": -78.0}
    assert episodes[0].agent_steps == 6 and not episodes[0].cut_by_actor


def test_budget_cut_truncates_every_pending_transition():
    env = ScriptedEnv()
    episodes = []
    out = pzasync.rollout(env, always_one, agent_steps=3, seed=0, episodes=episodes)
    # Decisions: p0, p1, p0. The cut comes at p1's second turn, before it acts again.
    np.testing.assert_array_equal(out["p0"]["reward"], [11, 1])
    np.testing.assert_array_equal(out["p0"]["truncated"], [False, True])
    np.testing.assert_array_equal(out["p1"]["reward"], [11])
    np.testing.assert_array_equal(out["p1"]["truncated"], [True])
    np.testing.assert_array_equal(out["p1"]["next_obs"][0], env.observe("p1"))
    assert episodes[0].cut_by_actor and episodes[0].returns == {"p0": 12.0, "p1": 21.0}


def test_seed_only_on_first_reset_and_dead_steps_not_counted():
    env = ScriptedEnv()
    episodes = []
    out = pzasync.rollout(env, always_one, agent_steps=18, seed=7, episodes=episodes)
    assert env.reset_seeds == [7, None, None]
    assert sum(len(v["reward"]) for v in out.values()) == 18, "one transition per decision, None steps excluded"
    assert [e.agent_steps for e in episodes] == [6, 6, 6]


def test_max_episode_steps_cuts_episodes():
    episodes = []
    pzasync.rollout(ScriptedEnv(), always_one, agent_steps=8, max_episode_steps=4, episodes=episodes)
    assert [e.agent_steps for e in episodes] == [4, 4] and all(e.cut_by_actor for e in episodes)


def test_conservation_check_catches_a_lost_reward():
    env = ScriptedEnv()
    env.reset()
    assembler = TransitionAssembler(LayoutBook(env))
    assembler.start_episode()
    obs, reward, term, trunc, info = env.last()
    assembler.turn("p0", obs, reward, term, trunc, info)
    with pytest.raises(RewardConservationError, match=r"agent 'p0': the env paid 5\.0"):
        assembler.end_episode({"p0": 5.0})


# ------------------------------------------------------------------------------------------------ oracle
class Recorder(BaseWrapper):
    """Logs every turn `rollout` reads, every step it takes, and every direct `observe` (the cut)."""

    def __init__(self, env):
        super().__init__(env)
        self.log = []
        self._in_last = False

    def reset(self, seed=None, options=None):
        self.log.append(("reset",))
        super().reset(seed=seed, options=options)

    def last(self, observe=True):
        self._in_last = True
        try:
            result = super().last(observe)
        finally:
            self._in_last = False
        self.log.append(("turn", self.agent_selection, result))
        return result

    def step(self, action):
        agent = self.agent_selection
        super().step(action)
        self.log.append(("step", action, agent, dict(self.rewards)))

    def observe(self, agent):
        obs = super().observe(agent)
        if not self._in_last:
                self.log.append(("turn", agent, (obs, None, False, True, {}), "cut"))
        return obs


def reference_transitions(log):
    """An independent, deliberately plain reading of docs/transitions.md applied to a recorded run."""
    episodes, current = [], None
    for event in log:
        if event[0] == "reset":
            current = []
            episodes.append(current)
        else:
            current.append(event)
    result = {}
    for events in episodes:
        moments = {}  # agent -> [(obs, reward, term, trunc, action)]
        paid_since_decision = {}
        for i, event in enumerate(events):
            if event[0] == "step":
                _, action, actor, rewards = event
                if action is not None:
                    paid_since_decision[actor] = 0.0
                for a, r in rewards.items():
                    paid_since_decision[a] = paid_since_decision.get(a, 0.0) + r
                continue
            agent, (obs, reward, term, trunc, _info) = event[1], event[2]
            if len(event) == 4:  # a cut: the pending transition gets what was paid since the decision
                moments.setdefault(agent, []).append((obs, paid_since_decision.get(agent, 0.0), False, True, None))
                continue
            followed_by_step = i + 1 < len(events) and events[i + 1][0] == "step"
            if not followed_by_step:
                continue  # the turn at which the actor stopped; the cut entries complete it
            moments.setdefault(agent, []).append((obs, reward, term, trunc, events[i + 1][1]))
        for agent, seq in moments.items():
            for k in range(len(seq) - 1):
                if seq[k][4] is None:
                    continue
                nxt = seq[k + 1]
                result.setdefault(agent, []).append((seq[k][0], seq[k][4], float(nxt[1]), nxt[0], nxt[2], nxt[3]))
    return result


def masked_random(seed):
    rng = np.random.default_rng(seed)

    def choose(mask, space):
        if mask is not None and mask.any():  # generated_agents_env_action_mask_obs samples random masks
            return int(rng.choice(np.flatnonzero(mask)))
        if hasattr(space, "n"):
            return int(rng.integers(space.n))
        return rng.uniform(space.low, space.high).astype(space.dtype)

    return choose


def _mask_of(obs, info):
    if isinstance(obs, dict) and "action_mask" in obs:
        return obs["action_mask"]
    return info.get("action_mask") if isinstance(info, dict) else None


def _strip(obs):
    return obs["observation"] if isinstance(obs, dict) and "observation" in obs else obs


ENVS = [
    "pettingzoo.classic.tictactoe_v3",
    "pettingzoo.classic.connect_four_v3",
    "pettingzoo.classic.rps_v2",
    "pettingzoo.butterfly.knights_archers_zombies_v11",
    "mpe2.simple_spread_v3",
    "pettingzoo.test.example_envs.generated_agents_env_v0",
    "pettingzoo.test.example_envs.generated_agents_env_action_mask_info_v0",
    "pettingzoo.test.example_envs.generated_agents_parallel_v0",
]


@pytest.mark.parametrize("env_id", ENVS)
def test_rollout_equals_reference_and_conserves_rewards(env_id):
    steps = 400
    choose = masked_random(1)
    env = Recorder(pzasync.make_env(env_id))
    got = pzasync.rollout(env, lambda a, o, m: choose(m, env.action_space(a)), agent_steps=steps, seed=5)
    # check_rewards=True (the default) verified every episode's conservation (docs/transitions.md, invariant 8)
    # against the env.
    expected = reference_transitions(env.log)
    assert sorted(got) == sorted(expected)
    for agent, rows in expected.items():
        ours = got[agent]
        assert len(ours["reward"]) == len(rows), agent
        for k, (obs, action, reward, next_obs, term, trunc) in enumerate(rows):
            np.testing.assert_array_equal(ours["obs"][k], _strip(obs))
            np.testing.assert_array_equal(ours["next_obs"][k], _strip(next_obs))
            np.testing.assert_array_equal(ours["action"][k], action)
            assert ours["reward"][k] == np.float32(reward)
            assert (ours["terminated"][k], ours["truncated"][k]) == (term, trunc), (agent, k)
    assert sum(len(v["reward"]) for v in got.values()) == steps


def test_first_episode_of_generated_agents_with_random_obs_masks_equals_reference():
    """This test env re-draws every type's spaces at each reset and judges moves against a freshly sampled mask,
    so episodes are short and no two share spaces; rollout refuses to stack such an agent (tested below), and
    the assembly of one episode is checked here with `run_episodes`, the loop rollout is built on."""
    choose = masked_random(1)
    env = Recorder(pzasync.make_env("pettingzoo.test.example_envs.generated_agents_env_action_mask_obs_v0"))
    book, collected, episodes = LayoutBook(env), [], []
    run_episodes(env, lambda a, o, m: (choose(m, env.action_space(a)), {}), collected.append, agent_steps=400,
                 seed=5, layouts=book, on_episode=episodes.append, keep_going=lambda: not episodes)
    got = transitions_to_arrays(collected, book.layouts)
    expected = reference_transitions(env.log)
    assert len(episodes) == 1 and sorted(got) == sorted(expected)
    for agent, rows in expected.items():
        assert [float(r[2]) for r in rows] == got[agent]["reward"].tolist()
        for k, row in enumerate(rows):
            np.testing.assert_array_equal(got[agent]["obs"][k], row[0]["observation"])
    with pytest.raises(UnsupportedSpaceError, match=r"agent '.*': its observation shape changed between episodes"):
        pzasync.rollout(env, lambda a, o, m: choose(m, env.action_space(a)), agent_steps=400, seed=5)


def test_rewards_in_transitions_add_up_to_returns_on_knights_archers_zombies():
    """Agents die mid-episode in KAZ; per episode, transitions + pre-decision rewards equal the logged return."""
    choose = masked_random(0)
    env = pzasync.make_env("pettingzoo.butterfly.knights_archers_zombies_v11", max_cycles=60)
    episodes = []
    out = pzasync.rollout(env, lambda a, o, m: choose(m, env.action_space(a)), agent_steps=600, seed=2,
                          episodes=episodes)
    assert len(episodes) >= 2
    total_returns = sum(sum(e.returns.values()) for e in episodes)
    total_in_transitions = sum(float(v["reward"].astype(np.float64).sum()) for v in out.values())
    assert total_in_transitions == pytest.approx(total_returns, abs=1e-4)


def test_same_seed_same_transitions():
    choose_a, choose_b = masked_random(3), masked_random(3)
    env_a = pzasync.make_env("pettingzoo.classic.connect_four_v3")
    env_b = pzasync.make_env("pettingzoo.classic.connect_four_v3")
    a = pzasync.rollout(env_a, lambda ag, o, m: choose_a(m, None), agent_steps=200, seed=9)
    b = pzasync.rollout(env_b, lambda ag, o, m: choose_b(m, None), agent_steps=200, seed=9)
    for agent in a:
        for key in a[agent]:
            np.testing.assert_array_equal(a[agent][key], b[agent][key])


def test_cut_mid_cycle_of_a_converted_parallel_env_pays_only_what_came_since_the_decision():
    """parallel_to_aec only refreshes _cumulative_rewards when a cycle ends, so mid-cycle it still shows a reward
    the agent already received; a transition cut there must get what was paid since its decision (nothing)."""
    actions = iter([0, 1, 2])  # rock, paper, scissors: player_1 wins the first round
    episodes = []
    out = pzasync.rollout("pettingzoo.classic.rps_v2:parallel_env", lambda a, o, m: next(actions), agent_steps=3,
                          seed=0, episodes=episodes)
    assert out["player_0"]["reward"].tolist() == [-1.0, 0.0]
    assert out["player_0"]["truncated"].tolist() == [False, True]
    assert out["player_1"]["reward"].tolist() == [1.0] and out["player_1"]["truncated"].tolist() == [True]
    assert episodes[0].returns == {"player_0": -1.0, "player_1": 1.0}


# ------------------------------------------------------------------------------ reading the env through its wrappers
class DoublingRewards(BaseWrapper):
    """A wrapper that pays twice what the env pays: it keeps `rewards` and `_cumulative_rewards` of its own."""

    def _double(self):
        self.rewards = {a: 2 * r for a, r in self.env.rewards.items()}
        self._cumulative_rewards = {a: 2 * r for a, r in self.env._cumulative_rewards.items()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self._double()

    def step(self, action):
        super().step(action)
        self._double()


def test_transitions_read_the_env_through_its_wrappers():
    """The stepper reads what the outermost env shows (`env.last()`, `env.rewards`), so a wrapper that pays its
    own rewards is what the transitions hold, and the rewards are conserved."""
    from pzasync.core.environments import make_env

    plain = pzasync.rollout(make_env("pettingzoo.classic.connect_four_v3"), lambda a, o, m: np.flatnonzero(m)[0],
                            agent_steps=200, seed=0)
    doubled = pzasync.rollout(DoublingRewards(make_env("pettingzoo.classic.connect_four_v3")),
                              lambda a, o, m: np.flatnonzero(m)[0], agent_steps=200, seed=0)
    for agent in ("player_0", "player_1"):
        assert np.abs(plain[agent]["reward"]).sum() > 0, "the games must pay something for this to mean anything"
        np.testing.assert_array_equal(doubled[agent]["reward"], 2 * plain[agent]["reward"])
