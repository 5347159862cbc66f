"""The compatibility matrix (docs/compatibility.md): unmodified third-party envs train under the async runner.

Each case trains for a short budget with learners that suit the env's action space; the run checks reward
conservation on every episode (it raises otherwise), every learner unit must have updated, and the autouse
fixture fails the case if a process or shared-memory segment is left behind. Heavy cases (image observations,
big boards), and cases whose path another default test already takes (texas hold'em beside leduc;
simple_spread and simple_reference beside their parallel and grouped MPE cases; both forms of rps beside
simple_spread's parallel form; tictactoe, leduc and connect_four beside the runner tests' connect_four runs;
Pendulum beside CartPole and simple continuous; padded simple_tag beside grouped simple_tag; forage beside its
own tests; multiwalker), are marked slow: `python -m pytest -m slow tests/test_compat.py`.
"""

from __future__ import annotations

import importlib.util

import pytest

from pzasync import AsyncRunner, RunConfig

DQN = ("dqn", {"learning_starts": 32, "batch_size": 32})
PPO = ("ppo", {"batch_size": 32, "minibatch_size": 16, "epochs": 1})
slow = pytest.mark.slow


def needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


def pistonball_preprocessed():
    """Pistonball through SuperSuit, built in whichever process asks: grey, 64x64, 3 stacked frames."""
    import supersuit as ss
    from pettingzoo.butterfly import pistonball_v6

    env = pistonball_v6.env(n_pistons=4, max_cycles=40)
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=64, y_size=64)
    return ss.frame_stack_v1(env, 3)


def simple_tag_padded():
    """simple_tag's adversaries and good agent see different amounts; padding lets one policy serve all."""
    import supersuit as ss
    from mpe2 import simple_tag_v3

    return ss.pad_action_space_v0(ss.pad_observations_v0(simple_tag_v3.env(max_cycles=25)))


# (id, env, learners, RunConfig options, marks)
CASES = [
    # Classic: turn-based, action masks, illegal moves impossible by construction.
    ("tictactoe", "pettingzoo.classic.tictactoe_v3", DQN, {}, [slow]),  # turn-based: connect_four covers it
    ("connect_four", "pettingzoo.classic.connect_four_v3", DQN, {}, [slow]),  # test_runners trains on it throughout
    ("rps (Discrete obs)", "pettingzoo.classic.rps_v2", DQN, {}, [slow]),
    ("rps parallel", "pettingzoo.classic.rps_v2:parallel_env", DQN, {}, [slow]),  # simple_spread parallel covers
    ("leduc_holdem", "pettingzoo.classic.leduc_holdem_v4", DQN, {}, [slow, needs("rlcard")]),
    ("texas_holdem", "pettingzoo.classic.texas_holdem_v4", DQN, {}, [slow, needs("rlcard")]),
    ("texas_holdem_no_limit", "pettingzoo.classic.texas_holdem_no_limit_v6", DQN, {}, [slow, needs("rlcard")]),
    ("chess", "pettingzoo.classic.chess_v6", DQN, {}, [slow, needs("chess")]),
    ("go 9x9", ("pettingzoo.classic.go_v5", {"board_size": 9}), DQN, {}, [slow]),
    ("hanabi", "pettingzoo.classic.hanabi_v5", DQN, {}, [slow, needs("pyspiel")]),  # open_spiel, via shimmy
    # MPE (mpe2): simultaneous moves through the AEC API, heterogeneous observation sizes.
    ("simple_spread", ("mpe2.simple_spread_v3", {"max_cycles": 25}), DQN, {}, [slow, needs("mpe2")]),
    ("simple_spread parallel", ("mpe2.simple_spread_v3:parallel_env", {"max_cycles": 25}), DQN, {},
     [needs("mpe2")]),
    ("simple_tag, adversaries grouped", ("mpe2.simple_tag_v3", {"max_cycles": 25}), DQN,
     {"agent_groups": {"adversaries": ["adversary_*"]}}, [slow, needs("mpe2")]),  # pursuit, KAZ: groups
    ("simple_tag padded, one policy", simple_tag_padded, DQN, {"agent_groups": {"all": ["*"]}},
     [slow, needs("mpe2")]),
    ("simple_reference", ("mpe2.simple_reference_v3", {"max_cycles": 25}), DQN, {}, [slow, needs("mpe2")]),
    ("simple continuous", ("mpe2.simple_v3", {"max_cycles": 25, "continuous_actions": True}), PPO, {},
     [needs("mpe2")]),
    # Butterfly: images, continuous actions, agents that die.
    ("pistonball (images, continuous), pistons grouped", ("pettingzoo.butterfly.pistonball_v6",
                                                          {"n_pistons": 4, "max_cycles": 40}), PPO,
     {"agent_groups": {"pistons": ["piston_*"]}}, [slow]),
    ("pistonball + SuperSuit preprocessing", pistonball_preprocessed, PPO,
     {"agent_groups": {"pistons": ["piston_*"]}}, [slow, needs("supersuit")]),
    ("pistonball parallel", ("pettingzoo.butterfly.pistonball_v6:parallel_env", {"n_pistons": 4, "max_cycles": 40}),
     PPO, {"agent_groups": {"pistons": ["piston_*"]}}, [slow]),
    # 280x480x3 frames: DQN's default 100,000-row replay would need ~80 GB of shared memory per agent.
    ("cooperative_pong (images)", ("pettingzoo.butterfly.cooperative_pong_v6", {"max_cycles": 60}), DQN,
     {"buffer_capacity": 1000}, [slow]),
    ("knights_archers_zombies (agents die)", ("pettingzoo.butterfly.knights_archers_zombies_v11",
                                              {"max_cycles": 60}), DQN,
     {"agent_groups": {"archers": ["archer_*"], "knights": ["knight_*"]}}, []),
    ("knights_archers_zombies parallel", ("pettingzoo.butterfly.knights_archers_zombies_v11:parallel_env",
                                          {"max_cycles": 60}), DQN,
     {"agent_groups": {"archers": ["archer_*"], "knights": ["knight_*"]}}, [slow]),
    # SISL.
    ("multiwalker (continuous), walkers grouped", ("pettingzoo.sisl.multiwalker_v9", {"max_cycles": 60}), PPO,
     {"agent_groups": {"walkers": ["walker_*"]}}, [slow, needs("Box2D")]),
    ("multiwalker parallel", ("pettingzoo.sisl.multiwalker_v9:parallel_env", {"max_cycles": 60}), PPO,
     {"agent_groups": {"walkers": ["walker_*"]}}, [slow, needs("Box2D")]),
    ("pursuit, pursuers grouped", ("pettingzoo.sisl.pursuit_v5", {"max_cycles": 60}), DQN,
     {"agent_groups": {"pursuers": ["pursuer_*"]}}, [slow]),  # 3 s; KAZ's archers and knights are grouped
    # Gymnasium, as a one-agent env.
    ("CartPole-v1", "CartPole-v1", DQN, {}, []),
    ("Pendulum-v1 (continuous)", "Pendulum-v1", PPO, {}, [slow]),  # CartPole, simple continuous cover it
    # The project's own env.
    ("forage", "pzasync.envs.forage", DQN, {}, [slow]),  # tests/test_forage_env.py covers it
]


@pytest.mark.parametrize("env, learners, options", [
    pytest.param(env, learners, options, id=name, marks=marks) for name, env, learners, options, marks in CASES])
def test_async_runner_trains_on_the_env_unmodified(env, learners, options):
    if isinstance(env, tuple):
        from pzasync.core.environments import EnvSpec

        env = EnvSpec.of(env[0], **env[1])
    steps = 400
    run = AsyncRunner(env, learners, RunConfig(seed=0, check_rewards=True, backpressure=True, **options))
    result = run.run(agent_steps=steps)
    assert result.stopped_because == "agent-step budget reached"
    if run.plan.env_api == "aec":
        assert result.agent_steps == steps
    else:  # the parallel path takes whole cycles (docs/transitions.md): never past the budget, short of one cycle
        assert steps - len(run.plan.agents) < result.agent_steps <= steps
    assert sum(r.agent_steps for r in result.agents.values()) == result.agent_steps
    assert sum(r.transitions_written for r in result.agents.values()) == result.agent_steps
    units = {p.agent for p in run.plan.learning}
    assert units, "no learner unit"
    for agent, r in result.agents.items():
        assert r.error is None, f"{agent}: {r.error}"
        assert r.updates >= 1, f"the learner of {agent} ({r.group or 'own'}) never updated"
    for group in options.get("agent_groups", {}):
        grouped = [r for r in result.agents.values() if r.group == group]
        assert grouped and len({r.updates for r in grouped}) == 1, f"group {group} members disagree on updates"
