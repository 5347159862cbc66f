"""Watching a run from the actor's process: learner reports, crashes, episode logs, budgets, live display.

`RunMonitor.tick` is called before every decision; it does real work (draining learner messages, writing
logs, redrawing) only every few hundred microseconds of wall time, so the actor's loop stays lean.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from pzasync.core.envset_spec import Curriculum
from pzasync.core.groups import members_label, units_in_order
from pzasync.logs import logger
from pzasync.runtime.results import PolicySnapshot, process_usage
from pzasync.runtime.rundir import RunDirectory
from pzasync.transport import stats as S

if TYPE_CHECKING:
    from pzasync.core.transitions import EpisodeSummary
    from pzasync.runtime.actor import Actor
    from pzasync.runtime.plan import RunPlan
    from pzasync.transport.stats import RunStats


class RunMonitor:
    """Collects what learners report and what episodes return; decides when the run stops."""

    POLL_EVERY_S = 0.25
    #: Episode returns the live table averages per learning unit (a group's: its members' latest episodes).
    TABLE_RETURNS = 100

    def __init__(self, plan: RunPlan, run_dir: RunDirectory | None, show: bool, seconds: float | None,
                 start: float, agent_steps: int | None = None) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.deadline = start + seconds if seconds is not None else None
        self.seconds, self.agent_steps = seconds, agent_steps
        self.start = start
        self.returns: dict[str, list[float]] = defaultdict(list)
        #: Per learning unit, the latest TABLE_RETURNS episode returns of its agents (a group's: its members'
        #: episodes, most recent last): the live table's return column.
        self.unit_returns: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=self.TABLE_RETURNS))
        self._unit_of = {agent: p.unit for agent, p in plan.agents.items()}
        #: The live table's rows: learning unit -> its agents, in env order.
        self._units = units_in_order(self._unit_of)
        self.reports: dict[str, dict] = {}
        self.errors: dict[str, str] = {}
        self.tracebacks: dict[str, str] = {}
        self.stop_reason: str | None = None
        self._episode_rows: list[dict] = []
        self._calls = 0
        self._next_poll = 0.0
        self._actor: Actor | None = None
        #: A line about the actors under the live table (`ActorPool.display_line`), set by the runner.
        self.caption_extra: Callable[[], str | None] | None = None
        self._acting_start = start
        self._acting_end: float | None = None
        self._cpu_at_acting_start = 0.0
        self._acting_cpu = 0.0
        self._live: Any = None
        self._show = show
        #: Called at every poll (every POLL_EVERY_S): the learner host's `poll` (reports, failures, restarts).
        self.on_poll: Callable[[], None] | None = None
        self._watch_stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        #: RunConfig.snapshot_every_steps: policy copies taken at episode ends (RunResult.snapshots).
        self.snapshot_every: int | None = plan.config.snapshot_every_steps
        self.snapshots: list[PolicySnapshot] = []
        self._next_snapshot = 0
        #: The evaluation process (RunConfig.eval_vs), if any, and the rows it sent so far.
        self.evaluator: Any = None
        self.evaluations: list[dict] = []
        #: On an env set (RunPlan.env_set): episodes per env played, and its curriculum (when it has one), moved on
        #: here as the evaluator's rows come in; every stage change is in `stage_changes` and curriculum.jsonl.
        self.env_episodes: dict[str, int] = defaultdict(int)
        envset = plan.env_set
        self.curriculum = Curriculum(envset) if envset is not None and len(envset.curriculum) > 1 else None
        self.stage_changes: list[dict] = []

    # -------------------------------------------------------------------------------------- events
    def started(self, actor: Actor, heartbeat_timeout_s: float | None = None) -> None:
        self._actor = actor
        self._acting_start = time.monotonic()
        self._cpu_at_acting_start = process_usage()[0]
        self.plan.counters().beat()
        if heartbeat_timeout_s:
            self._watchdog = threading.Thread(target=self._watch_actor, args=(heartbeat_timeout_s,), daemon=True,
                                              name="pzasync-actor-watchdog")
            self._watchdog.start()
        if self._show:
            from rich.live import Live

            self._live = Live(self._table(), refresh_per_second=4, transient=False)
            self._live.start()

    def finished(self) -> None:
        """The actor stopped: what follows (joins, checkpoints, plots) is not acting time."""
        self._acting_end = time.monotonic()
        self._acting_cpu = process_usage()[0] - self._cpu_at_acting_start
        self._stop_watchdog()

    def _stop_watchdog(self) -> None:
        """Stop the watchdog and wait for it, so that it never reads counters the runner is about to release."""
        self._watch_stop.set()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout=5)

    def _watch_actor(self, timeout: float) -> None:
        """The actor's heartbeat comes from its polls; if they stop (an env step that never returns), say so."""
        stats = self.plan.counters()
        while not self._watch_stop.wait(min(1.0, timeout / 4)):
            if stats.closed:  # the counters were released: the run is over
                return
            silent = (time.monotonic_ns() - stats.actor_beat(0)) / 1e9
            if silent > timeout and not self._watch_stop.is_set():
                env = self._actor.env if self._actor is not None else None
                agent = getattr(env, "agent_selection", None)
                logger.warning(f"the actor has not stepped for {silent:.0f}s (stuck in the env at agent "
                      f"{agent!r}'s turn?); learners keep their last state")
                stats.beat()  # report again only after another full timeout

    def startup_seconds(self, wall: float) -> float:
        return self._acting_start - self.start if self._actor is not None else wall

    def acting_cpu_seconds(self) -> float:
        """CPU seconds this process spent while the actor was stepping (0 until it stopped)."""
        return self._acting_cpu

    def acting_seconds(self) -> float:
        """Seconds the actor was stepping: the denominator of agent-steps/s (start-up and shutdown excluded)."""
        if self._actor is None:
            return 0.0
        return (self._acting_end or time.monotonic()) - self._acting_start

    def _live_stats(self) -> RunStats | None:
        """The run's counters, or None once they are released."""
        stats = self.plan.stats
        return None if stats is None or stats.closed else stats

    def total_steps(self) -> int:
        """Agent steps of every actor so far (actor 0's alone once the counters are released)."""
        stats = self._live_stats()
        if stats is None:
            return self._actor.total_steps if self._actor is not None else 0
        return stats.total_steps

    def episode(self, summary: EpisodeSummary, actor: int = 0) -> None:
        """A finished episode of actor `actor` (RunConfig.actors): returns, snapshots, the episode log."""
        for agent, value in summary.returns.items():
            self.returns[agent].append(value)
            self.unit_returns[self._unit_of.get(agent, agent)].append(value)
        if summary.env is not None:
            self.env_episodes[summary.env] += 1
        steps = self.total_steps()
        if actor == 0 and self.snapshot_every is not None and steps >= self._next_snapshot:
            self.take_snapshot()
        if self.run_dir is not None:
            self._episode_rows.append({"episode": summary.index, "wall_s": round(time.monotonic() - self.start, 4),
                                       "agent_steps": steps,
                                       **({"actor": actor} if self.plan.actors > 1 else {}),
                                       "returns": summary.returns, "cut_by_actor": summary.cut_by_actor,
                                       **({"env": summary.env, "env_args": summary.env_args}
                                          if summary.env is not None else {}),
                                       **({"match": summary.match} if summary.match is not None else {})})

    def take_snapshot(self) -> None:
        """Copy every learning agent's acting policy, with the time and counts it belongs to."""
        actor, stats = self._actor, self.plan.counters()
        assert actor is not None, "snapshots are taken once the actor has started"
        learning = [a for a in actor.agents.values() if a.learns and a.local.vector is not None]
        steps = self.total_steps()
        self.snapshots.append(PolicySnapshot(
            agent_steps=steps, seconds=time.monotonic() - self._acting_start,
            updates={a.agent: stats.get(a.unit, S.UPDATES) for a in learning},
            versions={a.agent: a.local.version for a in learning},
            vectors={a.agent: a.local.vector.copy() for a in learning if a.local.vector is not None}))
        every = self.snapshot_every
        assert every is not None, "snapshots are taken only with snapshot_every_steps"
        self._next_snapshot = (steps // every + 1) * every
        if self.run_dir is not None:
            self._keep_snapshot(self.run_dir, self.snapshots[-1], {a.agent: a.unit for a in learning})

    @staticmethod
    def _keep_snapshot(run_dir: RunDirectory, snapshot: PolicySnapshot, unit_of: dict[str, str]) -> None:
        """Write a snapshot into the run directory: one vector per learning unit (a group's members share
        theirs), then its line in snapshots.jsonl, so a line names only files already written."""
        units: dict[str, dict[str, Any]] = {}
        for agent, vector in snapshot.vectors.items():
            unit = unit_of[agent]
            if unit in units:
                continue
            path = run_dir.snapshot_path(unit, snapshot.agent_steps)
            path.parent.mkdir(exist_ok=True)
            np.save(path, vector)
            units[unit] = {"file": str(path.relative_to(run_dir.path)), "version": snapshot.versions[agent],
                           "updates": snapshot.updates[agent]}
        run_dir.append("snapshots.jsonl", {"agent_steps": snapshot.agent_steps,
                                           "seconds": round(snapshot.seconds, 4), "units": units})

    def learner_error(self, agent: str, summary: str, trace: str) -> None:
        """Record a crashed learner; the first crash of an agent prints its traceback, later ones one line.

        The actor carries on with the last published policy; the learner host decides about restarts.
        """
        first = agent not in self.errors
        self.errors[agent] = summary
        self.tracebacks[agent] = trace
        if first:
            logger.error(f"the learner of agent {agent!r} crashed ({summary}); the actor goes on with its last "
                  f"published policy.\n{trace}")
        else:
            logger.error(f"the learner of agent {agent!r} crashed again ({summary})")

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.plan.counters().request_stop()

    # -------------------------------------------------------------------------------------- polling
    def tick(self) -> bool:
        """Before each decision: True to keep going. Cheap except every POLL_EVERY_S seconds."""
        self._calls += 1
        if self._calls & 31:
            return self.stop_reason is None
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self.POLL_EVERY_S
            counters = self.plan.counters()
            counters.beat()
            counters.set_progress(self.progress(now))
            if self.on_poll is not None:
                self.on_poll()
            if self.evaluator is not None:
                self._record_evaluations(self.evaluator.collect())
            self.flush()
            if self._live is not None:
                self._live.update(self._table())
            if self.deadline is not None and now >= self.deadline:
                self.request_stop("time budget reached")
        return self.stop_reason is None

    def progress(self, now: float) -> float:
        """The share of the run's budget spent at `now`: of its seconds or of its agent steps, whichever is further
        along (what the learners' schedules follow)."""
        spent = 0.0
        if self.seconds is not None:
            spent = (now - self.start) / self.seconds
        if self.agent_steps is not None:
            spent = max(spent, self.total_steps() / self.agent_steps)
        return min(1.0, spent)

    def record_report(self, unit: str, report: dict[str, Any], log: bool = True) -> None:
        """Keep a learner's latest report; with a run directory, append it to metrics.jsonl and hand its metrics to
        the run's trackers (TensorBoard, W&B, MLflow: runtime/trackers)."""
        self.reports[unit] = report
        if log and self.run_dir is not None:
            row = {"wall_s": round(time.monotonic() - self.start, 4), "agent": unit,
                   "agent_steps": self.total_steps(),
                   "version": self.plan.counters().get(unit, S.VERSION), **report}
            self.run_dir.append("metrics.jsonl", row)
            self.run_dir.tracker.log_metrics(unit, report["updates"], report.get("metrics", {}))

    def _record_evaluations(self, rows: list[dict]) -> None:
        self.evaluations += rows
        if self.run_dir is not None:
            for row in rows:
                self.run_dir.append("metrics.jsonl", row)
                self.run_dir.tracker.log_eval(row)
        if self.curriculum is not None:
            change = self.curriculum.observe(rows)
            stats = self._live_stats()
            if change is not None and stats is not None:
                stats.set_curriculum_stage(self.curriculum.stage)  # every copy plays the new step from its next reset
                change = {"wall_s": round(time.monotonic() - self.start, 3), **change}
                self.stage_changes.append(change)
                logger.info(f"curriculum: {change['figure']} {change['value']:g} >= {change['until']:g} at stage "
                            f"{change['from']}: moving on to {self.curriculum.envset.stage_label(change['to'])}")
                if self.run_dir is not None:
                    self.run_dir.append("curriculum.jsonl", change)

    def env_set_summary(self) -> dict[str, Any] | None:
        """On an env set: its name, the curriculum stage reached and its changes, episodes per env (RunResult)."""
        envset = self.plan.env_set
        if envset is None:
            return None
        stage = self.curriculum.stage if self.curriculum is not None else 0
        return {"name": envset.name, "stage": stage, "stages": len(envset.curriculum),
                "step": envset.stage_label(stage) or None, "stage_changes": list(self.stage_changes),
                "episodes_per_env": dict(self.env_episodes)}

    def stop_evaluator(self) -> None:
        """Stop the evaluation process and keep what it sent last; it never holds the run up for long."""
        evaluator, self.evaluator = self.evaluator, None
        if evaluator is not None:
            self._record_evaluations(evaluator.stop())

    def flush(self) -> None:
        if self.run_dir is not None and self._episode_rows:
            with open(self.run_dir.path / "episodes.jsonl", "a") as f:
                import json

                for row in self._episode_rows:
                    f.write(json.dumps(row) + "\n")
            self._episode_rows.clear()

    def close(self) -> None:
        self._stop_watchdog()
        self.flush()
        if self._live is not None:
            self._live.update(self._table())
            self._live.stop()
            self._live = None

    # -------------------------------------------------------------------------------------- display
    def _table(self) -> Any:
        """The live table: one row per learning unit (an agent on its own, or a group under its members' short
        name, `red_0..red_80 (81 agents)`), in env order."""
        from rich.table import Table

        steps = self.total_steps()
        elapsed = max(1e-9, time.monotonic() - self._acting_start)
        live = self._live_stats()
        episodes = live.total_episodes if live is not None else 0
        table = Table(title=f"{steps:,} agent steps · {steps / elapsed:,.0f}/s · {episodes:,} episodes · "
                            f"{time.monotonic() - self.start:,.0f}s",
                      caption="\n".join(c for c in (self._env_set_caption(), self._extra_caption()) if c) or None)
        # A team's or side's row is every member's latest.
        latest_eval = {m: r for r in self.evaluations for m in r.get("members") or [r["agent"]]}
        columns = ["agent", "learner", f"return (last {self.TABLE_RETURNS})", "updates", "version", "lag mean/p95",
                   "status"]
        if self.plan.config.eval_vs is not None:
            columns.append(f"vs {self.plan.config.eval_vs} [95% CI]")
        for column in columns:
            table.add_column(column, justify="left" if column in ("agent", "learner", "status") else "right",
                             overflow="fold")
        stats = self.plan.stats
        for unit, members in self._units.items():
            p = self.plan.agents[members[0]]
            recent = self.unit_returns.get(unit)
            report = self.reports.get(unit, {})
            status = S.STATUS_NAMES.get(stats.get(unit, S.STATUS), "?") if stats is not None else "-"
            alone = members == [unit]
            table.add_row(unit if alone else members_label(members),
                          p.learner_name if alone else f"{p.learner_name} ({unit})",
                          f"{np.mean(recent):+.3f}" if recent else "-",
                          f"{stats.get(unit, S.UPDATES):,}" if stats is not None else "-",
                          str(stats.get(unit, S.VERSION)) if stats is not None else "-",
                          f"{report.get('lag_mean', 0):.1f}/{report.get('lag_p95', 0):.0f}" if p.learns else "-",
                          ("[red]" + status + "[/]") if unit in self.errors else status,
                          *([_eval_cell(latest_eval.get(members[0]))] if len(columns) > 7 else []))
        return table


    def _extra_caption(self) -> str | None:
        """The run's actors per node (`caption_extra`, set by the runner for Ray actors), or None."""
        return self.caption_extra() if self.caption_extra is not None else None

    def _env_set_caption(self) -> str | None:
        """Under the live table, on an env set: its curriculum step, and episodes per env so far."""
        summary = self.env_set_summary()
        if summary is None:
            return None
        played = ", ".join(f"{label} {n:,}" for label, n in sorted(summary["episodes_per_env"].items()))
        return (f"env set {summary['name']}" + (f" · {summary['step']}" if summary["step"] else "")
                + f" · episodes per env: {played or '-'}")


def _eval_cell(row: dict | None) -> str:
    """The latest evaluation: a win rate for game results (1/0/-1), else the mean return."""
    if row is None:
        return "-"
    if not row.get("outcomes", True):
        return f"{row['mean_return']:.4g} ± {row['mean_return_ci95']:.2g}"
    lo, hi = row["win_rate_ci95"]
    return f"{row['win_rate']:.0%} [{lo:.0%}-{hi:.0%}]"

