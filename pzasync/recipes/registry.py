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
    reason="No measured choice: DQN's own defaults for every agent, and random play, the one yardstick every env has.")

#: The page that holds the measurements behind the recipes, one section per env (`Recipe.evidence`).
RESULTS = "docs/benchmarks.md"

#: Self-play as measured on connect four (docs/benchmarks.md#connect_four): both seats share one learner through
#: an agent group and play a league of their latest and past selves; a separate evaluator scores them against the
#: yardstick, which they never train against. The self-play recipes below start from it, and `pzasync train
#: --self-play` uses it on an env without one.
SELF_PLAY = Recipe(
    learner="dqn,gamma=0.9,epsilon_end=0.2", self_play=True, league="latest=0.5;snapshot=0.5",
    envs_per_actor=AUTO_ENVS_PER_ACTOR,
    reason="A short horizon, more exploration, a league of past selves and several env copies beat every other "
           "self-play setting tried on connect four.",
    evidence=f"{RESULTS}#connect_four")

#: Raw frames made small (learners/space_defaults.py, and the pistonball recipe): SuperSuit's grey (one channel:
#: luminance, its default "full" mode), 64x64 and the last 3 frames stacked, as examples/pistonball_shared.py has
#: them: 12 KB an observation instead of pistonball's 165 KB. Luminance, not one colour channel: the blue channel
#: ("mode=B") draws pistonball's blue ball at 221 on a white 255, where luminance draws it at 138
#: (docs/bench/pistonball_frames.json).
IMAGE_WRAPPERS = ("color_reduction_v0,mode=full", "resize_v1,x_size=64,y_size=64", "frame_stack_v1,stack_size=3")

#: One entry per env; the first that matches an env id is its recipe (`recipe_for`).
RECIPES: tuple[Recipe, ...] = (
    replace(SELF_PLAY, env="pettingzoo.classic.connect_four_v3", vs="one_ply", mirror=True,
            league_trainee_weights={"player_1": 4.0},
            reason="Self-play with mirror images and the harder second seat training more; scored against one_ply, as "
                   "an untrained network already beats random play.",
            evidence=f"{RESULTS}#connect_four"),
    replace(SELF_PLAY, env="pettingzoo.classic.tictactoe_v3", vs="perfect",
            reason="The self-play default without mirror images (its actions are cells), trainees drawn uniformly; "
                   "scored against the perfect player, which it learns not to lose to.",
            evidence=f"{RESULTS}#tictactoe"),
    # ---- the learning suite (`pzasync bench suite`, docs/benchmarks.md "Learning suite") ------------------------
    Recipe(env="mpe2.simple_spread_v3", learner="mappo,batch_size=4096,minibatch_size=256,epochs=10",
           agent_groups={"team": ("agent_*",)}, env_kwargs={"N": 3}, envs_per_actor=8,
           reason="MAPPO with one policy for the team, large batches and several env copies beat PPO, mappo's "
                  "defaults, a single env copy and both peers.",
           evidence=f"{RESULTS}#simple_spread"),
    Recipe(env="mpe2.simple_speaker_listener_v4", learner="mappo",
           reason="MAPPO beat PPO with speaker and listener learning apart, as their spaces differ.",
           evidence=f"{RESULTS}#speaker_listener"),
    Recipe(env="pettingzoo.sisl.pursuit_v5", learner="ppo", agent_groups={"pursuers": ("pursuer_*",)},
           envs_per_actor=8,
           reason="PPO with the pursuers sharing one policy, as good as DQN and faster per step; several env copies "
                  "batch their decisions and learned far more than one.",
           evidence=f"{RESULTS}#pursuit"),
    Recipe(env="pettingzoo.sisl.multiwalker_v9", learner="ppo,batch_size=2048,minibatch_size=256",
           agent_groups={"walkers": ("walker_*",)}, envs_per_actor=8,
           reason="PPO with shared parameters, the PettingZoo tutorials' path; several env copies and larger batches "
                  "steadied it across seeds.",
           evidence=f"{RESULTS}#multiwalker"),
    Recipe(env="pettingzoo.butterfly.pistonball_v6",
           learner="ppo,lr=0.000597,gamma=0.98,gae_lambda=0.8,clip=0.1,epochs=10,minibatch_size=256,"
                   "batch_size=8192,vf_coef=0.967,ent_coef=0.0994,max_grad_norm=0.9,init_log_std=0,"
                   "activation=relu,image_init=orthogonal,invert_frames=True",
           agent_groups={"pistons": ("piston_*",)}, wrappers=IMAGE_WRAPPERS, envs_per_actor=16, backpressure=True,
           onpolicy_buffer_batches=1,
           reason="Butterfly-Baselines' tuned PPO on small grey frames, the actor kept about one update behind its "
                  "learner; an orthogonal encoder, ReLU heads and 1 - x (PyTorch's init with tanh heads dies on "
                  "white).",
           evidence=f"{RESULTS}#pistonball"),
    Recipe(env="pettingzoo.butterfly.knights_archers_zombies_v11", learner="ppo",
           agent_groups={"archers": ("archer_*",), "knights": ("knight_*",)},
           reason="PPO with archers and knights each sharing a policy learned where DQN did not; vector "
                  "observations, the env's default.",
           evidence=f"{RESULTS}#knights_archers_zombies"),
    replace(SELF_PLAY, env="pettingzoo.classic.leduc_holdem_v4", learner="ppo",
            reason="Self-play PPO won more against random play than self-play DQN in the same time; the suite also "
                   "computes the exact exploitability.",
            evidence=f"{RESULTS}#leduc"),
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


#: Envs whose parallel API `env_api="auto"` must not take (docs/transitions.md, "The parallel path"): games whose
#: agents act in turn within a cycle and whose `parallel_env()` is PettingZoo's `aec_to_parallel`, which hides from
#: a later agent of a cycle what the earlier ones just did. pursuit is one by measurement: its recipe's row was
#: trained in turn order, and through the parallel API its greedy pursuers fall into lockstep
#: (docs/benchmarks.md, "The parallel path").
TURN_BASED: tuple[str, ...] = ("pzasync.envs.forage", "pettingzoo.sisl.pursuit_v5")


def env_api_for(env_name: str) -> str | None:
    """The env API an env id declares for `env_api="auto"`: "aec" for a `TURN_BASED` game, else None (the env's
    own APIs decide: `pzasync.core.environments.choose_env_api`)."""
    return "aec" if any(same_env(env_name, env) for env in TURN_BASED) else None


def scoring_for(env_name: str) -> str | None:
    """How an env id's result is scored: its recipe's `scoring`, else `SCORING`'s entry, else None (read from
    the env: `pzasync.evaluation.scoring.default_scoring`)."""
    recipe = recipe_for(env_name)
    if recipe is not None and recipe.scoring is not None:
        return recipe.scoring
    return next((mode for env, mode in SCORING.items() if same_env(env_name, env)), None)
