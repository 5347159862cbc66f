"""An env without a recipe gets one chosen from its spaces (pzasync/learners/space_defaults.py; docs/running.md,
"Recipes"): PPO where DQN refuses the actions, shared parameters for teams of agents with one name prefix and
the same spaces, SuperSuit preprocessing for large raw frames; said at the start, never a refusal."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner
from gymnasium import spaces

from pzasync.cli import main, train_choices
from pzasync.core.environments import EnvSpec
from pzasync.learners.space_defaults import raw_frames, recipe_from_spaces, team_groups
from pzasync.recipes import DEFAULT_RECIPE, IMAGE_WRAPPERS


def box(*shape: int, dtype=np.float32) -> spaces.Box:
    return spaces.Box(0, 255 if dtype == np.uint8 else 1, shape, dtype)


def test_agents_with_one_prefix_and_the_same_spaces_form_a_team():
    obs = {"piston_0": box(4), "piston_1": box(4), "piston_2": box(4)}
    acts = {a: spaces.Discrete(3) for a in obs}
    assert team_groups(obs, acts) == {"piston": ("piston_*",)}


def test_teams_are_per_prefix_and_need_equal_spaces_and_two_members():
    obs = {"archer_0": box(5), "archer_1": box(5), "knight_0": box(5), "knight_1": box(6), "boss_0": box(5)}
    acts = {a: spaces.Discrete(6) for a in obs}
    assert team_groups(obs, acts) == {"archer": ("archer_*",)}  # knights differ, one boss is no team
    acts["archer_1"] = spaces.Discrete(5)
    assert team_groups(obs, acts) == {}


def test_the_competing_seats_of_a_board_game_are_not_a_team():
    obs = {"player_0": box(4), "player_1": box(4)}
    assert team_groups(obs, {a: spaces.Discrete(7) for a in obs}) == {}


def test_only_large_rgb_frames_are_preprocessed():
    assert raw_frames(box(457, 120, 3, dtype=np.uint8))
    assert not raw_frames(box(64, 64, 3, dtype=np.uint8))  # already small
    assert not raw_frames(box(457, 120, 1, dtype=np.uint8))  # already grey
    assert not raw_frames(box(7, 7, 3))  # pursuit's local view


def test_pistonball_without_its_recipe_gets_ppo_a_piston_team_and_preprocessed_frames(monkeypatch):
    recipe, notes = recipe_from_spaces(EnvSpec.of("pettingzoo.butterfly.pistonball_v6", n_pistons=3))
    assert recipe.learner == "ppo" and dict(recipe.agent_groups) == {"piston": ("piston_*",)}
    assert recipe.wrappers == IMAGE_WRAPPERS
    (note,) = notes
    for said in ("no recipe", "learner ppo", "--learner", "group 'piston' = piston_*", "--independent", "--wrapper"):
        assert said in note, said
    given = recipe_from_spaces(EnvSpec.of("pettingzoo.butterfly.pistonball_v6", ("resize_v1,x_size=20,y_size=20",),
                                          n_pistons=3))[0]
    assert given.wrappers == ()  # the user's wrappers are kept, none added


def test_discrete_envs_keep_dqn_and_an_env_with_nothing_to_choose_says_nothing():
    recipe, notes = recipe_from_spaces(EnvSpec.of("mpe2.simple_tag_v3"))
    assert recipe.learner == DEFAULT_RECIPE.learner and dict(recipe.agent_groups) == {"adversary": ("adversary_*",)}
    assert len(notes) == 1 and "learner ppo" not in notes[0]
    duel, said = recipe_from_spaces(EnvSpec.of("pettingzoo.classic.rps_v2"))  # player_0, player_1: no team
    assert said == [] and duel.learner == "dqn" and dict(duel.agent_groups) == {} and duel.wrappers == ()


def test_box_actions_get_ppo_for_every_agent():
    recipe, _ = recipe_from_spaces(EnvSpec.of("mpe2.simple_spread_v3", N=2, continuous_actions=True))
    assert recipe.learner == "ppo"


def test_train_choices_take_the_spaces_recipe_and_the_flags_still_win():
    env = EnvSpec.of("mpe2.simple_tag_v3")
    base, _ = recipe_from_spaces(env)
    chosen = train_choices(env.name, base=base)
    assert chosen.config["agent_groups"] == {"adversary": ["adversary_*"]}
    assert train_choices(env.name, base=base, self_play=False).config["agent_groups"] == {}
    assert train_choices(env.name, base=base, options={"agent_groups": {"x": ["agent_0"]}}).config[
        "agent_groups"] == {"x": ["agent_0"]}
    assert train_choices(env.name, base=base, learner_for=("agent_0=random",)).config["agent_groups"] == {}
    assert train_choices(env.name, base=base, learner_for=("adversary=ppo",)).config["agent_groups"] == {
        "adversary": ["adversary_*"]}


def test_pzasync_train_says_what_it_chose_from_the_spaces_and_trains(tmp_path):
    args = ["train", "mpe2.simple_tag_v3", "--env-arg", "max_cycles=10", "--runner", "sequential", "--steps",
            "100", "--final-episodes", "0", "--eval-every", "0", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "mpe2.simple_tag_v3 has no recipe; chosen from its spaces" in text
    assert "adversary_0..adversary_2 (3 agents): dqn, group adversary; agent_0=dqn;" in text
