"""A learner that fits the spaces: where the recipe's learner cannot train an agent (DQN and Box actions), the
first built-in learner that can, so `pzasync train ENV` never refuses an env that a built-in learner fits
(docs/running.md, "Recipes"). Choices the user made are never changed."""

from __future__ import annotations

from typing import Any, Collection

from pzasync.core.global_state import StateRequest
from pzasync.core.groups import resolve_groups
from pzasync.core.spaces import AgentLayout, env_layouts, probe_info_masks
from pzasync.errors import UnsupportedSpaceError
from pzasync.learners import resolve_learner

#: Built-in learners tried, in order, for a learning unit whose recipe learner refuses its spaces.
FALLBACKS = ("ppo",)


def fits(spec: Any, layouts: list[AgentLayout], env: Any = None) -> bool:
    """Whether the learner `spec` accepts agents of these layouts (a player that never learns accepts any). A
    learner whose critic reads the global state (mappo) is checked on the layouts a run gives it, with the state
    beside the observation, made from `env` (an EnvSpec); without `env` such a learner does not fit."""
    cls, options = resolve_learner(spec)
    if not cls.learns:
        return True
    source = cls.state_source(cls.validate_config(layouts[0].agent, options)) if layouts else None
    if source is not None and env is not None:
        layouts = _with_state(env, [layout.agent for layout in layouts], source)
    try:
        for layout in layouts:
            cls.check_spaces(layout)
    except UnsupportedSpaceError:
        return False
    return True


def _with_state(env: Any, agents: list[str], source: str) -> list[AgentLayout]:
    """The layouts of `agents` when they observe the env's global state (from `source`) beside their own."""
    instance = env.with_state(StateRequest(tuple(agents), source)).make()
    try:
        layouts = env_layouts(instance, probe_info_masks(instance))
    finally:
        instance.close()
    return [layouts[agent] for agent in agents]


def fit_learners(env: Any, learners: Any, groups: dict[str, list[str]],
                 chosen: Collection[str] = ()) -> tuple[Any, list[str]]:
    """`learners` (one spec, or a dict by agent, agent group or "*") with every learning unit (an agent, or an
    agent group) whose learner refuses one of its members' spaces given the first of FALLBACKS that accepts
    them all, and one line per change saying what and why. Units in `chosen` (named by --learner-for) keep
    theirs; a unit no built-in learner fits keeps its learner, whose refusal the run then reports."""
    instance = env.make()
    try:
        layouts = env_layouts(instance, probe_info_masks(instance))
    finally:
        instance.close()
    agents = list(layouts)
    group_of = {a: g for g, members in resolve_groups(groups, agents).items() for a in members}
    units: dict[str, list[str]] = {}
    for agent in agents:
        units.setdefault(group_of.get(agent, agent), []).append(agent)
    fitted = dict(learners) if isinstance(learners, dict) else {"*": learners}
    notes: list[str] = []
    for unit, members in units.items():
        spec = fitted.get(unit, fitted.get("*"))
        if unit in chosen or spec is None:
            continue
        spaces = [layouts[m] for m in members]
        if fits(spec, spaces, env):
            continue
        fallback = next((f for f in FALLBACKS if fits(f, spaces, env)), None)
        if fallback is None:
            continue
        fitted[unit] = fallback
        who = f"agent group {unit!r}" if unit in group_of.values() else f"agent {unit!r}"
        name = spec if isinstance(spec, str) else spec[0] if isinstance(spec, tuple) else repr(spec)
        notes.append(f"{who}: {name} cannot train it ({layouts[members[0]].action_space!r} actions), so it "
                     f"trains with {fallback!r}; --learner or --learner-for AGENT=SPEC chooses another")
    return (fitted, notes) if notes else (learners, [])
