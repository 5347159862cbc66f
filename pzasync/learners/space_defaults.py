"""The recipe of an env that has none in the registry, chosen from its spaces (docs/running.md, "Recipes"):
`pzasync train ENV` prints what it chose and how to override it, and never refuses an env a built-in learner
fits.

- Actions: DQN (DEFAULT_RECIPE's) where every agent's actions are Discrete, else PPO, which takes Box actions
  too (`fitting.fit_learners` still gives PPO to the units DQN refuses where the env mixes the two).
- Teams: agents named PREFIX_N with one prefix and identical spaces share parameters through one agent group
  named PREFIX (pistonball's piston_*, pursuit's pursuer_*, KAZ's archer_* and knight_*), except "player_*",
  PettingZoo's name for the opposing seats of a board or card game, which self-play (`--self-play`) groups.
- Images: large raw frames (an RGB uint8 image wider or taller than IMAGE_SIDE) go through SuperSuit's grey,
  resize and frame stack (IMAGE_WRAPPERS) where SuperSuit is installed; the policy's CNN (networks.py) reads
  them either way, PPO's starting orthogonal behind ReLU heads (its `image_init` and `activation` defaults).

This lives with the learners because it asks what they accept (`fitting.fits`, `networks.is_image`); the
recipes package sits below them.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from gymnasium import spaces

from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.learners.fitting import fits
from pzasync.learners.networks import is_image
from pzasync.recipes import DEFAULT_RECIPE, Recipe
from pzasync.recipes.registry import IMAGE_WRAPPERS

#: A raw frame larger than this on either side is preprocessed (IMAGE_WRAPPERS) when no wrapper is given.
IMAGE_SIDE = 84
#: Agent-name prefixes never grouped into a team: the competing seats of classic games.
OPPONENT_PREFIXES = ("player",)
_NUMBERED = re.compile(r"^(?P<prefix>.+?)_\d+$")


def team_groups(observation_spaces: dict[str, Any], action_spaces: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Agent groups for teams: each name prefix (PREFIX_N) of two or more agents whose observation and action
    spaces are all equal, as {PREFIX: ("PREFIX_*",)}; OPPONENT_PREFIXES left out."""
    members: dict[str, list[str]] = {}
    for agent in observation_spaces:
        match = _NUMBERED.match(agent)
        if match:
            members.setdefault(match["prefix"], []).append(agent)
    groups: dict[str, tuple[str, ...]] = {}
    for prefix, agents in members.items():
        first = agents[0]
        if (len(agents) >= 2 and prefix not in OPPONENT_PREFIXES
                and all(observation_spaces[a] == observation_spaces[first] for a in agents)
                and all(action_spaces[a] == action_spaces[first] for a in agents)):
            groups[prefix] = (f"{prefix}_*",)
    return groups


def raw_frames(space: Any) -> bool:
    """An RGB uint8 image with a side over IMAGE_SIDE: what IMAGE_WRAPPERS shrink."""
    return (isinstance(space, spaces.Box) and is_image(space) and space.dtype == "uint8" and space.shape[-1] == 3
            and max(space.shape[:2]) > IMAGE_SIDE)


def frame_preprocessing(observation_spaces: dict[str, Any]) -> tuple[tuple[str, ...], list[str]]:
    """The wrappers for an env's observation spaces when neither the user nor a recipe gives any: IMAGE_WRAPPERS
    where an agent sees large raw frames and SuperSuit is installed, else none; and the line saying so."""
    frames = [space for space in observation_spaces.values() if raw_frames(space)]
    if not frames:
        return (), []
    if importlib.util.find_spec("supersuit") is None:
        return (), [f"{frames[0].shape} raw frames go to the CNN as they are (install supersuit for grey, smaller, "
                    f"stacked frames)"]
    return IMAGE_WRAPPERS, [f"{frames[0].shape} frames preprocessed by SuperSuit: " + " | ".join(IMAGE_WRAPPERS)
                            + " (--wrapper SPEC replaces them, --wrapper none keeps raw frames)"]


def frame_wrappers(env: Any) -> tuple[tuple[str, ...], list[str]]:
    """`frame_preprocessing` for `env` (an EnvSpec without wrappers) as made: for an env whose recipe was
    measured on other observations (knights_archers_zombies with `obs_method="image"` sees 512x512 frames)."""
    instance = env.make()
    try:
        return frame_preprocessing({a: instance.observation_space(a) for a in instance.possible_agents})
    finally:
        instance.close()


def recipe_from_spaces(env: Any) -> tuple[Recipe, list[str]]:
    """The recipe for `env` (an EnvSpec, with any wrappers the user gave) chosen from its spaces, and the lines
    `pzasync train` prints about it: what was chosen, why, and the flag that overrides each choice."""
    instance = env.make()
    try:
        layouts = env_layouts(instance, probe_info_masks(instance))
        observation_spaces = {a: instance.observation_space(a) for a in instance.possible_agents}
        action_spaces = {a: instance.action_space(a) for a in instance.possible_agents}
    finally:
        instance.close()
    groups = team_groups(observation_spaces, action_spaces)
    learner = DEFAULT_RECIPE.learner if fits(DEFAULT_RECIPE.learner, list(layouts.values())) else "ppo"
    wrappers: tuple[str, ...] = ()
    said = []
    if learner != DEFAULT_RECIPE.learner:
        said.append(f"learner {learner} ({DEFAULT_RECIPE.learner} takes only Discrete actions; --learner chooses)")
    if groups:
        said.append("shared parameters for teams of agents with the same spaces: " + ", ".join(
            f"group {name!r} = {patterns[0]}" for name, patterns in groups.items())
            + " (--independent: one learner each; --group NAME=PATTERN chooses)")
    if not env.wrappers:
        wrappers, frames_said = frame_preprocessing(observation_spaces)
        said += frames_said
    recipe = Recipe(learner=learner, agent_groups=groups, wrappers=wrappers,
                    reason="Chosen from the env's spaces (learners/space_defaults.py), not measured.")
    if not said:
        return recipe, []
    return recipe, [f"{env.name} has no recipe; chosen from its spaces: " + "; ".join(said)]
