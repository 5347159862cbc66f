"""docs/running.md, Environments: make_env accepts ids, callables, instances and factories; specs travel to
spawned processes."""

from __future__ import annotations

import threading

import gymnasium
import pytest
from pettingzoo import AECEnv
from pettingzoo.classic import rps_v2
from pettingzoo.test import api_test
from proc_helpers import describe_env

import pzasync
from pzasync.core.environments import EnvSpec, known_env_ids
from pzasync.errors import EnvSpecError


@pytest.mark.parametrize(
    "spec, agents",
    [
        ("pettingzoo.classic.connect_four_v3", ["player_0", "player_1"]),
        ("mpe2.simple_spread_v3", ["agent_0", "agent_1", "agent_2"]),
        ("pettingzoo.test.example_envs.generated_agents_parallel_v0", None),  # parallel only: converted
        ("pettingzoo.classic.rps_v2:parallel_env", ["player_0", "player_1"]),
        ("pettingzoo.classic.tictactoe_v3:env", ["player_1", "player_2"]),
        ("CartPole-v1", ["agent_0"]),
    ],
)
def test_make_env_from_strings(spec, agents):
    env = pzasync.make_env(spec)
    assert isinstance(env, AECEnv)
    if agents is not None:
        assert env.possible_agents == agents


def test_make_env_kwargs_reach_the_constructor():
    env = pzasync.make_env("mpe2.simple_spread_v3", N=5)
    assert len(env.possible_agents) == 5


def test_make_env_from_instances_and_factories():
    assert pzasync.make_env(rps_v2.env()).possible_agents == ["player_0", "player_1"]
    assert isinstance(pzasync.make_env(rps_v2.parallel_env()), AECEnv)
    gym_env = pzasync.make_env(gymnasium.make("CartPole-v1"))
    assert gym_env.possible_agents == ["agent_0"]
    assert pzasync.make_env(lambda: rps_v2.env()).possible_agents == ["player_0", "player_1"]


def test_gymnasium_env_passes_pettingzoo_api_test():
    api_test(pzasync.make_env("CartPole-v1"), num_cycles=50)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("pettingzoo.classic.conect_four_v3", r"unknown env 'pettingzoo.classic.conect_four_v3'.*Did you mean: "
                                              r"pettingzoo.classic.connect_four_v3"),
        ("connect_four_v3", r"Did you mean: pettingzoo.classic.connect_four_v3"),
        ("pettingzoo.classic.rps_v2:nothing", r"module 'pettingzoo.classic.rps_v2' has no callable 'nothing'"),
        ("no_such_pkg.mod:env", r"cannot import module 'no_such_pkg.mod'"),
        (42, r"cannot make an env from 42 \(int\); expected an env module id"),
        ("json", r"module 'json' has neither env\(\) nor parallel_env\(\)"),
    ],
)
def test_bad_specs_get_clear_errors(bad, message):
    with pytest.raises(EnvSpecError, match=message):
        pzasync.make_env(bad)


def test_factory_returning_garbage_is_named():
    with pytest.raises(EnvSpecError, match=r"returned 'str', which is not a PettingZoo or Gymnasium env"):
        pzasync.make_env(lambda: "nope")


def test_known_env_ids_include_families_and_bundled_envs():
    ids = known_env_ids()
    assert "pettingzoo.classic.connect_four_v3" in ids and "mpe2.simple_spread_v3" in ids
    assert "pettingzoo.butterfly.pistonball_v6" in ids


def _closure_factory(n):
    def make():
        return pzasync.make_env("mpe2.simple_spread_v3", N=n)
    return make


@pytest.mark.parametrize(
    "spec, agents, shape",
    [
        (EnvSpec.of("pettingzoo.classic.connect_four_v3"), ["player_0", "player_1"], (6, 7, 2)),
        (EnvSpec.of(lambda: rps_v2.env(num_actions=5)), ["player_0", "player_1"], ()),
        (EnvSpec.of(_closure_factory(4)), ["agent_0", "agent_1", "agent_2", "agent_3"], (24,)),
    ],
    ids=["module-id", "lambda", "closure"],
)
def test_env_specs_are_rebuilt_in_spawned_processes(spawn_ctx, spec, agents, shape):
    queue = spawn_ctx.Queue()
    proc = spawn_ctx.Process(target=describe_env, args=(spec, queue))
    proc.start()
    try:
        pid, got_agents, got_shape = queue.get(timeout=60)
    finally:
        proc.join(timeout=30)
    assert pid == proc.pid and proc.exitcode == 0
    assert got_agents == agents and tuple(got_shape) == shape


def test_live_env_and_unpicklable_captures_are_refused():
    with pytest.raises(EnvSpecError, match=r"a live env instance \(OrderEnforcingWrapper\) cannot be sent"):
        EnvSpec.of(rps_v2.env())
    lock = threading.Lock()
    with pytest.raises(EnvSpecError, match=r"cannot be sent to a spawned process: it captures something unpicklable"):
        EnvSpec.of(lambda: (lock, rps_v2.env())[1])
