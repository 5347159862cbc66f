"""The recipes: one entry per env that `pzasync train ENV` trains in its own way, and the fallbacks for every
other env. Adding an env is adding one `Recipe` to `RECIPES` (docs/running.md, "Recipes")."""

from __future__ import annotations

from dataclasses import replace

from pzasync.config import AUTO_ENVS_PER_ACTOR
from pzasync.recipes.recipe import Recipe, same_env

#: The env a bare `pzasync train` and `pzasync bench` run: connect four, where the defaults were measured.
TRAIN_ENV = "pettingzoo.classic.connect_four_v3"

#: Every env without a recipe (and `--independent`): one DQN per agent on its own, no league, one env copy,
#: scored against random play.
DEFAULT_RECIPE = Recipe(
    why="No measured choice: DQN's own defaults for every agent, and random play as the only yardstick every "
        "env has.")

#: Self-play as measured on connect four (docs/benchmarks.md, "The default run, against a yardstick"): both
#: seats share one learner through an agent group and play a league of their latest and past selves; a
#: separate evaluator scores them against the yardstick, which they never train against. The self-play
#: recipes below start from it, and `pzasync train --self-play` uses it on an env without one.
SELF_PLAY = Recipe(
    learner="dqn,gamma=0.9,epsilon_end=0.2", self_play=True, league="latest=0.5;snapshot=0.5",
    envs_per_actor=AUTO_ENVS_PER_ACTOR,
    why='docs/benchmarks.md, "How the default was chosen": gamma 0.9 mattered most, and a negamax opponent in '
        'the league did worse than past selves; "Why epsilon_end=0.2": more exploration puts the positions a '
        'yardstick plays into the buffer; "Why 8 copies": 8 env copies per actor beat one.')

#: Raw frames made small (learners/space_defaults.py, and the pistonball recipe): SuperSuit's grey (one channel),
#: 64x64 and the last 3 frames stacked, as examples/pistonball_shared.py and the pistonball rows of
#: docs/benchmarks.md have them: 12 KB an observation instead of pistonball's 165 KB.
IMAGE_WRAPPERS = ("color_reduction_v0,mode=B", "resize_v1,x_size=64,y_size=64", "frame_stack_v1,stack_size=3")

#: One entry per env; the first that matches an env id is its recipe (`recipe_for`).
RECIPES: tuple[Recipe, ...] = (
    replace(SELF_PLAY, env="pettingzoo.classic.connect_four_v3", vs="one_ply", mirror=True,
            league_trainee_weights={"player_1": 4.0},
            why=SELF_PLAY.why + ' Scored against one_ply (wins now, else blocks, else random): an untrained '
                'network already beats random play ("The default run, against a yardstick"). Mirror images '
                'added 4.4 / 6.3 points against one_ply ("Mirror images"); the second seat, the harder one, '
                'training in 4 of 5 games against a past self added 3.7 ("The second seat trains more").'),
    replace(SELF_PLAY, env="pettingzoo.classic.tictactoe_v3", vs="perfect",
            why=SELF_PLAY.why + ' Scored against the perfect player, which never loses: in 2 minutes neither '
                'seat lost a game to it ("Tictactoe, 2 minutes, against the perfect player"). No mirror images '
                '(its actions are cells, which DQN refuses to mirror); trainees drawn uniformly.'),
    # ---- the learning suite (`pzasync bench suite`, docs/benchmarks.md "Learning suite") ------------------------
    Recipe(env="mpe2.simple_spread_v3", learner="mappo,batch_size=4096,minibatch_size=256,epochs=10",
           agent_groups={"team": ("agent_*",)}, env_kwargs={"N": 3}, envs_per_actor=8,
           why='docs/benchmarks.md, "Centralized critics and memory (2026-11-25)": after 180 s, 3 seeds, '
               'mappo (critic of env.state()) -62.9 ± 3.6 team return against ppo -66.5 ± 17.7 and the random '
               'team -80.3; the three agents share one policy (their spaces are equal). Batches of 4,096 '
               'transitions, 10 epochs of minibatches of 256 ("simple_spread, 10 minutes x 3 seeds, beside both '
               'peers"): -44.1 [-47.8, -40.3] team return on 50 episodes after 10 minutes, 3 seeds, against '
               '-58.3 [-63.7, -53.0] with the mappo defaults and -53.1 [-59.1, -47.0] for the SB3 peer. 8 env '
               'copies (the same section, "With 8 env copies (the recipe since 2026-11-26)"): -37.7 [-40.7, '
               '-34.8], 4.0-4.1M agent steps against 1.72-1.84M.'),
    Recipe(env="mpe2.simple_speaker_listener_v4", learner="mappo",
           why='docs/benchmarks.md, "Centralized critics and memory (2026-11-25)": after 180 s, 3 seeds, '
               'mappo -35.1 ± 3.7 team return against ppo -36.1 ± 5.2 and the random team -83.7; speaker and '
               'listener learn apart (their spaces differ). After 10 minutes, 3 seeds ("speaker_listener, 10 '
               'minutes x 3 seeds, beside SB3"): -21.5 [-22.4, -20.6] team return on 50 episodes, against -33.6 '
               '[-37.9, -29.2] for the SB3 peer.'),
    Recipe(env="pettingzoo.sisl.pursuit_v5", learner="ppo", agent_groups={"pursuers": ("pursuer_*",)},
           envs_per_actor=8,
           why='docs/benchmarks.md, "Choosing the suite recipes": 2 minutes, one seed, the 8 pursuers sharing one '
               'policy: ppo -282.6 team return in the last quarter (83,871 agent steps) against dqn -288.0 (59,519) '
               'and the random team -374.3; alike within the noise of 6 episodes, ppo the faster per step. 8 env '
               'copies ("pursuit, 10 minutes x 3 seeds, beside SB3"): +60.3 [22.6, 98.0] team return over 3 seeds '
               'of 10 minutes against -187.9 [-212.4, -163.4] with one copy, 1.07-1.18M agent steps against '
               '668-712k.'),
    Recipe(env="pettingzoo.sisl.multiwalker_v9", learner="ppo,batch_size=2048,minibatch_size=256",
           agent_groups={"walkers": ("walker_*",)}, envs_per_actor=8,
           why='docs/benchmarks.md, "Choosing the suite recipes": nothing tried learned in 2 minutes, one seed (the '
               'walkers sharing ppo -296 team return in the last quarter, mappo with state=concat -290, the random '
               'team -283 ± 33); ppo with shared parameters is the PettingZoo tutorials\' path. mappo with '
               'state=auto crashed in multiwalker\'s env.state() after a fall. 8 env copies and 4x the batch '
               '("multiwalker, 10 minutes x 3 seeds, beside SB3"): +11.5 [-0.3, 23.2] team return (greedy, 3 seeds '
               'of 10 minutes) against -42.4 [-275.1, 190.3] with one copy and ppo\'s default batch, 2.26-2.34M '
               'agent steps against 1.34-1.44M.'),
    Recipe(env="pettingzoo.butterfly.pistonball_v6",
           learner="ppo,batch_size=512,minibatch_size=128,epochs=3,gamma=0.95,gae_lambda=0.99,clip=0.3",
           agent_groups={"pistons": ("piston_*",)}, wrappers=IMAGE_WRAPPERS, envs_per_actor=16,
           why='docs/benchmarks.md, "Pistonball, 20 pistons through SuperSuit, one shared DQN policy": grey 64x64 '
               'frames, 3 stacked, every piston one shared policy (examples/pistonball_shared.py); 16 env copies '
               'acted 1.51x faster than one, as the pistons of one env act one after another. PPO, as the example '
               'and the PettingZoo tutorials train it; not compared with another learner ("Choosing the suite '
               'recipes": one copy made 19,967 agent steps in 2 minutes on the loaded machine, 8 episodes). The '
               'tutorial\'s discount (gamma 0.95, gae_lambda 0.99, clip 0.3; "With the tutorial\'s discount (the '
               'recipe since 2026-11-26)"): on one seed the training team return reached +955 at 7 minutes '
               'against at most +25 with ppo\'s own (same seed); over 5 seeds see that section.'),
    Recipe(env="pettingzoo.butterfly.knights_archers_zombies_v11", learner="ppo",
           agent_groups={"archers": ("archer_*",), "knights": ("knight_*",)},
           why='docs/benchmarks.md, "Choosing the suite recipes": 2 minutes, one seed, archers and knights each a '
               'shared policy: ppo 2.19 -> 3.66 zombies per episode (first fifth -> last quarter) against dqn 3.41 -> '
               '3.11 and the random team 2.45 ± 0.66. Vector observations are the env\'s default '
               '(obs_method=vector); agents that die leave the episode (docs/transitions.md).'),
    replace(SELF_PLAY, env="pettingzoo.classic.leduc_holdem_v4", learner="ppo",
            why=SELF_PLAY.why + ' On leduc (docs/benchmarks.md, "Choosing the suite recipes"), 2 minutes, one '
                'seed, 400 hands per seat against random: self-play ppo +0.91 ± 0.25 and +1.10 ± 0.24 big blinds '
                'a hand (untrained +0.82, +0.26) against self-play dqn +0.45 ± 0.18 and +0.46 ± 0.17 (untrained '
                '+0.87, -0.38). Random play is the evaluator\'s yardstick; the suite also computes the exact '
                'exploitability (docs/league.md, its Exploitability section).'),
)


#: The learning suite's envs (`pzasync bench suite`, docs/benchmarks.md "Learning suite"), each with a recipe.
SUITE: tuple[str, ...] = (
    "mpe2.simple_spread_v3", "mpe2.simple_speaker_listener_v4", "pettingzoo.sisl.pursuit_v5",
    "pettingzoo.sisl.multiwalker_v9", "pettingzoo.butterfly.pistonball_v6",
    "pettingzoo.butterfly.knights_archers_zombies_v11", "pettingzoo.classic.connect_four_v3",
    "pettingzoo.classic.leduc_holdem_v4",
)


def recipe_for(env_name: str) -> Recipe | None:
    """The recipe of an env id (module, registry or short form), None if it has none."""
    return next((recipe for recipe in RECIPES if recipe.matches(env_name)), None)


def train_recipe(env_name: str, self_play: bool | None = None, base: Recipe | None = None) -> Recipe:
    """What `pzasync train ENV` uses: the env's recipe, else `base` (the recipe chosen from an env's spaces,
    `recipe_from_spaces`), else DEFAULT_RECIPE; with `self_play` True (`--self-play`) or False
    (`--independent`) where that differs from the recipe's own choice.

    Switched on, the training choices (`learner`, `league`, `envs_per_actor`) come from SELF_PLAY; switched
    off, from DEFAULT_RECIPE, and the self-play extras (`mirror`, `league_trainee_weights`, measured in
    self-play only) go too. The env's yardstick and budget stay either way.
    """
    recipe = recipe_for(env_name) or base or DEFAULT_RECIPE
    if self_play is None or self_play == recipe.self_play:
        return recipe
    if self_play:
        return replace(recipe, self_play=True, learner=SELF_PLAY.learner, league=SELF_PLAY.league,
                       envs_per_actor=SELF_PLAY.envs_per_actor, agent_groups={})
    return replace(recipe, self_play=False, learner=DEFAULT_RECIPE.learner, league=DEFAULT_RECIPE.league,
                   envs_per_actor=DEFAULT_RECIPE.envs_per_actor, mirror=DEFAULT_RECIPE.mirror,
                   league_trainee_weights=DEFAULT_RECIPE.league_trainee_weights)


def default_yardstick(env_name: str) -> str:
    """The yardstick player of an env id (module, registry or short form): its recipe's, else "random"."""
    return train_recipe(env_name).vs


def default_train_learner(env_name: str) -> str:
    """The learner spec of `pzasync train ENV` in self-play: the env's recipe's (with `mirror=True` where its
    board allows it), else SELF_PLAY's."""
    return train_recipe(env_name, self_play=True).learner_spec


def default_trainee_weights(env_name: str) -> dict[str, float]:
    """The self-play league's trainee weights of an env: its recipe's, else uniform ({})."""
    return dict(train_recipe(env_name, self_play=True).league_trainee_weights)


#: How each known env's result is scored (Recipe.scoring, SCORING_MODES) where its recipe does not say: the
#: cooperative MPE, sisl and butterfly envs as a team, the mixed MPE envs by side, the classic two-player games
#: with a recipe or a scripted yardstick by seat (so their evaluations need no probe of random play). Every other
#: env is left to the default read from the env (pzasync/evaluation/scoring.py). simple_crypto and
#: simple_world_comm are left out: their teams do not follow their agents' name prefixes (alice and bob against
#: eve; leadadversary with the adversaries).
SCORING: dict[str, str] = {
    **dict.fromkeys(("mpe2.simple_v3", "mpe2.simple_spread_v3", "mpe2.simple_reference_v3",
                     "mpe2.simple_speaker_listener_v4", "pettingzoo.sisl.pursuit_v4", "pettingzoo.sisl.pursuit_v5",
                     "pettingzoo.sisl.multiwalker_v9", "pettingzoo.sisl.waterworld_v4",
                     "pettingzoo.butterfly.pistonball_v6", "pettingzoo.butterfly.cooperative_pong_v5",
                     "pettingzoo.butterfly.cooperative_pong_v6", "pettingzoo.butterfly.knights_archers_zombies_v10",
                     "pettingzoo.butterfly.knights_archers_zombies_v11"), "team"),
    **dict.fromkeys(("mpe2.simple_tag_v3", "mpe2.simple_adversary_v3", "mpe2.simple_push_v3"), "sides"),
    **dict.fromkeys(("pettingzoo.classic.connect_four_v3", "pettingzoo.classic.tictactoe_v3",
                     "pettingzoo.classic.leduc_holdem_v4"), "seats"),
}


def scoring_for(env_name: str) -> str | None:
    """How an env id's result is scored: its recipe's `scoring`, else `SCORING`'s entry, else None (read from
    the env: `pzasync.evaluation.scoring.default_scoring`)."""
    recipe = recipe_for(env_name)
    if recipe is not None and recipe.scoring is not None:
        return recipe.scoring
    return next((mode for env, mode in SCORING.items() if same_env(env_name, env)), None)
