"""AsyncRunner and SequentialRunner (docs/running.md, Runners): the same plan, actor, learners and seeds, two schedules.

A run is assembled from the same parts whatever the runner: the plan (runtime/plan.py) and its transport (shared
memory: buffers, slots, run control), the actor (runtime/actor.py) in the calling process, a monitor
(runtime/monitor.py) and a learner host (runtime/hosts.py). The runners differ only in the host they make, as Sample
Factory's serial and parallel runners differ only in where components run:

- `SequentialRunner`: `InlineHost`, each learner's updates run just before its agents' decisions, on the
  replay-ratio schedule (the baseline every speed claim is measured against);
- `AsyncRunner`: `ProcessHost`, learner host processes (`RunConfig.learner_processes`), or with
  `RunConfig(backend="ray")` `RayHost`, one Ray actor per learner unit on any node of a cluster (docs/distributed.md).

Both return `RunResult`.
"""

from __future__ import annotations

import numbers
import os
import signal
import time
from pathlib import Path
from typing import Any

from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.errors import ConfigError, PzasyncError
from pzasync.evaluation.evaluator import Evaluator, EvaluatorSetup, plot_evaluations
from pzasync.league import League, plot_league
from pzasync.runtime.actor import ActingAgent, Actor, acting_agents, build_actor
from pzasync.runtime.actor_pool import ActorPool, split_budget
from pzasync.runtime.autotune import Placement
from pzasync.runtime.hosts import InlineHost, LearnerHost, ProcessHost
from pzasync.runtime.learner_loop import LearnerSetup
from pzasync.runtime.monitor import RunMonitor
from pzasync.runtime.plan import AgentPlan, RunPlan
from pzasync.runtime.results import AgentResult, RunResult, process_usage
from pzasync.runtime.rundir import RunDirectory, plot_returns
from pzasync.runtime.stop_signals import StopSignals
from pzasync.runtime.stop_signals import reason as signal_reason
from pzasync.runtime.trackers import FAILED, FINISHED, KILLED, check_trackers
from pzasync.transport import stats as S
from pzasync.transport.shm import remove_stale_segments


def check_budget(agent_steps: Any, seconds: Any) -> None:
    """Refuse a run budget that could never be met (before anything starts): ConfigError naming the argument."""

    if agent_steps is not None and (not isinstance(agent_steps, numbers.Integral) or isinstance(agent_steps, bool)
                                    or agent_steps < 1):
        raise ConfigError(f"agent_steps={agent_steps!r}: must be an integer >= 1, or None")
    # typeshed's numbers.Real declares only < and <= (as the ABC does); every concrete real number has >, and
    # `not seconds > 0` also refuses NaN.
    if seconds is not None and (not isinstance(seconds, numbers.Real) or isinstance(seconds, bool)
                                or not seconds > 0):  # type: ignore[operator]
        raise ConfigError(f"seconds={seconds!r}: must be a number > 0, or None")


#: The evaluator's episodes are seeded `RunConfig.seed` + this, apart from the training episodes' seeds.
EVAL_SEED_OFFSET = 9001

#: The async runner's learner host for each `RunConfig.backend`: a class, or "module:Class" for a backend whose
#: dependency is optional (imported when a run asks for it). A new backend is one more entry.
BACKENDS: dict[str, type[LearnerHost] | str] = {"shm": ProcessHost, "ray": "pzasync.backends.ray.host:RayHost"}


def learner_host_class(backend: str) -> type[LearnerHost]:
    """The learner host class of `backend` (a key of BACKENDS; RunConfig.validate has checked it)."""
    import importlib

    host = BACKENDS[backend]
    if isinstance(host, str):
        module, _, name = host.partition(":")
        loaded: type[LearnerHost] = getattr(importlib.import_module(module), name)
        return loaded
    return host


class _Runner:
    """The parts every run is made of; a subclass says which learner host runs the learners."""

    #: RunResult.runner.
    kind = "?"
    #: Where this runner puts the run's actors and learners, as planning and auto-tuning count them.
    placement = Placement()

    def __init__(self, env: Any, learners: Any, config: RunConfig | None = None) -> None:
        self.env = env
        self.learners = learners
        self.config = (config or RunConfig()).validate()
        check_trackers(self.config.tracker)  # their extras, before anything starts
        self.plan = RunPlan(env, learners, self.config, placement=self.placement)
        self.config = self.plan.config  # with any "auto" option resolved (autotune.autotune)
        self.resume_dir: RunDirectory | None = None
        #: Keep the run's trackers open after a run that finishes (the trainer logs its final evaluation to them,
        #: then calls `close_trackers`); a run that fails or is stopped closes them whatever this says.
        self.hold_trackers = False
        #: The run directory of the current (or last) run, None without one.
        self.run_directory: RunDirectory | None = None
        self._resumed_steps: dict[str, int] = {}
        self._resumed_updates: dict[str, int] = {}
        #: The actor and learner host of the current (or last) run; `actor.total_steps` can be read from another
        #: thread.
        self.actor: Actor | None = None
        self.host: LearnerHost | None = None
        self.monitor: RunMonitor | None = None
        #: Actors 1..M-1 (RunConfig.actors), in their own processes.
        self.actor_pool: ActorPool | None = None
        #: The first SIGTERM or SIGINT the last run received (None: none); it stopped the run gracefully.
        self.stop_signal: int | None = None
        self._signals: StopSignals | None = None

    @classmethod
    def resume(cls, run_dir: str, **config_overrides: Any) -> _Runner:
        """Continue a run from its directory: same env, learners and options; learners load their checkpoints,
        exploration schedules continue from the recorded agent steps, logs are appended to."""

        rd = RunDirectory(run_dir, create=False)
        info = rd.read_json("run.json")
        learners = {a: (spec["learner"], spec["options"]) for a, spec in info["learners"].items()}
        if info.get("env_set") is not None:  # the set as run.json recorded it, whatever became of its file
            config = RunConfig.from_dict({**info["config"], "env_set": info["env_set"], **config_overrides})
            return cls(None, learners, config).resume_from(run_dir)
        if info.get("env") is None:
            raise ConfigError(f"{run_dir}: the env was a factory; build the runner yourself and call resume_from()")
        config = RunConfig.from_dict({**info["config"], **config_overrides})
        runner = cls(EnvSpec.of(info["env"], tuple(info.get("env_wrappers", ())), **info.get("env_kwargs", {})),
                     learners, config)
        return runner.resume_from(run_dir)

    def resume_from(self, run_dir: str) -> _Runner:
        """Load checkpoints and counters from `run_dir` and keep writing there."""
        self.resume_dir = RunDirectory(run_dir, create=False)
        if (self.resume_dir.path / "result.json").exists():
            previous = self.resume_dir.read_json("result.json")
            self._resumed_steps = {a: r["agent_steps"] for a, r in previous["agents"].items()}
            self._resumed_updates = {a: r["updates"] for a, r in previous["agents"].items()}
        return self

    # ------------------------------------------------------------------------------------------ parts
    def _host_class(self) -> type[LearnerHost]:
        raise NotImplementedError

    def _learner_replay_ratio(self) -> float | None:
        """The learners' update schedule: updates per agent step, or None to update as fast as they can."""
        return self.config.replay_ratio

    def _make_host(self, monitor: RunMonitor, run_dir: RunDirectory | None) -> LearnerHost:
        host_cls = self._host_class()
        threads = host_cls.learner_threads(self.plan)
        ratio = self._learner_replay_ratio()
        stats = self.plan.counters()
        setups = {p.agent: self._setup(p, stats, threads, run_dir, ratio) for p in self.plan.learning}
        return host_cls(setups, self.config, monitor)

    def _setup(self, plan: AgentPlan, stats: S.RunStats, threads: int, run_dir: RunDirectory | None,
               ratio: float | None) -> LearnerSetup:
        return LearnerSetup(
            agent=plan.agent, learner_path=plan.learner_path, config=dict(plan.options), layout=plan.layout,
            buffer=plan.buffer, slot=plan.slot, stats=stats, replay_ratio=ratio,
            publish_every=self.config.publish_every, device=self.config.device_for(plan.agent),
            seed=plan.seed(self.config.seed), torch_threads=threads,
            checkpoint_path=run_dir.checkpoint_path(plan.agent) if run_dir else None,
            resume_state_path=self.resume_dir.checkpoint_path(plan.agent) if self.resume_dir else None,
            parent_pid=os.getpid(), members=list(plan.members), tracks=self.plan.tracks(plan.agent),
            dataset=str(self.plan.dataset.path.resolve()) if self.plan.dataset is not None else None,
        )

    def _acting_agents(self) -> dict[str, ActingAgent]:
        return acting_agents(self.plan, 0, self._resumed_steps)

    def _start_evaluator(self, monitor: RunMonitor, start: float) -> None:
        """Start the evaluation process (RunConfig.eval_vs) once every learning unit has published."""
        cfg = self.config
        if cfg.eval_vs is None:
            return

        seats = {agent: (p.unit, p.learner_path, dict(p.options), p.layout, p.slot)
                 for agent, p in self.plan.agents.items() if p.learns and p.slot is not None}
        if not seats:
            return
        monitor.evaluator = Evaluator(EvaluatorSetup(
            env_spec=self.plan.env_spec, seats=seats, yardstick=cfg.eval_vs, every_s=cfg.eval_every_s,
            episodes=cfg.eval_episodes, seed=cfg.seed + EVAL_SEED_OFFSET, stats=self.plan.stats, run_start=start,
            parent_pid=os.getpid(), max_episode_steps=cfg.max_episode_steps, scoring=cfg.eval_scoring,
            env_api=self.plan.env_api))
        monitor.evaluator.start()

    def _actor(self, acting: dict[str, ActingAgent], host: LearnerHost, run_dir: RunDirectory | None = None) -> Actor:
        cfg = self.config
        self.actor = build_actor(self.plan, acting, self.plan.counters(), paced=host.paces_actor,
                                 before_decision=host.before_decision)
        if self.plan.league:
            self.actor.league = League(self.plan, acting, cfg.seed, run_dir)
        return self.actor

    def _run_dir(self) -> RunDirectory | None:
        if self.resume_dir is not None:
            return self.resume_dir
        if self.config.out_dir is None:
            return None
        run_dir = RunDirectory.new(self.config.out_dir, self.plan.env_spec.name)
        run_dir.write_json("run.json", {
            "env": self.plan.env_spec.name if isinstance(self.plan.env_spec.source, str) else None,
            "env_kwargs": self.plan.env_spec.kwargs, "env_wrappers": list(self.plan.env_spec.wrappers),
            "runner": self.kind,
            "env_state": self.plan.env_spec.state.as_dict() if self.plan.env_spec.state else None,
            # An env set's spec, whole: `pzasync eval` and `resume` rebuild the set from it, wherever its file went.
            "env_set": self.plan.env_set.as_dict() if self.plan.env_set is not None else None,
            "learners": {a: {"learner": p.learner_path, "name": p.learner_name, "options": dict(p.options)}
                         for a, p in self.plan.agents.items()},
            "config": self.config.as_dict(),
        })
        return run_dir

    def _result(self, monitor: RunMonitor, actor: Actor | None, wall: float, reason: str,
                run_dir: RunDirectory | None, reports: dict[str, dict], host: LearnerHost | None) -> RunResult:
        stats = self.plan.counters()
        pool = self.actor_pool
        measured = host is not None and host.measures_processes
        agents = {}
        for agent, p in self.plan.agents.items():
            unit = p.unit  # learner-side figures belong to the agent's learner unit (itself, or its group)
            report = reports.get(unit, {})
            acting = actor.agents[agent] if actor else None
            agents[agent] = AgentResult(
                agent=agent, learner=p.learner_name, group=unit if unit != agent else None,
                updates=stats.get(unit, S.UPDATES) + self._resumed_updates.get(agent, 0),
                published_version=stats.get(unit, S.VERSION), last_metrics=report.get("metrics", {}),
                episode_returns=monitor.returns.get(agent, []),
                agent_steps=stats.get(agent, S.STEPS) + self._resumed_steps.get(agent, 0),
                transitions_written=(acting.count.written if acting else 0) + (pool.written(agent) if pool else 0),
                dataset_transitions=self.plan.dataset_rows.get(agent, 0),
                transitions_dropped=(host.transitions_dropped(unit) if host is not None
                                     else p.buffer.dropped if p.buffer is not None else 0)
                + (pool.dropped(unit) if pool is not None else 0),
                policy_lag_mean=report.get("lag_mean", 0.0), policy_lag_p95=report.get("lag_p95", 0.0),
                learner_wait_s=stats.get(unit, S.LEARNER_WAIT_NS) / 1e9,
                actor_wait_s=stats.get(unit, S.ACTOR_WAIT_NS) / 1e9,
                restarts=stats.get(unit, S.RESTARTS), error=monitor.errors.get(unit),
                nonfinite_transitions=((acting.count.nonfinite if acting else 0)
                                       + (pool.nonfinite(agent) if pool else 0)),
                learner_cpu_seconds=report.get("process_cpu_seconds") if measured else None,
                learner_peak_rss_mb=report.get("process_peak_rss_mb") if measured else None,
                learner_pid=report.get("pid") if measured else None,
                **(host.placement(unit) if host is not None else {}),
            )
        steps = stats.total_steps if actor else 0
        startup, acting_time = monitor.startup_seconds(wall), max(1e-9, monitor.acting_seconds())
        result = RunResult(
            runner=self.kind, env=self.plan.env_spec.name, agent_steps=steps,
            learner_host=host.name if host is not None else "",
            episodes=stats.total_episodes if actor else 0, actors=self.plan.actors, wall_seconds=wall,
            startup_seconds=startup,
            acting_seconds=acting_time,
            actor_steps_per_second=steps / acting_time, stopped_because=reason, agents=agents,
            run_dir=str(run_dir.path) if run_dir else None, config=self.config.as_dict(),
            shm_bytes=self.plan.shm_in_use, snapshots=monitor.snapshots,
            process_cpu_seconds=monitor.acting_cpu_seconds(), process_peak_rss_mb=process_usage()[1],
            actor_processes=pool.figures() if pool else [],
            actor_nodes=pool.actor_figures() if pool else [],
            evaluations=list(monitor.evaluations),
            league=actor.league.summary() if actor is not None and actor.league is not None else None,
            env_set=monitor.env_set_summary(),
        )
        if run_dir is not None:
            run_dir.write_json("result.json", result.to_dict())
            files = [run_dir.path / "result.json", plot_returns(run_dir, f"{result.env}: {self.kind} runner")]
            if result.evaluations:
                files.append(plot_evaluations(run_dir, result.evaluations,
                                              f"{result.env}: {self.kind} runner, greedy policies against "
                                              f"{result.evaluations[0]['opponent']}"))
            if result.league is not None and actor is not None:  # the actor's league made the summary
                actor.league.flush()
                files.append(plot_league(run_dir, result.league))
            for file in files:
                if file is not None:
                    run_dir.tracker.log_file(Path(file))
        return result

    def _act(self, actor: Actor, monitor: RunMonitor, agent_steps: int | None) -> str | None:
        """Run the actor until its budget, a time limit, Ctrl-C or SIGTERM; returns why it stopped early."""
        # Env workers are spawned before the clock starts (start-up, not acting).
        actor.prepare(seed=self.config.seed, on_episode=monitor.episode)
        if self.actor_pool is not None:
            self.actor_pool.start_acting(monitor)  # every actor built: they all start now
        monitor.started(actor, self.config.heartbeat_timeout_s)
        signals = self._signals
        try:
            if signals is not None:
                signals.acting = True  # a second Ctrl-C now raises KeyboardInterrupt wherever the actor is
            pool = self.actor_pool
            if pool is not None:
                agent_steps = pool.budgets[0]
            actor.run(agent_steps=agent_steps, seed=self.config.seed, keep_going=monitor.tick,
                      on_episode=monitor.episode)
            if pool is not None:
                pool.wait(monitor)
        except KeyboardInterrupt:
            monitor.request_stop(signal_reason(signal.SIGINT))
        finally:
            if signals is not None:
                signals.acting = False
            monitor.finished()
        return monitor.stop_reason

    def _finish(self, monitor: RunMonitor, actor: Actor | None, start: float, reason: str,
                run_dir: RunDirectory | None, host: LearnerHost | None) -> RunResult:
        """Close the display, assemble the result (while the counters still exist), then release everything."""
        try:
            monitor.stop_evaluator()
            monitor.close()
            return self._result(monitor, actor, time.monotonic() - start, reason, run_dir, monitor.reports, host)
        finally:
            if actor is not None:
                actor.close()
            self.plan.release()

    def run(self, agent_steps: int | None = None, seconds: float | None = None) -> RunResult:
        """Train until `agent_steps` decisions or `seconds` of wall time (whichever comes first)."""
        if agent_steps is None and seconds is None:
            raise PzasyncError("run() needs agent_steps or seconds")
        check_budget(agent_steps, seconds)
        self.stop_signal, self.monitor = None, None
        # For the whole run, start-up to release: a stop signal to any process of the run is one graceful stop.
        with StopSignals(self._on_stop_signal) as signals:
            self._signals = signals
            try:
                return self._run(agent_steps, seconds)
            finally:
                self.stop_signal = signals.received
                self._signals = None

    def _on_stop_signal(self, signum: int) -> None:
        """SIGTERM or SIGINT: ask the run to stop (before the monitor exists, `_run` asks once it does)."""
        if self.monitor is not None:
            self.monitor.request_stop(signal_reason(signum))

    def close_trackers(self, status: str = FINISHED) -> None:
        """Close the last run's trackers (`hold_trackers` kept them open): `status` says how it all ended."""
        if self.run_directory is not None:
            self.run_directory.close(status)

    def _run(self, agent_steps: int | None, seconds: float | None) -> RunResult:
        """Make the run directory and open its trackers, run, and close the trackers however the run ends:
        FINISHED (unless `hold_trackers`), KILLED (a stop signal, Ctrl-C) or FAILED (an exception)."""
        start = time.monotonic()
        run_dir = self.run_directory = self._run_dir()
        if run_dir is None:
            return self._run_parts(run_dir, start, agent_steps, seconds)
        status = FAILED
        try:
            run_dir.open_trackers(self.config.tracker)
            result = self._run_parts(run_dir, start, agent_steps, seconds)
            status = KILLED if self._signals is not None and self._signals.received is not None else FINISHED
            return result
        except KeyboardInterrupt:
            status = KILLED
            raise
        finally:
            if status != FINISHED or not self.hold_trackers:
                run_dir.close(status)

    def _run_parts(self, run_dir: RunDirectory | None, start: float, agent_steps: int | None,
                   seconds: float | None) -> RunResult:
        """Assemble the parts, act until the budget, then stop the learners and release everything."""
        cfg, plan = self.config, self.plan
        remove_stale_segments()  # other runs' leftovers, before this run allocates its own
        plan.allocate()
        monitor = self.monitor = RunMonitor(plan, run_dir, cfg.progress, seconds, start, agent_steps)
        if self._signals is not None and self._signals.received is not None:  # a signal before the monitor
            monitor.request_stop(signal_reason(self._signals.received))
        actor: Actor | None = None
        host: LearnerHost | None = None
        reason = "agent-step budget reached"
        try:
            # Every start-up step below either takes bounded time or returns early once a stop was asked for.
            self._start_evaluator(monitor, start)  # first: its start-up overlaps the learners'
            host = self.host = self._make_host(monitor, run_dir)
            import torch

            torch.set_num_threads(host.actor_threads(plan))  # this process: the actor, and inline learners
            host.start()
            host.wait_for_first_policies()
            monitor.on_poll = host.poll
            if monitor.stop_reason is None:
                self._start_actors(monitor, host, agent_steps)
                actor = self._actor(self._acting_agents(), host, run_dir=run_dir)
                reason = self._act(actor, monitor, agent_steps) or reason
            else:
                reason = monitor.stop_reason
        finally:
            try:
                if self.actor_pool is not None:
                    self.actor_pool.stop(monitor)  # the writers first, then their learners
                if host is not None:
                    monitor.on_poll = None
                    host.stop()
            finally:
                result = self._finish(monitor, actor, start, reason, run_dir, host)
        for fatal in (self.actor_pool.fatal if self.actor_pool is not None else None, host.fatal):
            if fatal is not None:
                fatal.result = result  # type: ignore[attr-defined]
                raise fatal
        return result

    def _start_actors(self, monitor: RunMonitor, host: LearnerHost, agent_steps: int | None) -> ActorPool | None:
        """Start actors 1..M-1 (RunConfig.actors) in their own processes; they poll with the learner host."""
        self.actor_pool = None
        if self.plan.actors == 1:
            return None
        pool = self.actor_pool = host.actor_pool(self.plan, split_budget(agent_steps, self.plan.actors),
                                                 self._resumed_steps)
        pool.start()
        monitor.caption_extra = pool.display_line
        host_poll = host.poll  # the monitor's poll so far (`run`)

        def poll() -> None:
            host_poll()
            pool.poll(monitor)

        monitor.on_poll = poll
        return pool


class AsyncRunner(_Runner):
    """One actor (this process) plus one learner per learning unit running beside it: in spawned local
    learner host processes (`RunConfig.backend="shm"`, `learner_processes`), or a Ray actor each
    (`backend="ray"`, docs/distributed.md)."""

    kind = "async"

    def _run(self, agent_steps: int | None, seconds: float | None) -> RunResult:
        result = self._host_class().run_elsewhere(self, agent_steps, seconds)
        return result if result is not None else super()._run(agent_steps, seconds)

    def _host_class(self) -> type[LearnerHost]:
        return learner_host_class(self.config.backend)


class SequentialRunner(_Runner):
    """The baseline: the same actor and learners in one process, updates interleaved with env steps."""

    kind = "sequential"
    #: One process: the same actors x envs_per_actor env copies in one actor, its learners inline.
    placement = Placement(actor_processes=1, inline_learners=True, by="the sequential runner")

    def _host_class(self) -> type[LearnerHost]:
        return InlineHost

    def _learner_replay_ratio(self) -> float:
        cfg = self.config
        return cfg.replay_ratio if cfg.replay_ratio is not None else cfg.sequential_replay_ratio
