"""Reference loops for speed comparisons: the env alone, and the env plus the same policy forwards.

`bare_loop` is the single-actor limit the runtime is measured against: `agent_iter`, `last`, the policy's
forward on the observation (optional), `step`; no transitions, buffers, slots or counters.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .actor import env_action_converter
from .environments import EnvSpec
from .evaluate import policy_actor, random_actor
from .plan import RunPlan
from .spaces import env_layouts, probe_info_masks
from .transitions import LayoutBook


def bare_loop(env: Any, learners: Any | None, agent_steps: int, seed: int = 0) -> float:
    """Agent steps per second of a plain AEC loop; with `learners`, each decision runs that agent's policy
    forward (the same modules the actor runs), else a random legal action."""
    spec = EnvSpec.of(env)
    instance = spec.make()
    layouts = env_layouts(instance, probe_info_masks(instance, seed=seed))
    if learners is None:
        actors = {a: random_actor(instance, seed + i) for i, a in enumerate(layouts)}
    else:
        plan = RunPlan(spec, learners)
        actors = {a: policy_actor(p.build_policy(seed), p.layout, explore=True) for a, p in plan.agents.items()}
    to_env = env_action_converter(layouts)
    book = LayoutBook(instance, layouts, fixed=True)
    steps, first = 0, True
    start = time.perf_counter()
    while steps < agent_steps:
        instance.reset(seed=seed if first else None)
        first = False
        for agent in instance.agent_iter():
            observation, _reward, terminated, truncated, info = instance.last()
            if terminated or truncated:
                instance.step(None)
                continue
            if steps >= agent_steps:
                break
            obs, mask = book.get(agent, info).split(observation, info)
            instance.step(to_env(agent, actors[agent](agent, obs, mask)))
            steps += 1
    elapsed = time.perf_counter() - start
    instance.close()
    return steps / elapsed


def summarize(values: list[float]) -> dict[str, float]:
    """Median and spread of repeated measurements."""
    arr = np.asarray(values, dtype=float)
    return {"median": float(np.median(arr)), "min": float(arr.min()), "max": float(arr.max()), "n": len(arr)}
