"""`Recipe`: what pzasync knows about training one env by default, and `same_env`, how a recipe finds its env."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from pzasync.config import SCORING_MODES


def same_env(env_name: str, env_id: str) -> bool:
    """Whether an env id in module or registry form names the env `env_id` (its last dotted part compared):
    "connect_four_v3", "classic/connect_four_v3" and "pettingzoo.classic.connect_four_v3" are one env."""
    def short(name: str) -> str:
        return name.rsplit(".", 1)[-1].rsplit("/", 1)[-1].replace("-", "_")
    return short(env_name) == short(env_id)


@dataclass(frozen=True)
class Recipe:
    """How `pzasync train ENV` trains one env when its options leave a choice open, and what it scores the
    result against (also `pzasync bench --target`'s yardstick and the `recipe` column of `pzasync envs`).

    Every field has the behaviour of an env without a recipe as its default (`registry.DEFAULT_RECIPE`), so an
    entry names only what was measured to do better. Options given on the command line always win.
    """

    #: The env the recipe applies to, in module form ("pettingzoo.classic.connect_four_v3"). Any id naming the
    #: same env matches it, registry or short form included (`same_env`). None for the fallbacks
    #: (`registry.DEFAULT_RECIPE`, `registry.SELF_PLAY`), which apply to no env by name.
    env: str | None = None
    #: Learner spec (`NAME[,KEY=VALUE...]`, as --learner takes it) every learning agent, or the shared group,
    #: gets unless --learner or --learner-for is given; `mirror` may add `mirror=True` to it (`learner_spec`).
    learner: str = "dqn"
    #: Self-play: every agent shares one learner (the agent group "players" = "*", RunConfig.agent_groups) and
    #: trains in `league`, unless --group, --learner-for or --independent is given. `--self-play` asks for it
    #: on any env, `--independent` turns it off (`registry.train_recipe`).
    self_play: bool = False
    #: Opponent mix of every learning agent or group, drawn per episode (RunConfig.league, docs/league.md),
    #: unless --league is given; None: no league.
    league: str | None = None
    #: How often each seat is the one that trains in a league game against a snapshot or player
    #: (RunConfig.league_trainee_weights, --league-trainee); empty: uniform. Used only with a league.
    league_trainee_weights: Mapping[str, float] = field(default_factory=dict, hash=False)
    #: The yardstick player scored against while training and at the end (--vs; also `pzasync bench
    #: --target`'s): a player spec such as "one_ply" or "perfect", well above random so learning shows.
    vs: str = "random"
    #: The board plays the same mirrored left to right, one action per column: the learner also trains on
    #: mirror images (DQN's `mirror=True`, appended to `learner` by `learner_spec`; docs/learners.md).
    mirror: bool = False
    #: Env copies the actor steps side by side (--envs-per-actor) unless given.
    envs_per_actor: int = 1
    #: On-policy learners: the actor waits for its learner rather than overwrite transitions it has not read
    #: (RunConfig.backpressure), unless --backpressure/--no-backpressure is given. For a learner slower than the
    #: env, so that every agent step collected is learned from.
    backpressure: bool = False
    #: On-policy learners: their ring buffers hold this many learner batches (RunConfig.onpolicy_buffer_batches),
    #: unless --onpolicy-buffer-batches is given; None: the run's default. With backpressure, 1 keeps the actor
    #: at most about one update behind its learner: PPO's ratios then start near 1.
    onpolicy_buffer_batches: int | None = None
    #: Wall-clock minutes to train when neither --steps nor --minutes is given.
    minutes: float = 5.0
    #: How the result is scored (`SCORING_MODES`): None leaves it to `registry.scoring_for`'s table, else to a
    #: default read from the env (pzasync/evaluation/scoring.py).
    scoring: str | None = None
    # -- the env as the recipe trains it: parameter sharing, env arguments, preprocessing ------------------------
    #: Agent groups sharing one learner (RunConfig.agent_groups: name -> agent patterns), for teams of agents
    #: with the same spaces, unless --group, --independent or --learner-for naming an agent is given. Self-play
    #: recipes leave it empty (they group every seat as "players").
    agent_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    #: Env keyword arguments (as --env-arg KEY=VALUE); --env-arg given for the same key wins.
    env_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: Env wrappers applied in order when the env is made (EnvSpec.wrappers, core/wrappers.py): SuperSuit's by
    #: name, e.g. "resize_v1,x_size=84,y_size=84", unless --wrapper is given.
    wrappers: tuple[str, ...] = ()

    #: Why the entry is what it is, in one line and without figures (documentation for whoever changes it; the
    #: learning suite records it in suite.json).
    reason: str = ""
    #: Where the measurements behind the entry are: a link into the results page, "docs/benchmarks.md#ANCHOR"
    #: (tests/test_recipes.py checks that the page has the anchor); empty where nothing was measured.
    evidence: str = ""

    def __post_init__(self) -> None:
        # Frozen all the way down: a registry entry's weights cannot be changed through a lookup's result.
        object.__setattr__(self, "league_trainee_weights", MappingProxyType(dict(self.league_trainee_weights)))
        if self.scoring is not None and self.scoring not in SCORING_MODES:
            raise ValueError(f"Recipe.scoring {self.scoring!r}: must be one of {SCORING_MODES} or None")
        object.__setattr__(self, "agent_groups", MappingProxyType(
            {name: tuple(patterns) for name, patterns in self.agent_groups.items()}))
        object.__setattr__(self, "env_kwargs", MappingProxyType(dict(self.env_kwargs)))
        object.__setattr__(self, "wrappers", tuple(self.wrappers))

    @property
    def learner_spec(self) -> str:
        """The learner spec `pzasync train ENV` uses: `learner`, with `mirror=True` where `mirror` is set."""
        return self.learner + (",mirror=True" if self.mirror else "")

    def matches(self, env_name: str) -> bool:
        """Whether this recipe applies to `env_name` (module, registry or short form)."""
        return self.env is not None and same_env(env_name, self.env)
