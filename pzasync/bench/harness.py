"""`pzasync bench`: async against sequential on the same work, and the reference loops they are judged by.

Every trial runs in a fresh spawned process (clean CPU and peak-memory accounting, no state carried
between trials), in seed-major order so that drifts in machine speed hit every configuration alike:

- ``bare_random``: the env alone with random legal actions, the env's own limit (its `last()` read the way
  the actor reads it: `bare_loop`);
- ``bare_policy``: the same loop plus the learning agents' policy forwards, the single-actor limit;
- ``bare_parallel``: the env's parallel API with one batched forward per policy and cycle (`bare_parallel_loop`),
  what a user writes by hand against the parallel API, the reference of the parallel path;
- ``async_idle``: the async actor with its learner processes present but idle (off-policy learners only);
- ``sequential``: SequentialRunner at the replay ratio;
- ``async_double_buffer`` / ``async_snapshot``: AsyncRunner at the same replay ratio, so the same algorithm;
- ``async_free``: AsyncRunner with free-running learners; it runs a different algorithm (another replay
  ratio) and is reported apart, never as a speed-up.

With `envs_per_actor` (e.g. 1, 4, 16) every runner configuration runs once per number of env copies, and with
`env_workers` (e.g. 0, 2) once per number of env worker processes (at most the copies); a configuration at
N > 1 copies is labelled ``config@N`` (``async_idle@16``), with W workers ``config@NwW`` (``async_idle@8w2``).
The bare loops stay single-env references, so ``async_idle@16 / bare_policy`` is what vectorised acting buys
over the single-env limit.

With a target score, runners keep policy snapshots every `eval_every` agent steps; after the run (outside its
timing) each snapshot plays `eval_episodes` games against the yardstick player (`versus`: the env's recipe's,
`pzasync.recipes`, random play elsewhere) on a fixed seed, giving learning
curves and the time and agent steps to reach the target. The JSON layout is `docs/bench-schema.json`.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pzasync.bench.settings import BARE_CONFIGS, CONFIGS, SAME_ALGORITHM, BenchSettings
from pzasync.core.spaces import env_action_converter
from pzasync.errors import ConfigError, PzasyncError, report_unclean_exit

SCHEMA_VERSION = 2


@dataclass
class TrialSpec:
    """One configuration at one seed (and, for runner configurations, one number of env copies and workers)."""

    config: str
    seed: int
    settings: BenchSettings
    envs: int = 1
    workers: int = 0
    actors: int = 1

    @property
    def label(self) -> str:
        return trial_label(self.config, self.envs, self.workers, self.actors)


def trial_label(config: str, envs: int = 1, workers: int = 0, actors: int = 1) -> str:
    """A configuration's name in reports: `config`, `config@N` with N > 1 env copies per actor, `config@NwW`
    with W env workers, `config@NaM` with M actor processes (`config@4w2a2`)."""
    if envs == 1 and workers == 0 and actors == 1:
        return config
    return f"{config}@{envs}" + (f"w{workers}" if workers else "") + (f"a{actors}" if actors != 1 else "")


def split_label(label: str) -> tuple[str, int, int, int]:
    """`trial_label`'s inverse: (configuration, env copies, env workers, actors)."""
    config, _, rest = label.partition("@")
    rest, _, actors = rest.partition("a")
    envs, _, workers = rest.partition("w")
    return config, int(envs or 1), int(workers or 0), int(actors or 1)


# ---------------------------------------------------------------------------------------------- reference loops
def bare_loop(env: Any, learners: Any | None, agent_steps: int, seed: int = 0,
              on_progress: Callable[[int], None] | None = None, groups: dict[str, list[str]] | None = None) -> float:
    """Agent steps per second of a plain AEC loop: `agent_iter`, `last`, a decision, `step`; nothing else.

    With `learners`, each decision of a learning agent runs its policy forward (the same module the actor
    runs, exploring); other agents, and every agent without `learners`, take random legal actions. `groups`
    (RunConfig.agent_groups) lets learner specs name agent groups; every member runs its own copy.
    """
    from pzasync.core.environments import EnvSpec
    from pzasync.core.spaces import env_layouts, probe_info_masks
    from pzasync.core.transitions import LayoutBook
    from pzasync.evaluation.evaluate import policy_actor, random_actor
    from pzasync.runtime.plan import RunPlan

    spec = EnvSpec.of(env)
    instance = spec.make()
    try:
        layouts = env_layouts(instance, probe_info_masks(instance, seed=seed))
        actors = {a: random_actor(instance, seed + i) for i, a in enumerate(layouts)}
        if learners is not None:
            from pzasync.config import RunConfig

            plan = RunPlan(spec, learners, RunConfig(agent_groups=groups or {}))
            for a, p in plan.agents.items():
                policy = p.build_policy(seed)
                actors[a] = policy_actor(policy, p.layout, explore=True) if p.learns else actors[a]
        to_env = env_action_converter(layouts)
        book = LayoutBook(instance, layouts, fixed=True)
        steps, first = 0, True
        start = time.perf_counter()
        while steps < agent_steps:
            instance.reset(seed=seed if first else None)
            first = False
            for agent in instance.agent_iter():
                observation, _reward, terminated, truncated, info = instance.last()
                if terminated or truncated:
                    instance.step(None)
                    continue
                if steps >= agent_steps:
                    break
                obs, mask = book.get(agent, info).split(observation, info)
                instance.step(to_env(agent, actors[agent](agent, obs, mask)))
                steps += 1
                if on_progress is not None and not steps % 1000:
                    on_progress(steps)
        elapsed = time.perf_counter() - start
    finally:
        instance.close()  # a remote env id's connection, and the server a cmd: id launched
    return steps / elapsed


def bare_parallel_loop(env: Any, learners: Any | None, agent_steps: int, seed: int = 0,
                       on_progress: Callable[[int], None] | None = None,
                       groups: dict[str, list[str]] | None = None) -> float:
    """Agent steps per second of a plain loop over the env's parallel API with one batched forward per policy and
    cycle: `reset`, then per cycle every live agent's observation grouped by learning unit, one `act` per unit's
    policy (the same module the actor runs, exploring; random legal actions for players that do not learn), one
    `step(actions)`. What a user writes against the parallel API by hand: the reference the parallel path is
    judged by (docs/transitions.md, "The parallel path")."""
    from pzasync.config import RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.core.spaces import env_layouts, probe_info_masks, stack_masks
    from pzasync.core.transitions import LayoutBook
    from pzasync.evaluation.evaluate import random_actor
    from pzasync.runtime.plan import RunPlan

    spec = EnvSpec.of(env)
    probe = spec.make()
    try:
        layouts = env_layouts(probe, probe_info_masks(probe, seed=seed))
    finally:
        probe.close()
    instance = spec.make_parallel()
    try:
        plan = RunPlan(spec, learners if learners is not None else "random", RunConfig(agent_groups=groups or {}))
        policies: dict[str, Any] = {}  # unit -> its module, built once
        unit_of: dict[str, str] = {}
        for agent, p in plan.agents.items():
            if p.learns:
                if p.unit not in policies:
                    policies[p.unit] = p.build_policy(seed)
                unit_of[agent] = p.unit
        randoms = {a: random_actor(instance, seed + i) for i, a in enumerate(layouts)}
        to_env = env_action_converter(layouts)
        book = LayoutBook(instance, layouts, fixed=True)
        steps, first = 0, True
        start = time.perf_counter()
        while steps < agent_steps:
            observations, infos = instance.reset(seed=seed if first else None)
            first = False
            while instance.agents and steps < agent_steps:
                by_unit: dict[str, list[tuple[str, Any, Any]]] = {}
                actions: dict[str, Any] = {}
                for agent in instance.agents:
                    obs, mask = book.get(agent, infos.get(agent)).split(observations[agent], infos.get(agent))
                    unit = unit_of.get(agent)
                    if unit is None:
                        actions[agent] = to_env(agent, randoms[agent](agent, obs, mask))
                    else:
                        by_unit.setdefault(unit, []).append((agent, obs, mask))
                for unit, rows in by_unit.items():
                    layout = layouts[rows[0][0]]
                    masks = None if rows[0][2] is None else stack_masks([m for _, _, m in rows])
                    chosen, _ = policies[unit].act(layout.batch([o for _, o, _ in rows]), masks, True)
                    for (agent, _, _), action in zip(rows, chosen):
                        actions[agent] = to_env(agent, action)
                observations, _rewards, _terminations, _truncations, infos = instance.step(actions)
                previous, steps = steps, steps + len(actions)
                if on_progress is not None and steps // 1000 > previous // 1000:
                    on_progress(steps)
        elapsed = time.perf_counter() - start
    finally:
        instance.close()
    return steps / elapsed


# ---------------------------------------------------------------------------------------------- pure figures
def summarize(values: Sequence[float | None]) -> dict[str, float | None]:
    """Median and spread of repeated measurements (NaN-free input; empty gives n=0)."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not len(arr):
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": float(np.median(arr)), "min": float(arr.min()), "max": float(arr.max()), "n": int(len(arr))}


def time_to_target(curve: list[dict], target: float, window: int = 1) -> dict | None:
    """The first curve point from which the worst learning agent's score, averaged over that point and the
    next `window - 1` points, is at least `target` (reached and held); None if no such point.

    A window above 1 keeps one lucky evaluation from counting: with ~100 games per point, a policy that
    wins 88% passes 0.9 in about a third of its evaluations.
    """
    worst = [min(p["scores"].values()) if p["scores"] else -math.inf for p in curve]
    for i in range(len(curve) - window + 1):
        if float(np.mean(worst[i:i + window])) >= target:
            point = curve[i]
            return {"seconds": point["seconds"], "agent_steps": point["agent_steps"], "updates": point["updates"]}
    return None


def _median_or_inf(values: list[float | None]) -> float | None:
    """Median where a seed that never reached the target counts as infinitely slow (so it cannot help)."""
    if not values:
        return None
    median = float(np.median([math.inf if v is None else v for v in values]))
    return None if math.isinf(median) else median


def learner_cpu_per_agent_step(trial: dict) -> float | None:
    """CPU seconds per agent step of a trial's busiest learner process (start-up excluded), or None where no
    learner ran in a process of its own (the sequential runner, the bare loops)."""
    learners = [p["cpu_seconds"] for p in trial.get("processes", []) if p["name"].startswith("learner")]
    return max(learners) / trial["agent_steps"] if learners and trial.get("agent_steps") else None


def summarize_trials(trials: list[dict]) -> dict[str, dict]:
    """Per configuration: medians and spreads over seeds of every figure a trial reports."""
    out: dict[str, dict] = {}
    def order(label: str) -> tuple[int, int, int, int]:
        config, envs, workers, actors = split_label(label)
        return CONFIGS.index(config), actors, envs, workers

    for config in sorted({t["config"] for t in trials}, key=order):
        rows = [t for t in trials if t["config"] == config]
        agents = sorted({a for t in rows for a in t.get("updates_per_s", {})})
        summary: dict[str, Any] = {
            "seeds": len(rows),
            "agent_steps_per_s": summarize([t["agent_steps_per_s"] for t in rows]),
            "acting_seconds": summarize([t["acting_seconds"] for t in rows]),
            "startup_seconds": summarize([t["startup_seconds"] for t in rows]),
            "updates_per_s": {a: summarize([t["updates_per_s"][a] for t in rows]) for a in agents},
            "updates_per_agent_step": {a: summarize([t["updates_per_agent_step"][a] for t in rows]) for a in agents},
            "policy_lag_mean": {a: summarize([t["policy_lag_mean"][a] for t in rows]) for a in agents},
            "policy_lag_p95": {a: summarize([t["policy_lag_p95"][a] for t in rows]) for a in agents},
            "peak_rss_mb": summarize([sum(p["peak_rss_mb"] for p in t["processes"]) for t in rows]),
            "shm_bytes": summarize([t["shm_bytes"] for t in rows]),
            "learner_cpu_per_agent_step": summarize([learner_cpu_per_agent_step(t) for t in rows]),
        }
        reached = [t.get("target_reached") for t in rows if "target_reached" in t]
        if reached:
            summary["time_to_target"] = {
                "reached": sum(r is not None for r in reached),
                "seconds": summarize([r["seconds"] for r in reached if r is not None]),
                "agent_steps": summarize([r["agent_steps"] for r in reached if r is not None]),
                "median_seconds_unreached_as_inf": _median_or_inf([r and r["seconds"] for r in reached]),
            }
        out[config] = summary
    return out


def headline(summary: dict[str, dict]) -> dict[str, Any]:
    """The ratios the benchmark is quoted by, from the per-configuration medians.

    - `actor_over_bare_policy`: async actor (idle learners) / bare loop with the same policy forwards.
    - `actor_over_bare_parallel`: async actor (idle learners) / the parallel API's loop with one batched forward
      per policy and cycle (`bare_parallel`).
    - `bare_policy_over_bare_random`: what the policy forwards cost against the env alone.
    - `async_over_sequential_wall[mode]`: wall time of the same agent steps, async / sequential (< 1 is faster).
    - `async_over_sequential_time_to_target[mode]`: median time to the target score, async / sequential.
    - `async_overlap[mode]`: how close the async run came to the better of its two limits, on the same agent
      steps: max(actor alone, learner alone) / async wall, where the actor alone is `async_idle`'s wall and
      the learner alone is the CPU time the async run's learner processes spent (the slowest one's: its
      updates and publishing, start-up excluded, `learner_cpu_per_agent_step`). Where no learner process
      reported it, the learner alone is estimated as sequential's wall less the actor alone
      (`async_learner_alone_from[mode]` says which). 1 is perfect overlap; a low figure is a runtime that
      overlaps badly, while a learner-bound run (`async_limit[mode]` = "learner") can be slow yet overlap well.
    - `async_free_updates_per_agent_step`: the replay ratio free running reached (a different algorithm).
    - `vector[config@N(wW)]`: a configuration at N env copies per actor (and W env workers) against the
      single-env references: `over_bare_policy`, `over_bare_random`, and `over_one_env` (the same
      configuration with one copy stepped by the actor).
    """
    def rate(config: str) -> float | None:
        return summary.get(config, {}).get("agent_steps_per_s", {}).get("median")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b is not None and b != 0 else None

    out: dict[str, Any] = {
        "actor_over_bare_policy": ratio(rate("async_idle"), rate("bare_policy")),
        "actor_over_bare_parallel": ratio(rate("async_idle"), rate("bare_parallel")),
        "bare_policy_over_bare_random": ratio(rate("bare_policy"), rate("bare_random")),
        "async_over_sequential_wall": {}, "async_over_sequential_time_to_target": {},
        "async_overlap": {}, "async_limit": {}, "async_learner_alone_from": {},
    }
    actor_alone = ratio(1.0, rate("async_idle"))  # seconds per agent step
    sequential = ratio(1.0, rate("sequential"))
    seq_ttt = summary.get("sequential", {}).get("time_to_target", {}).get("median_seconds_unreached_as_inf")
    for config in SAME_ALGORITHM:
        if config in summary:
            mode = config.removeprefix("async_")
            out["async_over_sequential_wall"][mode] = ratio(rate("sequential"), rate(config))
            learner_cpu = summary[config].get("learner_cpu_per_agent_step", {}).get("median")
            if learner_cpu is not None:
                learner_alone, source = learner_cpu, "learner CPU"
            elif actor_alone is not None and sequential is not None:
                learner_alone, source = max(0.0, sequential - actor_alone), "sequential less actor"
            else:
                learner_alone, source = None, None
            if actor_alone is not None and learner_alone is not None and rate(config):
                out["async_overlap"][mode] = max(actor_alone, learner_alone) * rate(config)
                out["async_limit"][mode] = "learner" if learner_alone > actor_alone else "actor"
                out["async_learner_alone_from"][mode] = source
            ttt = summary[config].get("time_to_target", {}).get("median_seconds_unreached_as_inf")
            if "time_to_target" in summary[config] and "time_to_target" in summary.get("sequential", {}):
                out["async_over_sequential_time_to_target"][mode] = ratio(ttt, seq_ttt)
    out["vector"] = {}
    for label in summary:
        config, envs, workers, actors = split_label(label)
        if label != config:
            out["vector"][label] = {"envs_per_actor": envs, "env_workers": workers, "actors": actors,
                                    "over_bare_policy": ratio(rate(label), rate("bare_policy")),
                                    "over_bare_parallel": ratio(rate(label), rate("bare_parallel")),
                                    "over_bare_random": ratio(rate(label), rate("bare_random")),
                                    "over_one_env": ratio(rate(label), rate(config))}
    free = summary.get("async_free", {}).get("updates_per_agent_step")
    out["async_free_updates_per_agent_step"] = {a: s["median"] for a, s in free.items()} if free else None
    return out


# ---------------------------------------------------------------------------------------------- one trial
def _runner_config(spec: TrialSpec) -> dict[str, Any]:
    s = spec.settings
    options: dict[str, Any] = {"seed": spec.seed, "replay_ratio": s.replay_ratio, **s.run_options,
                               "envs_per_actor": spec.envs, "env_workers": spec.workers, "actors": spec.actors}
    if spec.config == "async_snapshot":
        options["publish_mode"] = "snapshot"
    elif spec.config == "async_double_buffer":
        options["publish_mode"] = "double_buffer"
    elif spec.config == "async_free":
        options["replay_ratio"] = None
    if s.target is not None and spec.config in ("sequential",) + SAME_ALGORITHM + ("async_free",):
        options["snapshot_every_steps"] = s.snapshot_every
    options.update(checkpoint_every_s=0.0, progress=False, out_dir=None)
    return options


def _idle_learners(plan: Any) -> dict[str, Any]:
    """The same learners with updates that never start: acting and buffer writes only."""
    specs = {}
    for unit, p in plan.units.items():  # keyed by learner unit: a group's spec goes under its name
        options = dict(p.options)
        if p.learns:
            options["learning_starts"] = 10**15
        specs[unit] = (p.learner_path, options)
    return specs


def _figures(result: Any, learning_agents: list[str]) -> dict[str, Any]:
    """A runner trial's figures, per learning unit (an agent, or an agent group: its learner's figures, which
    every member reports, and its members' agent steps). CPU fractions are CPU seconds per acting second."""
    units: dict[str, list[Any]] = {}
    for name, r in result.agents.items():
        units.setdefault(r.group or name, []).append(r)
    learning = {a: units[a][0] for a in learning_agents}
    unit_steps = {a: sum(r.agent_steps for r in units[a]) for a in learning_agents}
    acting = result.acting_seconds
    processes = [{"name": "runner (actor" + (" + learners)" if result.runner == "sequential" else ")"),
                  "cpu_seconds": result.process_cpu_seconds,
                  "cpu_fraction": result.process_cpu_seconds / max(1e-9, acting),
                  "peak_rss_mb": result.process_peak_rss_mb}]
    for proc in result.actor_processes:
        processes.append({"name": f"actor {proc['actor']}", "cpu_seconds": proc["cpu_seconds"],
                          "cpu_fraction": proc["cpu_seconds"] / max(1e-9, acting), "peak_rss_mb": proc["peak_rss_mb"]})
    hosts: dict[Any, list[tuple[str, Any]]] = {}  # learners that share a host process count it once
    for a, (r, *_members) in units.items():
        if r.learner_cpu_seconds is not None:
            hosts.setdefault(r.learner_pid or a, []).append((a, r))
    for hosted in hosts.values():
        cpu = max(r.learner_cpu_seconds for _a, r in hosted)  # each counts from its own start: the earliest
        processes.append({"name": ("learner " if len(hosted) == 1 else "learners ") + ", ".join(a for a, _r in hosted),
                          "cpu_seconds": cpu, "cpu_fraction": cpu / max(1e-9, acting),
                          "peak_rss_mb": max(r.learner_peak_rss_mb or 0.0 for _a, r in hosted)})
    return {
        "agent_steps": result.agent_steps, "wall_seconds": result.wall_seconds,
        "startup_seconds": result.startup_seconds, "acting_seconds": acting,
        "agent_steps_per_s": result.actor_steps_per_second,
        "updates_per_s": {a: r.updates / acting for a, r in learning.items()},
        "updates_per_agent_step": {a: r.updates / max(1, unit_steps[a]) for a, r in learning.items()},
        "policy_lag_mean": {a: r.policy_lag_mean for a, r in learning.items()},
        "policy_lag_p95": {a: r.policy_lag_p95 for a, r in learning.items()},
        "actor_wait_s": {a: r.actor_wait_s for a, r in learning.items()},
        "processes": processes, "shm_bytes": result.shm_bytes, "stopped_because": result.stopped_because,
    }


def _evaluate_snapshots(plan: Any, snapshots: list[Any], settings: BenchSettings) -> list[dict]:
    """Each snapshot's learning agents, greedy, against the yardstick player on the fixed evaluation seed."""
    from pzasync.core.environments import EnvSpec
    from pzasync.evaluation.evaluate import evaluate_against
    from pzasync.learners import vector_to_policy

    spec = EnvSpec.of(settings.env, **settings.env_kwargs)
    curve = []
    for snap in snapshots:
        scores = {}
        for agent, vector in snap.vectors.items():
            p = plan.agents[agent]
            policy = p.build_policy(0)
            vector_to_policy(vector, policy)
            (result,) = evaluate_against(spec, {agent: (policy, p.layout)}, settings.yardstick, settings.eval_episodes,
                                         seed=settings.eval_seed)
            scores[agent] = result.win_rate if settings.score == "win_rate" else result.mean
        curve.append({"agent_steps": snap.agent_steps, "seconds": snap.seconds, "updates": snap.updates,
                      "scores": scores})
    return curve


def run_trial(spec: TrialSpec, on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run one trial in this process and return its figures (the body of a trial's fresh process)."""
    from pzasync.config import RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.runners import AsyncRunner, SequentialRunner
    from pzasync.runtime.results import process_usage

    s = spec.settings
    env = EnvSpec.of(s.env, **s.env_kwargs)
    trial: dict[str, Any] = {"config": spec.label, "seed": spec.seed, "envs_per_actor": spec.envs,
                             "env_workers": spec.workers, "actors": spec.actors}
    if spec.config in BARE_CONFIGS:
        import torch

        torch.set_num_threads(1)
        cpu_before = process_usage()[0]
        start = time.perf_counter()
        loop = bare_parallel_loop if spec.config == "bare_parallel" else bare_loop
        rate = loop(env, s.learners if spec.config in ("bare_policy", "bare_parallel") else None, s.agent_steps,
                    spec.seed, on_progress, groups=s.run_options.get("agent_groups"))
        wall = time.perf_counter() - start
        cpu, rss = process_usage()
        # The loop's own time (env creation and policy construction excluded), as for the runners.
        trial.update(agent_steps=s.agent_steps, wall_seconds=wall, startup_seconds=0.0,
                     acting_seconds=s.agent_steps / rate,
                     agent_steps_per_s=rate, updates_per_s={}, updates_per_agent_step={}, policy_lag_mean={},
                     policy_lag_p95={}, actor_wait_s={}, shm_bytes=0, stopped_because="agent-step budget reached",
                     processes=[{"name": "bare loop", "cpu_seconds": cpu - cpu_before,
                                 "cpu_fraction": (cpu - cpu_before) / wall, "peak_rss_mb": rss}])
        return trial
    config = RunConfig.from_dict(_runner_config(spec))
    cls = SequentialRunner if spec.config == "sequential" else AsyncRunner
    runner = cls(env, s.learners, config)
    if spec.config == "async_idle":
        if any(p.learns and p.learner_cls.on_policy for p in runner.plan.agents.values()):
            raise ConfigError("bench config 'async_idle' needs off-policy learners (it sets learning_starts so "
                              "that they never update); leave it out for on-policy learners")
        runner = cls(env, _idle_learners(runner.plan), config)
    stop_watch = threading.Event()
    if on_progress is not None:
        def watch() -> None:
            while not stop_watch.wait(0.25):
                monitor = getattr(runner, "monitor", None)
                if monitor is not None:
                    try:
                        on_progress(monitor.total_steps())
                    except (AttributeError, TypeError):  # the run released its counters meanwhile
                        return
        threading.Thread(target=watch, daemon=True, name="pzasync-bench-progress").start()
    try:
        result = runner.run(agent_steps=s.agent_steps)
    finally:
        stop_watch.set()
    trial.update(_figures(result, [p.agent for p in runner.plan.learning]))
    if s.target is not None and result.snapshots:
        trial["curve"] = _evaluate_snapshots(runner.plan, result.snapshots, s)
    return trial


def _trial_process_main(spec: TrialSpec, conn: Any, steps: Any) -> None:
    if spec.settings.cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: spec.settings.cores])
    try:
        def progress(n: int) -> None:
            steps.value = n

        conn.send(("ok", run_trial(spec, progress)))
    except BaseException as exc:  # noqa: BLE001 - sent to the parent, which raises it with this traceback
        try:
            conn.send(("error", exc, traceback.format_exc()))
        except Exception:  # noqa: BLE001 - an exception that does not pickle travels as text
            conn.send(("error", PzasyncError(f"{type(exc).__name__}: {exc}"), traceback.format_exc()))
    finally:
        conn.close()
    # The report is sent and the runner has released everything it made. Leave without the interpreter's
    # teardown: in about one async trial in seven that teardown hit a C++ `std::terminate` ("terminate called
    # without an active exception", SIGABRT) after the work was done (docs/benchmarks.md#reliability).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_trial_in_fresh_process(spec: TrialSpec, on_progress: Callable[[int], None] | None = None) -> dict:
    """Run `spec` in a spawned process; its exception is raised here, as the same type, with its traceback."""
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    steps = ctx.Value("q", 0, lock=False)
    proc = ctx.Process(target=_trial_process_main, args=(spec, sender, steps), name=f"pzasync-bench-{spec.label}")
    proc.start()
    sender.close()
    deadline = time.monotonic() + spec.settings.trial_timeout_s
    try:
        while not receiver.poll(0.2):
            if on_progress is not None:
                on_progress(steps.value)
            if not proc.is_alive() and not receiver.poll(0.5):
                raise PzasyncError(f"bench trial {spec.label} (seed {spec.seed}) died with exit code "
                                   f"{proc.exitcode} before reporting")
            if time.monotonic() > deadline:
                raise PzasyncError(f"bench trial {spec.label} (seed {spec.seed}) took longer than "
                                   f"trial_timeout_s={spec.settings.trial_timeout_s:g}s; stopped")
        try:
            status, *payload = receiver.recv()
        except EOFError:
            proc.join(5)
            raise PzasyncError(f"bench trial {spec.label} (seed {spec.seed}) died with exit code "
                               f"{proc.exitcode} before reporting") from None
    except BaseException:
        if proc.is_alive():
            proc.terminate()  # SIGTERM: a runner stops gracefully and releases its shared memory
        raise
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join()
        receiver.close()
    if status != "error":
        report_unclean_exit(f"bench trial {spec.label} (seed {spec.seed})", proc)
    if status == "error":
        exc, trace = payload
        if hasattr(exc, "add_note"):
            exc.add_note(f"in bench trial {spec.label} (seed {spec.seed}), whose traceback was:\n{trace}")
        raise exc
    return payload[0]


# ---------------------------------------------------------------------------------------------- the invocation
def machine_info(cores: int | None = None) -> dict[str, Any]:
    """What the figures were measured on."""
    import numpy
    import pettingzoo

    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = None
    if hasattr(os, "sysconf"):
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        except (ValueError, OSError):
            pass
    return {"cpu_model": model, "cpus": available, "cores_used": cores or available, "memory_gib": mem,
            "platform": platform.platform(), "python": sys.version.split()[0], "numpy": numpy.__version__,
            "torch": torch_version, "pettingzoo": pettingzoo.__version__}


def plan_trials(settings: BenchSettings) -> list[TrialSpec]:
    """Seed-major order: every configuration (runner ones at each `envs_per_actor`) at seed 0, then seed 1, ..."""
    configs = settings.runnable_configs()
    return [TrialSpec(c, seed, settings, envs, workers, actors)
            for seed in range(settings.seeds) for c in CONFIGS if c in configs
            for actors in ((1,) if c in BARE_CONFIGS else settings.actors)
            for envs in ((1,) if c in BARE_CONFIGS else settings.envs_per_actor)
            for workers in ((0,) if c in BARE_CONFIGS else settings.env_workers) if workers <= envs]


def run_bench(settings: BenchSettings, *, on_trial_start: Callable[[int, TrialSpec], None] | None = None,
              on_progress: Callable[[int], None] | None = None,
              runner: Callable[..., dict] = run_trial_in_fresh_process) -> dict[str, Any]:
    """Run every trial and return the report (the JSON document). On Ctrl-C the partial report is returned
    with `interrupted: true`."""
    from pzasync import __version__

    settings.validate()
    trials: list[dict] = []
    interrupted = False
    started = time.time()
    for i, spec in enumerate(plan_trials(settings)):
        if on_trial_start is not None:
            on_trial_start(i, spec)
        try:
            trial = runner(spec, on_progress)
        except KeyboardInterrupt:
            interrupted = True
            break
        if settings.target is not None and "curve" in trial:
            trial["target_reached"] = time_to_target(trial["curve"], settings.target, settings.target_window)
        trials.append(trial)
        if trials[-1].get("stopped_because", "").startswith(("interrupted", "SIGTERM")):
            interrupted = True
            break
    summary = summarize_trials(trials)
    return {
        "schema_version": SCHEMA_VERSION, "pzasync_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": time.time() - started, "interrupted": interrupted,
        "machine": machine_info(settings.cores), "settings": _settings_json(settings),
        "trials": trials, "summary": summary, "headline": headline(summary),
    }


def rescore(report: dict[str, Any], target: float | None = None, window: int | None = None) -> dict[str, Any]:
    """The same report with time to target recomputed from its stored curves (another target or window):
    no trial is run again."""
    import copy

    report = copy.deepcopy(report)
    settings = report["settings"]
    if target is not None:
        settings["target"] = target
    if window is not None:
        settings["target_window"] = window
    if settings.get("target") is None:
        raise ConfigError("rescore needs a target: the report was measured without one")
    for trial in report["trials"]:
        if "curve" in trial:
            trial["target_reached"] = time_to_target(trial["curve"], settings["target"],
                                                     settings.get("target_window", 1))
    report["summary"] = summarize_trials(report["trials"])
    report["headline"] = headline(report["summary"])
    return report


def _settings_json(settings: BenchSettings) -> dict[str, Any]:
    data = asdict(settings)
    data["configs"] = list(settings.configs)
    data["envs_per_actor"] = list(settings.envs_per_actor)
    data["env_workers"] = list(settings.env_workers)
    data["actors"] = list(settings.actors)
    data["learners"] = jsonable(settings.learners)
    data["eval_every"] = settings.snapshot_every if settings.target is not None else settings.eval_every
    data["versus"] = settings.yardstick
    return data


def jsonable(value: Any) -> Any:
    """`value` as JSON can hold it: dict keys as text, tuples as lists, anything not plain as its repr (learner
    specs may hold classes)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)

