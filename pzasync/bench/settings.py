"""What one `pzasync bench` invocation measures (`BenchSettings`), each setting declared once: default, doc,
check and command-line form, from which the command's options are generated (pzasync/cli/bench.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from pzasync.config import RunConfig
from pzasync.config.declare import Check, OptionGroup, comma_list, key_values, option
from pzasync.config.toml import dumps, values
from pzasync.core.environments import EnvSpec, choose_env_api
from pzasync.errors import ConfigError
from pzasync.recipes import TRAIN_ENV, default_yardstick
from pzasync.runtime.plan import RunPlan
from pzasync.specs import learner_spec_of, learner_spec_text, parse_learner_spec

BARE_CONFIGS = ("bare_random", "bare_policy", "bare_parallel")
RUNNER_CONFIGS = ("async_idle", "sequential", "async_double_buffer", "async_snapshot", "async_free")
CONFIGS = BARE_CONFIGS + RUNNER_CONFIGS
#: Configurations that run the same algorithm (the same replay ratio) as the sequential baseline.
SAME_ALGORITHM = ("async_double_buffer", "async_snapshot")
SCORES = ("win_rate", "mean_return")
#: The settings that are trial dimensions (every runner configuration runs once per value), never run options.
DIMENSIONS = {"envs_per_actor": 1, "env_workers": 0, "actors": 1}


def _unknown_configs(configs: Any) -> str | None:
    unknown = [c for c in configs if c not in CONFIGS]
    return f"unknown {unknown}; choose from {list(CONFIGS)}" if unknown or not configs else None


def _cores(cores: int) -> str | None:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return None if cores <= available else f"must be between 1 and the {available} cores this process may use"


def _counts(name: str, doc: str) -> Any:
    """A trial dimension: a non-empty list of integers >= its least value, 'N[,N...]' on the command line."""
    least = DIMENSIONS[name]
    return option((least,), doc, Check(list, items=Check(int, ge=least), test=bool,
                                       why=f"a non-empty list of integers >= {least}"),
                  metavar="N[,N...]", parse=comma_list(f"--{name.replace('_', '-')}", int, "integers"))


@dataclass(kw_only=True)
class BenchSettings(OptionGroup):
    """What one `pzasync bench` invocation measures; validated before any trial starts."""

    TABLE = "bench"
    TITLE = "Bench settings"
    PREFIX = "bench option"

    env: Any = option(TRAIN_ENV, "The env to measure (an env id, as `pzasync train` takes it).", Check(object),
                      argument=True)
    env_kwargs: dict[str, Any] = option({}, "Env keyword arguments.", Check(dict), alias="--env-arg",
                                        metavar="KEY=VALUE", multiple=True, parse=key_values("--env-arg"))
    learners: Any = option("dqn", "Learner spec as the runners take it: one spec for every agent (NAME[,KEY=VALUE...] "
                                  "on the command line), or a dict with \"*\" as the default.", Check(object),
                           alias="--learner", metavar="SPEC", parse=parse_learner_spec)
    agent_steps: int = option(30_000, "Agent steps per trial.", Check(int, ge=1), alias="--steps", metavar="N")
    replay_ratio: float = option(0.25, "Updates per agent step in `sequential` and both same-algorithm async "
                                       "configurations.",
                                 Check(float, gt=0, finite=True, why="a positive number of updates per agent step"),
                                 metavar="R")
    seeds: int = option(5, "Seeds per configuration.", Check(int, ge=1), metavar="K")
    configs: tuple[str, ...] = option(CONFIGS, "The configurations to run.", Check(list, items=Check(str)),
                                      metavar="C[,C...]", parse=comma_list("--configs"), validator=_unknown_configs)
    target: float | None = option(None, "Evaluation score to reach (e.g. 0.4 win rate against the one-ply player): "
                                        "adds learning curves and time to target. None: throughput only.",
                                  Check(float, finite=True, optional=True), metavar="SCORE")
    target_window: int = option(3, "The target counts as reached where the mean of this many consecutive "
                                   "evaluations first reaches it.", Check(int, ge=1), metavar="W")
    score: str = option("win_rate", "Evaluation score against the yardstick (`versus`).",
                        Check(str, choices=SCORES))
    versus: str | None = option(None, "The player snapshots are scored against. None picks the env's recipe's "
                                      "yardstick (pzasync.recipes: the one-ply player on connect_four, the perfect "
                                      "player on tictactoe), random play elsewhere.",
                                Check(str, optional=True, test=bool,
                                      why="a player spec such as 'one_ply' or 'random'"), alias="--vs",
                                metavar="PLAYER")
    eval_every: int | None = option(None, "Agent steps between policy snapshots. None: agent_steps / 20.",
                                    Check(int, ge=1, optional=True), metavar="N")
    eval_episodes: int = option(100, "Games per snapshot evaluation.", Check(int, ge=1), metavar="N")
    eval_seed: int = option(2026, "Seed of the snapshot evaluations.", Check(int), metavar="SEED")
    cores: int | None = option(None, "Pin each trial (and the learner processes it starts) to the first N cores. "
                                     "None: all cores.", Check(int, ge=1, optional=True), metavar="N",
                               validator=_cores)
    run_options: dict[str, Any] = option({}, "Extra RunConfig options for every runner trial (e.g. "
                                             "publish_every=20).", Check(dict), alias="--option",
                                         metavar="KEY=VALUE", multiple=True, parse=key_values("--option"))
    envs_per_actor: tuple[int, ...] = _counts("envs_per_actor", "Env copies per actor (RunConfig.envs_per_actor): "
                                                                "every runner configuration runs at each N (e.g. "
                                                                "1,4,16); the bare loops stay single-env.")
    env_workers: tuple[int, ...] = _counts("env_workers", "Env worker processes (RunConfig.env_workers): every runner "
                                                          "configuration runs at each W <= N (e.g. 0,2).")
    actors: tuple[int, ...] = _counts("actors", "Actor processes (RunConfig.actors): every runner configuration runs "
                                                "at each M; the sequential trials step M x N copies in one actor.")
    trial_timeout_s: float = option(3600.0, "Seconds one trial may take before it is stopped and reported as "
                                            "failed.", Check(float, gt=0), metavar="SECONDS")

    def to_toml(self, header: str = "") -> str:
        """Every setting as TOML under [bench] (`pzasync bench --print-config`); `toml_values` reads it back.
        Learner specs are written as the command line takes them where they can be ('dqn,lr=0.001')."""
        shown = replace(self, learners=learner_spec_text(self.learners), configs=tuple(self.configs))
        return dumps(shown, [BenchSettings], header)

    @classmethod
    def toml_values(cls, text: str, source: str = "config file") -> dict[str, Any]:
        """The settings a TOML text sets ([bench] table, or flat keys), each checked on its own, learner specs
        parsed; errors start with `source`."""
        found = values(text, [cls], source)
        if "learners" in found:
            found["learners"] = learner_spec_of(found["learners"])
        for name in ("configs", *DIMENSIONS):
            if name in found:
                found[name] = tuple(found[name])
        return found

    def validate(self) -> BenchSettings:
        """Raise ConfigError naming the first bad setting (or run option); returns self."""
        self.check_options()
        for name in DIMENSIONS:
            if name in self.run_options:
                raise ConfigError(f"bench option run_options={self.run_options!r}: give {name} as the bench "
                                  f"setting (it runs every value), not as a run option")

        RunConfig.from_dict({"replay_ratio": self.replay_ratio, **self.run_options})
        if "bare_parallel" in self.configs and tuple(self.configs) != CONFIGS:
            try:
                choose_env_api(EnvSpec.of(self.env, **self.env_kwargs), "parallel")
            except ConfigError as exc:
                raise ConfigError(f"bench configuration bare_parallel: {str(exc).split(': ', 1)[-1]}") from None
        if self.target is not None:
            RunPlan(EnvSpec.of(self.env, **self.env_kwargs), self.learners,
                    RunConfig(eval_vs=self.yardstick, agent_groups=self.run_options.get("agent_groups", {})))
        return self

    def runnable_configs(self) -> tuple[str, ...]:
        """`configs` this env can run: the default list leaves out bare_parallel for an env without a parallel API
        (`validate` refuses it where it was asked for)."""
        if "bare_parallel" not in self.configs or tuple(self.configs) != CONFIGS:
            return tuple(self.configs)
        try:
            choose_env_api(EnvSpec.of(self.env, **self.env_kwargs), "parallel")
        except ConfigError:
            return tuple(c for c in self.configs if c != "bare_parallel")
        return tuple(self.configs)

    @property
    def yardstick(self) -> str:
        """The player snapshots are scored against: `versus`, else the env's recipe's."""
        return self.versus or default_yardstick(self.env)

    @property
    def snapshot_every(self) -> int:
        """Agent steps between policy snapshots: `eval_every`, else agent_steps / 20."""
        return self.eval_every or max(1, self.agent_steps // 20)
