"""Checks users can run on their own envs and learners, in the habit of `pettingzoo.test`.

    from pzasync.testing import check_env, check_learner
    check_env("mypkg.envs:my_env")                  # spaces storable, transitions conserve rewards, spawnable
    check_learner("mypkg.learners:MyLearner", "mypkg.envs:my_env")   # trains briefly in both runners

Each check raises an `AssertionError` or a `pzasync` error that says what is wrong.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from pzasync.config import RunConfig
from pzasync.core.collect import rollout
from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.evaluation.evaluate import random_actor
from pzasync.runners import AsyncRunner, SequentialRunner


def _describe_in_child(spec: EnvSpec, queue: Any) -> None:
    try:
        env = spec.make()
        queue.put(("ok", list(env.possible_agents)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def check_env(env: Any, agent_steps: int = 2000, seed: int = 0, spawn: bool = True) -> dict[str, Any]:
    """Check that pzasync can run `env`: layouts for every agent, docs/transitions.md transitions with conserved rewards
    over `agent_steps` random legal decisions, and (with `spawn`) that a spawned process rebuilds it."""
    spec = EnvSpec.of(env)
    instance = spec.make()
    try:
        agents = list(instance.possible_agents)
        assert agents, "the env declares no possible_agents"
        layouts = env_layouts(instance, probe_info_masks(instance, seed=seed))
    finally:
        instance.close()
    env_for_rollout = spec.make()
    episodes: list = []
    data = rollout(env_for_rollout, random_actor(env_for_rollout, seed), agent_steps=agent_steps, seed=seed,
                   episodes=episodes)
    decisions = sum(len(v["reward"]) for v in data.values())
    assert decisions == agent_steps, f"{decisions} transitions for {agent_steps} decisions"
    for agent, arrays in data.items():
        for key in ("terminated", "truncated"):
            assert arrays[key].dtype == bool, f"agent {agent!r}: {key} is not boolean"
    if spawn:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=_describe_in_child, args=(spec, queue))
        proc.start()
        try:
            status, detail = queue.get(timeout=120)
        finally:
            proc.join(timeout=30)
            queue.close()
        assert status == "ok", f"a spawned process could not rebuild the env: {detail}"
        assert detail == agents, f"the spawned env has agents {detail}, the original {agents}"
    return {"agents": agents, "layouts": layouts, "episodes": len(episodes), "transitions": decisions}


def check_learner(learner: Any, env: Any, agent_steps: int = 1500, seed: int = 0) -> dict[str, Any]:
    """Train `learner` (for every agent) briefly in both runners and check that it updates and publishes."""

    results = {}
    for runner in (SequentialRunner, AsyncRunner):
        config = RunConfig(seed=seed, buffer_capacity=max(1000, agent_steps), publish_every=1)
        run = runner(env, learner, config)
        result = run.run(agent_steps=agent_steps)
        for agent, r in result.agents.items():
            if not run.plan.agents[agent].learns:
                continue
            assert r.error is None, f"{runner.__name__}: the learner of {agent!r} crashed: {r.error}"
            assert r.updates > 0, f"{runner.__name__}: the learner of {agent!r} never updated in {agent_steps} steps"
            assert r.published_version >= 1, f"{runner.__name__}: {agent!r} never published a policy"
        results[runner.kind] = result
    return results
