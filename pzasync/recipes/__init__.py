"""Env recipes: what pzasync knows about training an env, in one registry (docs/running.md, "Recipes").

A `Recipe` says how `pzasync train ENV` trains an env when its options leave a choice open (the learner,
self-play, the league and its trainee seats, mirror images, env copies, the budget) and which yardstick it is
scored against (`pzasync train`, `pzasync bench --target`), and how (`Recipe.scoring`, `SCORING`: per seat, as
a team, or by side). `RECIPES` holds one entry per env that has one;
every other env gets `DEFAULT_RECIPE`. `pzasync envs` marks the envs that have a recipe.

This package sits below the runtime and above `pzasync.config` (pyproject's layers): the command line, the
bench, evaluation and the runners may import it, and it imports none of them.
"""

from pzasync.recipes.recipe import SCORING_MODES, Recipe, same_env
from pzasync.recipes.registry import (
    DEFAULT_RECIPE,
    IMAGE_WRAPPERS,
    RECIPES,
    SCORING,
    SELF_PLAY,
    SUITE,
    TRAIN_ENV,
    TURN_BASED,
    default_train_learner,
    default_trainee_weights,
    default_yardstick,
    env_api_for,
    recipe_for,
    scoring_for,
    train_recipe,
)

__all__ = [
    "DEFAULT_RECIPE",
    "IMAGE_WRAPPERS",
    "RECIPES",
    "Recipe",
    "SCORING",
    "SCORING_MODES",
    "SELF_PLAY",
    "SUITE",
    "TRAIN_ENV",
    "TURN_BASED",
    "default_train_learner",
    "default_trainee_weights",
    "default_yardstick",
    "env_api_for",
    "recipe_for",
    "same_env",
    "scoring_for",
    "train_recipe",
]
