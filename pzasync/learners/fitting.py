"""A learner that fits the spaces: where the recipe's learner cannot train an agent (DQN and Box actions), the
first built-in learner that can, so `pzasync train ENV` never refuses an env that a built-in learner fits
(docs/running.md, "Recipes"). Choices the user made are never changed."""

from __future__ import annotations

from typing import Any, Collection

from pzasync.core.groups import resolve_groups
from pzasync.core.spaces import AgentLayout, env_layouts, probe_info_masks
from pzasync.errors import UnsupportedSpaceError
from pzasync.learners import resolve_learner

#: Built-in learners tried, in order, for a learning unit whose recipe learner refuses its spaces.
FALLBACKS = ("ppo",)


def fits(spec: Any, layouts: list[AgentLayout]) -> bool:
    """Whether the learner `spec` accepts agents of these layouts (a player that never learns accepts any)."""
    cls, _ = resolve_learner(spec)
    if not cls.learns:
        return True
    try:
        for layout in layouts:
            cls.check_spaces(layout)
    except UnsupportedSpaceError:
        return False
    return True


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
        if fits(spec, spaces):
            continue
        fallback = next((f for f in FALLBACKS if fits(f, spaces)), None)
        if fallback is None:
            continue
        fitted[unit] = fallback
        who = f"agent group {unit!r}" if unit in group_of.values() else f"agent {unit!r}"
        name = spec if isinstance(spec, str) else spec[0] if isinstance(spec, tuple) else repr(spec)
        notes.append(f"{who}: {name} cannot train it ({layouts[members[0]].action_space!r} actions), so it "
                     f"trains with {fallback!r}; --learner or --learner-for AGENT=SPEC chooses another")
    return (fitted, notes) if notes else (learners, [])
