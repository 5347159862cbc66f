"""The env recipes (pzasync.recipes; docs/running.md, "Recipes"): every entry resolves through the path
`pzasync train ENV` takes, the lookups match every form of an env id, and an env without a recipe keeps the
plain defaults (one DQN per agent, no self-play, one env copy, scored against random play)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pzasync.bench.harness import BenchSettings
from pzasync.cli import main, train_choices
from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.recipes import (
    DEFAULT_RECIPE,
    RECIPES,
    SELF_PLAY,
    TRAIN_ENV,
    Recipe,
    default_yardstick,
    recipe_for,
    same_env,
    train_recipe,
)
from pzasync.runtime.plan import RunPlan
from pzasync.specs import parse_learner_spec

ROOT = Path(__file__).parents[1]
RESULTS_PAGE = ROOT / "docs" / "benchmarks.md"


def results_page_anchors(page: str) -> set[str]:
    """The anchors of the results page's headings, made as benchmarks/results_page.py (which writes its tables) does."""
    spec = importlib.util.spec_from_file_location("results_page", ROOT / "benchmarks" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.anchors(page)


CONNECT_FOUR = "pettingzoo.classic.connect_four_v3"
TICTACTOE = "pettingzoo.classic.tictactoe_v3"
NO_RECIPE = "mpe2.simple_adversary_v3"


def plan_for(env_id: str, **options) -> tuple[RunPlan, object]:
    """The run `pzasync train ENV [options]` would start, planned (validated, nothing allocated or run)."""
    chosen = train_choices(env_id, **options)
    env = EnvSpec.of(env_id, chosen.wrappers, **chosen.env_kwargs)
    return RunPlan(env, chosen.learners, RunConfig(**chosen.config, eval_vs=chosen.yardstick)), chosen


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.env.rsplit(".", 1)[-1])
def test_every_recipe_resolves_for_its_env_the_way_pzasync_train_uses_it(recipe):
    """The learner spec parses and its options pass the learner's schema and space checks for every seat (DQN
    refuses `mirror` on a board whose actions are not columns), the league and trainee seats exist, and the
    yardstick is a player of this env: RunPlan checks them all before anything starts."""
    spec = parse_learner_spec(recipe.learner_spec)
    name, options = (spec, {}) if isinstance(spec, str) else spec
    assert options.get("mirror", False) is recipe.mirror
    plan, chosen = plan_for(recipe.env)
    assert chosen.learner == recipe.learner_spec and chosen.yardstick == recipe.vs
    assert chosen.minutes == recipe.minutes
    assert plan.envs_per_actor == recipe.envs_per_actor
    for agent, p in plan.agents.items():
        assert p.learner_name == name, agent
        assert {k: p.options[k] for k in options} == options, agent
    if recipe.self_play:
        assert set(plan.units) == {"players"} and len(plan.learning) == 1
        assert plan.config.league == {"*": recipe.league}
    else:
        assert "players" not in plan.units and not plan.config.league
        assert plan.config.agent_groups == {g: list(p) for g, p in recipe.agent_groups.items()}
        for group in recipe.agent_groups:
            assert len(plan.units[group].members) >= 2, group
    assert chosen.wrappers == recipe.wrappers and plan.env_spec.wrappers == recipe.wrappers
    assert {k: plan.env_spec.kwargs[k] for k in recipe.env_kwargs} == dict(recipe.env_kwargs)
    assert plan.config.league_trainee_weights == dict(recipe.league_trainee_weights)
    assert plan.config.eval_vs == recipe.vs


def test_the_registry_reproduces_the_measured_defaults():
    """connect_four: self-play with mirror images, the second seat the trainee of 4 in 5 league games, scored
    against one_ply; tictactoe: the same self-play without either, scored against the perfect player."""
    c4, ttt = recipe_for(CONNECT_FOUR), recipe_for(TICTACTOE)
    assert c4.learner_spec == "dqn,gamma=0.9,epsilon_end=0.2,mirror=True"
    assert c4.vs == "one_ply" and dict(c4.league_trainee_weights) == {"player_1": 4.0}
    assert ttt.learner_spec == "dqn,gamma=0.9,epsilon_end=0.2" and ttt.vs == "perfect"
    assert not ttt.mirror and dict(ttt.league_trainee_weights) == {}
    for recipe in (c4, ttt):
        assert recipe.self_play and recipe.league == "latest=0.5;snapshot=0.5"
        assert recipe.envs_per_actor == 8 and recipe.minutes == 5.0
    assert recipe_for(TRAIN_ENV) is c4 and BenchSettings().env == TRAIN_ENV


def test_an_env_without_a_recipe_gets_the_plain_defaults():
    assert recipe_for(NO_RECIPE) is None and train_recipe(NO_RECIPE) is DEFAULT_RECIPE
    assert default_yardstick(NO_RECIPE) == "random"
    assert BenchSettings(env=NO_RECIPE).yardstick == "random"
    assert BenchSettings(env="classic/connect_four_v3").yardstick == "one_ply"
    plan, chosen = plan_for(NO_RECIPE)
    assert chosen.learner == "dqn" and chosen.yardstick == "random" and chosen.minutes == 5.0
    assert chosen.config == {"agent_groups": {}, "league": {}, "league_trainee_weights": {}, "envs_per_actor": 1,
                             "backpressure": False}
    assert set(plan.units) == set(plan.agents) and len(plan.agents) == 3  # one DQN per agent
    assert {p.learner_name for p in plan.agents.values()} == {"dqn"}


def test_self_play_and_independent_switch_the_training_choices_but_keep_the_yardstick():
    """`--independent` on connect_four: one plain DQN per seat on one env copy, no league, no mirror images,
    still scored against one_ply. `--self-play` on an env without a recipe: SELF_PLAY's choices, no extras."""
    independent = train_choices(CONNECT_FOUR, self_play=False)
    assert independent.learner == "dqn" and independent.yardstick == "one_ply" and independent.league is None
    assert independent.config == {"agent_groups": {}, "league": {}, "league_trainee_weights": {}, "envs_per_actor": 1,
                                  "backpressure": False}
    forced = train_choices(NO_RECIPE, self_play=True)
    assert forced.learner == SELF_PLAY.learner_spec == "dqn,gamma=0.9,epsilon_end=0.2"
    assert forced.yardstick == "random"
    assert forced.config == {"agent_groups": {"players": ["*"]}, "league": {"*": SELF_PLAY.league},
                             "league_trainee_weights": {}, "envs_per_actor": SELF_PLAY.envs_per_actor,
                             "backpressure": False}
    # --group or --learner-for turn the recipe's self-play off unless --self-play asks for it.
    grouped = train_choices(CONNECT_FOUR, learner_for=("player_1=random",))
    assert grouped.config["agent_groups"] == {} and grouped.learner == "dqn"
    # Options given always win over the recipe.
    given = train_choices(CONNECT_FOUR, learner="dqn,gamma=0.5", minutes=1.0,
                          options={"league": {"*": "latest=1"}, "league_trainee_weights": {"player_0": 2},
                                   "eval_vs": "random", "envs_per_actor": 2})
    assert given.learner == "dqn,gamma=0.5" and given.yardstick == "random" and given.minutes == 1.0
    assert given.config == {"agent_groups": {"players": ["*"]}, "league": {"*": "latest=1"},
                            "league_trainee_weights": {"player_0": 2}, "envs_per_actor": 2,
                            "backpressure": False}


def test_a_recipes_backpressure_and_buffer_reach_the_run_unless_flags_say_otherwise():
    """Pistonball's recipe has its actor wait for the PPO learner (slower than the env on 2 cores) instead of
    dropping what it has not read, with one batch of buffer; options given win, an env whose recipe leaves the
    buffer unset keeps the run's default, and --print-config shows the choices."""
    pistonball = "pettingzoo.butterfly.pistonball_v6"
    assert recipe_for(pistonball).backpressure and not recipe_for(CONNECT_FOUR).backpressure
    chosen = train_choices(pistonball).config
    assert chosen["backpressure"] is True and chosen["onpolicy_buffer_batches"] == 1
    given = train_choices(pistonball, options={"backpressure": False, "onpolicy_buffer_batches": 3}).config
    assert given["backpressure"] is False and given["onpolicy_buffer_batches"] == 3
    assert "onpolicy_buffer_batches" not in train_choices(CONNECT_FOUR).config
    printed = CliRunner().invoke(main, ["train", pistonball, "--print-config"])
    assert printed.exit_code == 0, printed.output
    assert "backpressure = true" in printed.output and "onpolicy_buffer_batches = 1" in printed.output
    printed = CliRunner().invoke(main, ["train", CONNECT_FOUR, "--print-config"])
    assert "backpressure = false" in printed.output
    assert f"onpolicy_buffer_batches = {RunConfig().onpolicy_buffer_batches}" in printed.output
    printed = CliRunner().invoke(main, ["train", pistonball, "--no-backpressure", "--onpolicy-buffer-batches", "2",
                                        "--print-config"])
    assert "backpressure = false" in printed.output and "onpolicy_buffer_batches = 2" in printed.output


@pytest.mark.parametrize("form", ["pettingzoo.classic.connect_four_v3", "classic/connect_four_v3",
                                  "connect_four_v3", "connect-four_v3"])
def test_a_recipe_is_found_by_any_form_of_its_env_id(form):
    assert recipe_for(form) is recipe_for(CONNECT_FOUR) is not None
    assert default_yardstick(form) == "one_ply"


def test_same_env_compares_the_last_part_of_an_id():
    assert same_env("classic/tictactoe_v3", TICTACTOE)
    assert not same_env("pettingzoo.classic.tictactoe_v2", TICTACTOE)
    assert not same_env(CONNECT_FOUR, TICTACTOE)


def test_the_registry_is_well_formed():
    """One entry per env (a second one would never be found), each with a one-line reason free of figures and a
    link to the section of the results page (docs/benchmarks.md) that holds its measurements; entries cannot be
    changed through a lookup."""
    envs = [r.env for r in RECIPES]
    assert None not in envs and len(envs) == len(set(envs))
    for recipe in RECIPES:
        assert recipe_for(recipe.env) is recipe
        assert [other for other in RECIPES if other.matches(recipe.env)] == [recipe]
    page = RESULTS_PAGE.read_text()
    anchors = results_page_anchors(page)
    for recipe in (*RECIPES, SELF_PLAY):
        page_path, _, anchor = recipe.evidence.partition("#")
        assert page_path == "docs/benchmarks.md" and anchor in anchors, (recipe.env, recipe.evidence)
    for recipe in (*RECIPES, SELF_PLAY, DEFAULT_RECIPE):
        reason = recipe.reason
        assert reason and "\n" not in reason and len(reason) <= 200, recipe.env
        assert not re.search(r"\d[.,]\d|\d\s*%|±|\[|\d+k\b", reason), (recipe.env, reason)
        assert sum(c.isdigit() for c in reason) <= 3, (recipe.env, reason)
    assert DEFAULT_RECIPE.evidence == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECIPES[0].vs = "random"  # type: ignore[misc]
    with pytest.raises(TypeError):
        recipe_for(CONNECT_FOUR).league_trainee_weights["player_0"] = 9.0  # type: ignore[index]
    assert dict(Recipe(league_trainee_weights={"a": 1.0}).league_trainee_weights) == {"a": 1.0}


def test_pzasync_envs_marks_the_envs_with_a_recipe():
    result = CliRunner().invoke(main, ["envs", "--no-instantiate"], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "env id" in line)
    assert "recipe" in header
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.split("│")[1:-1]]
                                          for line in result.output.splitlines() if line.count("│") > 3)}
    rows.pop("", None)  # a long recipe wraps onto a continuation line with an empty env cell
    assert rows[CONNECT_FOUR][-1] == "dqn,gamma=0.9,epsilon_end=0.2,mirror=True (self-play)"
    assert rows[TICTACTOE][-1] == "dqn,gamma=0.9,epsilon_end=0.2 (self-play)"
    assert rows[NO_RECIPE][-1] == "-"
    assert sum(cells[-1] != "-" for cells in rows.values()) == len(RECIPES)


# ------------------------------------------------------------------------------- a learner that fits the spaces
SPREAD_BOX = ("mpe2.simple_spread_v3", {"N": 2, "max_cycles": 10, "continuous_actions": True})


def test_the_recipe_learner_gives_way_where_it_refuses_the_spaces():
    from pzasync.core.environments import EnvSpec
    from pzasync.learners.fitting import fit_learners

    env = EnvSpec.of(SPREAD_BOX[0], **SPREAD_BOX[1])
    learners, notes = fit_learners(env, "dqn", {})
    assert learners == {"*": "dqn", "agent_0": "ppo", "agent_1": "ppo"}
    assert len(notes) == 2 and "agent 'agent_0': dqn cannot train it (Box(" in notes[0] and "'ppo'" in notes[0]
    learners, notes = fit_learners(env, "dqn", {}, chosen={"agent_1"})  # --learner-for agent_1=dqn stays
    assert learners == {"*": "dqn", "agent_0": "ppo"} and len(notes) == 1
    learners, notes = fit_learners(env, {"*": "dqn"}, {"team": ["agent_*"]})
    assert learners == {"*": "dqn", "team": "ppo"} and notes[0].startswith("agent group 'team'")
    plan = RunPlan(env, learners, RunConfig(agent_groups={"team": ["agent_*"]}))
    assert {p.learner_name for p in plan.agents.values()} == {"ppo"}
    discrete = EnvSpec.of(SPREAD_BOX[0], N=2, max_cycles=10)
    assert fit_learners(discrete, "dqn", {}) == ("dqn", []), "a learner that fits is left alone"


def test_pzasync_train_says_which_learner_it_chose_instead_of_refusing(tmp_path):
    """Box actions: an env without a recipe gets PPO from its spaces (said at the start); an env whose recipe
    names DQN gets PPO for the agents DQN refuses, said per agent."""
    common = ["--runner", "sequential", "--steps", "120", "--final-episodes", "0", "--eval-every", "0", "--out",
              str(tmp_path)]
    args = ["train", NO_RECIPE, "--env-arg=continuous_actions=True", "--env-arg=max_cycles=10", *common]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "learner ppo (dqn takes only Discrete actions; --learner chooses)" in text
    assert "adversary_0=ppo; agent_0, agent_1 (2 agents): ppo, group agent;" in text
    args = ["train", SPREAD_BOX[0], *(f"--env-arg={k}={v}" for k, v in SPREAD_BOX[1].items()), "--learner-for",
            "agent_0=dqn", "--learner-for", "agent_1=dqn", *common]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "DQN" in result.output and "Box" in result.output, result.output


def test_a_team_recipe_shares_parameters_unless_independent_or_a_seat_is_chosen_apart():
    pursuit = "pettingzoo.sisl.pursuit_v5"
    assert train_choices(pursuit).config["agent_groups"] == {"pursuers": ["pursuer_*"]}
    assert train_choices(pursuit, self_play=False).config["agent_groups"] == {}
    assert train_choices(pursuit, learner_for=("pursuer_0=random",)).config["agent_groups"] == {}
    assert train_choices(pursuit, learner_for=("pursuers=dqn",)).config["agent_groups"] == {"pursuers": ["pursuer_*"]}
    kaz = train_choices("knights_archers_zombies_v11", self_play=True)  # --self-play: one learner for all
    assert kaz.config["agent_groups"] == {"players": ["*"]}


@pytest.mark.parametrize("env_id, auto", [("pettingzoo.sisl.pursuit_v5", "aec"),
                                          ("mpe2.simple_spread_v3", "parallel")])
def test_auto_keeps_the_envs_declared_turn_based_on_the_aec_path(env_id, auto):
    """pursuit moves each pursuer at its turn, and its recipe was measured so: "auto" steps it in turn order, while
    an env whose agents all act on the cycle's observations takes the parallel path; "parallel" still may."""
    assert RunPlan(EnvSpec.of(env_id), "random", RunConfig()).env_api == auto
    assert RunPlan(EnvSpec.of(env_id), "random", RunConfig(env_api="parallel")).env_api == "parallel"
