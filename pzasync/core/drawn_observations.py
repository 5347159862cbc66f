"""Image observations that an env draws only when it renders.

Some PettingZoo envs read their image observations off the screen they render to, and draw that screen only
when a render mode is set: made without one, pistonball_v6 and cooperative_pong_v6 (PettingZoo 1.27, whose
`draw()` returns at once when `render_mode is None`) give every agent the same frame at every step, and a policy
trained on them can only be blind. `drawn` finds such an env by playing a few random steps, and makes it with
`render_mode="rgb_array"` where its observations then change; the run's plan does this before anything else
(docs/running.md, "Image observations"), so every env copy, env worker and evaluation gets the same env.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from gymnasium import spaces

from pzasync.core.environments import EnvSpec
from pzasync.remote import is_remote_id

#: Random agent steps `drawn` plays to see whether any image observation changes.
PROBE_STEPS = 60
RENDER_MODE = "rgb_array"


def image_agents(env: Any) -> list[str]:
    """Agents whose observation is an image: a 3-dim uint8 Box (possibly stacked by a wrapper)."""
    return [a for a in env.possible_agents
            if isinstance(space := env.observation_space(a), spaces.Box) and len(space.shape or ()) == 3
            and space.dtype == np.uint8]


def observations_change(spec: EnvSpec, seed: int = 0, **overrides: Any) -> bool | None:
    """Whether any image observation of the env changes over `PROBE_STEPS` random agent steps (legal ones where
    the env gives masks); None where the env has no image observation."""
    env = spec.make(**overrides)
    try:
        watched = set(image_agents(env))
        if not watched:
            return None
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        first: dict[str, np.ndarray] = {}
        for steps, agent in enumerate(env.agent_iter()):
            observation, _, terminated, truncated, info = env.last()
            if agent in watched:
                value = np.asarray(observation)
                if agent not in first:
                    first[agent] = value.copy()
                elif not np.array_equal(first[agent], value):
                    return True
            if steps >= PROBE_STEPS:
                break
            if terminated or truncated:
                env.step(None)
                continue
            mask = info.get("action_mask") if isinstance(info, dict) else None
            space = env.action_space(agent)
            if mask is not None and isinstance(space, spaces.Discrete):
                legal = np.flatnonzero(mask)
                env.step(int(legal[rng.integers(legal.size)]) if legal.size else None)
            else:
                space.seed(int(rng.integers(2**31)))
                env.step(space.sample())
        return False
    finally:
        env.close()


def drawn(spec: EnvSpec, seed: int = 0) -> tuple[EnvSpec, str | None]:
    """`spec`, or where its image observations never change without a render mode and do with
    `render_mode="rgb_array"`, the spec with that render mode; and what was done (None: nothing)."""
    if "render_mode" in spec.kwargs or spec.env_set is not None or (
            isinstance(spec.source, str) and is_remote_id(spec.source)):
        return spec, None  # the user's choice; an env set's envs, or a served env, are made elsewhere
    bare = EnvSpec(spec.source, dict(spec.kwargs))  # the env's own frames: a frame stack changes at every step
    if observations_change(bare, seed) is not False:
        return spec, None
    try:
        changes = observations_change(bare, seed, render_mode=RENDER_MODE)
    except TypeError:  # a factory without render_mode
        return spec, None
    if not changes:
        return spec, None
    return (replace(spec, kwargs={**spec.kwargs, "render_mode": RENDER_MODE}),
            f"{RENDER_MODE!r}: the env's image observations stay the same frame without a render mode (it draws "
            f"them only when it renders) and change with one")
