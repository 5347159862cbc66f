"""What `pzasync train ENV`'s options leave open, filled in from the env's recipe (docs/running.md, "Recipes"):
`train_choices` combines them into `TrainChoices`, before anything is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pzasync.errors import UserInputError
from pzasync.recipes import Recipe, train_recipe
from pzasync.specs import parse_learner_spec


@dataclass(frozen=True)
class TrainChoices:
    """What `pzasync train ENV` runs once its options and the env's recipe are combined (`train_choices`)."""

    #: The --learner spec, the recipe's where none was given; `learners` adds --learner-for, parsed.
    learner: str
    learners: Any
    #: The league as the start line shows it (the mix of every unit, or unit: mix pairs); None: no league.
    league: str | None
    #: The player scored against: eval_vs if given, else the recipe's.
    yardstick: str
    #: Wall-clock minutes: --minutes, the recipe's if neither --steps nor --minutes was given, else None.
    minutes: float | None
    #: The RunConfig options the recipe may choose: agent_groups, league, league_trainee_weights, envs_per_actor,
    #: backpressure, and onpolicy_buffer_batches where the recipe or an option sets it.
    config: dict[str, Any]
    #: Whether an evaluator scores the policies while training (off with eval_every_s=0 or eval_vs none).
    evaluate: bool = True
    #: Env keyword arguments: the recipe's, with --env-arg's over them.
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Env wrapper specs (EnvSpec.wrappers): --wrapper's if given, else the recipe's.
    wrappers: tuple[str, ...] = ()
    #: The recipe the options were combined with (self-play's, where self-play is on).
    recipe: Recipe | None = None


def with_learner_for(learners: Any, learner_for: tuple[str, ...]) -> Any:
    """A learner spec for every agent, and repeated --learner-for AGENT=SPEC -> a learner spec for the runners."""
    if not learner_for:
        return learners
    per_agent: dict[str, Any] = dict(learners) if isinstance(learners, dict) else {"*": learners}
    for item in learner_for:
        agent, sep, spec = item.partition("=")
        if not sep:
            raise UserInputError(f"--learner-for {item!r}: expected AGENT=SPEC")
        per_agent[agent] = parse_learner_spec(spec)
    return per_agent


def learners_from_options(learner: str, learner_for: tuple[str, ...]) -> Any:
    """--learner SPEC and repeated --learner-for AGENT=SPEC -> a learner spec for the runners."""
    return with_learner_for(parse_learner_spec(learner), learner_for)


def train_choices(env_name: str, *, learner: str | None = None, learner_for: tuple[str, ...] = (),
                  steps: int | None = None, minutes: float | None = None, self_play: bool | None = None,
                  options: Mapping[str, Any] | None = None,
                  file_options: Mapping[str, Any] | None = None, env_args: Mapping[str, Any] | None = None,
                  wrappers: tuple[str, ...] | None = None, base: Recipe | None = None,
                  file_learners: Mapping[str, Any] | None = None) -> TrainChoices:
    """`pzasync train`'s options combined with the env's recipe (docs/running.md, "Recipes"): what the options
    leave open comes from `train_recipe(env_name, self_play)`. `options` are the run options given as flags,
    `file_options` those of a --config file (flags win); both parsed, by RunConfig field name. Self-play is the
    recipe's unless --self-play/--independent, a --group flag or --learner-for says otherwise: a file never
    switches it, so that a printed configuration runs again the same way. Raises UserInputError for options
    that cannot go together. `env_args` (--env-arg) go over the recipe's env arguments, `wrappers` (--wrapper)
    replace its wrappers. `base`: the recipe of an env without one in the registry (`recipes.recipe_from_spaces`),
    else DEFAULT_RECIPE. `file_learners`: a --config file's learners (`[learners.NAME]` tables), used where no
    --learner is given; --learner-for goes over them. Builds nothing:
    `RunPlan(env, choices.learners, RunConfig(**choices.config))` checks them."""
    given_options = {**(file_options or {}), **(options or {})}
    recipe = train_recipe(env_name, base=base)
    independent = self_play is False
    if steps is None and minutes is None:
        minutes = recipe.minutes
    yardstick = given_options.get("eval_vs") or recipe.vs
    evaluate = given_options.get("eval_every_s") != 0 and given_options.get("eval_vs", "") is not None
    if self_play is None:
        self_play = recipe.self_play and "agent_groups" not in (options or {}) and not learner_for
    recipe = train_recipe(env_name, self_play, base=base)
    # A team recipe's groups stay unless --independent, or --learner-for naming something other than a group.
    team = {} if independent or not set(_names(learner_for)) <= set(recipe.agent_groups) else {
        name: list(patterns) for name, patterns in recipe.agent_groups.items()}
    agent_groups = given_options.get("agent_groups", {"players": ["*"]} if self_play else team)
    if "league" in given_options:
        league = given_options["league"]
    else:
        league = {"*": recipe.league} if recipe.league is not None and recipe.league != "none" else {}
    if learner is None and file_learners:
        learner, learners = "as the config file says", with_learner_for(dict(file_learners), learner_for)
    else:
        learner = recipe.learner_spec if learner is None else learner
        learners = learners_from_options(learner, learner_for)
    trainee_weights = given_options.get("league_trainee_weights")
    if trainee_weights is None:
        trainee_weights = dict(recipe.league_trainee_weights) if league else {}
    elif trainee_weights and not league:
        raise UserInputError("--league-trainee weighs the seats of a league; give --league too (or --self-play)")
    buffer_batches = given_options.get("onpolicy_buffer_batches", recipe.onpolicy_buffer_batches)
    shown = (None if not league else league["*"] if list(league) == ["*"] and isinstance(league["*"], str)
             else ", ".join(f"{unit}: {mix}" for unit, mix in league.items()))
    return TrainChoices(learner, learners, shown, yardstick, minutes,
                        {"agent_groups": agent_groups, "league": league, "league_trainee_weights": trainee_weights,
                         "envs_per_actor": given_options.get("envs_per_actor", recipe.envs_per_actor),
                         "backpressure": given_options.get("backpressure", recipe.backpressure),
                         **({} if buffer_batches is None else {"onpolicy_buffer_batches": buffer_batches})},
                        evaluate, {**recipe.env_kwargs, **(env_args or {})},
                        recipe.wrappers if wrappers is None else tuple(wrappers), recipe)


def _names(learner_for: tuple[str, ...]) -> list[str]:
    """The agents or groups that --learner-for items (AGENT=SPEC) name."""
    return [item.partition("=")[0] for item in learner_for]
