"""Auto-tuning: the numbers behind RunConfig's "auto" options (`actors`, `envs_per_actor`, `env_workers`).

What runs fastest depends on the machine (its usable cores) and on the env (how long one step takes), not on
anything validation checks, so the choice is kept apart from the plan, as PufferLib keeps `autotune` apart
from its vector envs. `autotune` takes a config and the few facts the choice depends on and returns the config
with numbers, each choice with its reason (`RunPlan.auto`, printed by `pzasync train`). `RunPlan` calls it
with the facts it has checked; a runner says how it places the run's processes with a `Placement`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from pzasync.config import AUTO, AUTO_ENVS_PER_ACTOR, RunConfig
from pzasync.config.groups import chosen
from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import AgentLayout, uniform_legal

#: RunConfig(env_workers="auto") gives every spare core to an env whose step takes at least this long (timed
#: on a probe copy): pistonball through SuperSuit (0.8 ms) is env-dominated (docs/benchmarks.md, "Vectorised
#: acting").
AUTO_WORKER_MIN_STEP_S = 0.5e-3
#: A cheaper env gets one worker from this many copies on: on connect_four (0.05 ms a step) one worker beat
#: stepping the copies in the actor at 16 and 64 copies and lost at 4 and 8, where the halves the worker
#: steps while the actor runs inference are too small to hide the pipe.
AUTO_WORKER_MIN_COPIES = 16


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under `pzasync bench --cores` or taskset)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Placement:
    """What a runner fixes about a run's processes, which planning and auto-tuning count.

    The default is one actor process per `RunConfig.actors` and learners in processes of their own. The
    sequential runner is `Placement(actor_processes=1, inline_learners=True, by="the sequential runner")`.
    """

    #: Actor processes that step the `RunConfig.actors` actors' env copies between them; None: one per actor.
    #: 1 steps every actor's copies in one process (actors x envs_per_actor of them), and fixes
    #: actors="auto" at 1.
    actor_processes: int | None = None
    #: The learners run in the actor's process, taking no cores of their own.
    inline_learners: bool = False
    #: Who fixed `actor_processes`, quoted in the reason for actors="auto" ("1 (1 with <by>)").
    by: str = "the runner"

    def __post_init__(self) -> None:
        if self.actor_processes is not None and self.actor_processes < 1:
            raise ValueError(f"Placement(actor_processes={self.actor_processes!r}): must be >= 1 or None")


@dataclass(frozen=True)
class Tuning:
    """`autotune`'s answer: the config with numbers, and what each "auto" option became and why."""

    config: RunConfig
    #: Option -> "<value> (<reason>)", e.g. {"actors": "6 (8 usable cores, 2 for learner hosts)"}.
    choices: dict[str, str] = field(default_factory=dict)


def autotune(config: RunConfig, *, learner_cores: int, step_seconds: Callable[[], float],
             placement: Placement = Placement(), cores: int | None = None) -> Tuning:
    """`config` with every "auto" among `actors`, `envs_per_actor` and `env_workers` replaced by a number
    from the usable cores (`cores`, default `usable_cores()`), and the reason for each choice.

    Cores go first to the learners (`learner_cores`: the learner host processes, one Ray actor per learning
    unit, or 0 for inline learners) and the evaluator (when `eval_vs` is set), then one to each actor
    process, then to env workers:

    - `actors`: one per core left (at least 1). 1 where several actors cannot run: one actor process
      (`placement.actor_processes=1`), a league, or backend="ray".
    - `envs_per_actor`: AUTO_ENVS_PER_ACTOR.
    - `env_workers`: the cores still left (at most one per copy), if the env's step (`step_seconds()`, called
      only then) takes at least AUTO_WORKER_MIN_STEP_S; else one, from AUTO_WORKER_MIN_COPIES copies on;
      else 0.
    """
    if AUTO not in (config.actors, config.envs_per_actor, config.env_workers):
        return Tuning(config)
    cores = usable_cores() if cores is None else cores
    evaluator = 1 if config.eval_vs else 0
    left = cores - learner_cores - evaluator
    taken = f"{cores} usable cores, {learner_cores} for learner hosts" + (", 1 for the evaluator" if evaluator else "")
    changes: dict[str, Any] = {}
    choices: dict[str, str] = {}
    if config.envs_per_actor == AUTO:
        changes["envs_per_actor"] = AUTO_ENVS_PER_ACTOR
        choices["envs_per_actor"] = f"{AUTO_ENVS_PER_ACTOR} (pzasync train's measured choice)"
    copies = chosen(changes.get("envs_per_actor", config.envs_per_actor), "envs_per_actor")
    fixed = placement.actor_processes
    if config.actors != AUTO:
        actors = chosen(config.actors, "actors")
    else:
        why_one = (placement.by if fixed == 1 else "a league" if config.league
                   else f"backend={config.backend!r}" if config.backend != "shm" else None)
        if why_one:
            actors, choices["actors"] = 1, f"1 (1 with {why_one})"
        elif fixed is not None:
            actors, choices["actors"] = fixed, f"{fixed} ({fixed} actor processes with {placement.by})"
        else:
            actors = max(1, left)
            choices["actors"] = f"{actors} ({taken})"
        changes["actors"] = actors
    if config.env_workers == AUTO:
        acting = fixed or actors
        spare = left - acting
        workers = 0
        if spare < 1:
            why = f"no core left ({taken}, {acting} for the actor{'s' if acting > 1 else ''})"
        else:
            step_s = step_seconds()
            took = f"an env step takes {step_s * 1e3:.2f} ms"
            if step_s >= AUTO_WORKER_MIN_STEP_S:
                workers, why = min(copies, spare), f"{took}, {spare} cores left"
            elif copies >= AUTO_WORKER_MIN_COPIES:
                workers, why = 1, (f"{took}, under {AUTO_WORKER_MIN_STEP_S * 1e3:g} ms: one worker for "
                                   f"{copies} copies")
            else:
                why = (f"{took}, under {AUTO_WORKER_MIN_STEP_S * 1e3:g} ms, and {copies} copies: workers would "
                       f"not pay below {AUTO_WORKER_MIN_COPIES}")
        choices["env_workers"] = f"{workers} ({why})"
        changes["env_workers"] = workers
    return Tuning(replace(config, **changes).validate(), choices)


def env_step_seconds(env_spec: EnvSpec, layouts: dict[str, AgentLayout], seed: int, steps: int = 200,
                     budget_s: float = 1.0) -> float:
    """Mean seconds of one agent step on a fresh copy, random legal actions (for env_workers="auto"): the
    mean, since a parallel env converted to AEC runs its whole step at one agent's turn of each cycle."""
    import time

    import numpy as np

    env = env_spec.make()
    times: list[float] = []
    try:
        env.reset(seed=seed)
        rng, start = np.random.default_rng(seed), time.perf_counter()
        while len(times) < steps and time.perf_counter() - start < budget_s:
            if not env.agents:
                env.reset()
                continue
            agent = env.agent_selection
            observation, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                action = None
            else:
                layout = layouts[agent]
                _, mask = layout.split(observation, info)
                space = layout.action_space
                action = (uniform_legal(rng, mask) + int(getattr(space, "start", 0))
                          if mask is not None and mask.any() else space.sample())
            tick = time.perf_counter()
            env.step(action)
            times.append(time.perf_counter() - tick)
    finally:
        env.close()
    return float(np.mean(times)) if times else 0.0
