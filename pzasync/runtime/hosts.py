"""Learner hosts: where a run's learners live, and who starts, watches and restarts them.

A runner is assembled from the same parts whatever the host (runners.py); the host alone decides where the
learners run:

- `InlineHost`: in the actor's own process, updates interleaved with decisions (the sequential baseline);
- `ProcessHost`: local learner host processes (runtime/processes.py), each with one or several learner units (the async
  runner on shared memory);
- `RayHost` (backends/ray/host.py): one Ray actor per learner unit, on any node of a Ray cluster.

Every host keeps the same failure semantics (docs/reliability.md): a learner that raises, dies or stops
sending heartbeats is reported, then restarted (after a backoff) from its latest checkpoint or, without
one, from the weights it last published; one failure past `max_learner_restarts` stops the run with the
learner's own exception type (see `errors.learner_error`).

Learners talk to their host through typed messages (`LearnerReport`, `LearnerFailed`), never tuples.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Callable

from pzasync.config import RunConfig
from pzasync.errors import LearnerCrashedError, LearnerStartupError, learner_error, report_unclean_exit
from pzasync.logs import logger
from pzasync.runtime.actor_pool import ActorPool
from pzasync.runtime.copies.wire import enlarge_pipe
from pzasync.runtime.host_loop import MessagePipe, learner_host_process_main
from pzasync.runtime.learner_loop import (
    LearnerDriver,
    LearnerFailed,
    LearnerReport,
    LearnerSetup,
    restarted,
    start_driver,
)
from pzasync.runtime.processes import process_context
from pzasync.runtime.results import RunResult
from pzasync.runtime.stop_signals import shielded
from pzasync.transport import stats as S

if TYPE_CHECKING:
    from pzasync.runtime.monitor import RunMonitor
    from pzasync.runtime.plan import RunPlan


class LearnerHost:
    """Starts, watches and restarts the learners of one run (one `LearnerSetup` per learner unit)."""

    #: What `RunResult` and the bench call this host.
    name = "?"
    #: Learners run beside the actor, so the opt-in waits (replay ratio, backpressure) apply to the actor.
    paces_actor = True
    #: Reports carry the learner process's own CPU seconds and peak RSS.
    measures_processes = True
    #: Called by the actor before each decision of an agent (the inline host updates its unit there); None: nothing.
    before_decision: Callable[[str], None] | None = None

    def __init__(self, setups: dict[str, LearnerSetup], config: RunConfig, monitor: RunMonitor) -> None:
        self.setups = setups
        self.config = config
        self.monitor = monitor
        self.stats = monitor.plan.counters()
        #: The error that ends the run (a learner past its restart budget), raised by the runner at the end.
        self.fatal: LearnerCrashedError | None = None
        self.restart_at: dict[str, float] = {}
        #: Units whose current incarnation has failed and been handled (restart scheduled, or the run ends).
        self.failing: set[str] = set()

    # -------------------------------------------------------------------------------- what a host does
    @classmethod
    def learner_threads(cls, plan: RunPlan) -> int:
        """Torch threads of each learner (cores shared among the learners and the actor)."""
        return plan.torch_threads(len(plan.learning) + 1)

    @classmethod
    def actor_threads(cls, plan: RunPlan) -> int:
        """Torch threads of the actor's process."""
        return 1

    @classmethod
    def run_elsewhere(cls, runner: Any, agent_steps: int | None, seconds: float | None) -> RunResult | None:
        """A backend that runs the whole run, actor included, somewhere else (a Ray actor on another node)
        returns its `RunResult`; None: the run is assembled here, with this host for its learners."""
        return None

    def start(self) -> None:
        """Build every learner; each publishes its first policy (version 1) as soon as it exists."""
        raise NotImplementedError

    def wait_for_first_policies(self) -> None:
        """Start-up barrier: return once every learner has published version 1 (or the run was asked to stop
        meanwhile), or raise LearnerStartupError."""
        deadline = time.monotonic() + self.config.process_timeout_s
        pending = set(self.setups)
        while not self.stats.stop_requested:
            for unit in list(pending):
                if self.stats.get(unit, S.VERSION) >= 1:
                    pending.discard(unit)
                else:
                    self._check_started(unit)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise LearnerStartupError(f"learners of {sorted(pending)} did not publish a first policy within "
                                          f"{self.config.process_timeout_s}s")
            message = self._next_message(timeout=0.01)
            if isinstance(message, LearnerFailed):
                raise LearnerStartupError(f"learner of agent {message.unit!r} failed to start: {message.summary}\n"
                                          f"{message.traceback}")
            if message is not None:
                self.handle(message)

    def _next_message(self, timeout: float) -> LearnerReport | LearnerFailed | None:
        """The next learner message, waiting up to `timeout` seconds (start-up only); None if there is none."""
        time.sleep(timeout)
        return None

    def _check_started(self, unit: str) -> None:
        """During start-up: raise LearnerStartupError if `unit`'s learner is already gone."""

    def poll(self) -> None:
        """From the monitor's polls (the actor's thread, every `RunMonitor.POLL_EVERY_S`): handle messages,
        failures and due restarts. Must never block for long."""

    def stop(self) -> None:
        """Stop every learner (final checkpoints written, final reports collected) and release what it holds."""
        raise NotImplementedError

    def _restart(self, unit: str) -> None:
        raise NotImplementedError

    def actor_pool(self, plan: RunPlan, budgets: list[int | None], resumed_steps: dict[str, int]) -> ActorPool:
        """Where actors 1..M-1 (RunConfig.actors) run: local actor processes (`ActorPool`) unless a backend
        places them itself."""
        cfg = self.config
        return ActorPool(plan, budgets, self.paces_actor, resumed_steps, cfg.process_timeout_s,
                         cfg.heartbeat_timeout_s)

    def transitions_dropped(self, unit: str) -> int:
        """Transitions of `unit` that its learner will never read (docs/shared-memory.md, invariant 3)."""
        buffer = self.monitor.plan.units[unit].buffer
        return buffer.dropped if buffer is not None else 0

    def placement(self, unit: str) -> dict[str, Any]:
        """Where `unit`'s learner ran, as `AgentResult` fields (`learner_node`, `learner_transport`)."""
        return {}

    # ------------------------------------------------------------------------------------ shared logic
    def handle(self, message: LearnerReport | LearnerFailed) -> None:
        if isinstance(message, LearnerReport):
            self.monitor.record_report(message.unit, message.report)
        elif isinstance(message, LearnerFailed):
            self.failed(message)
        else:
            raise TypeError(f"unexpected learner message {message!r}")

    def failed(self, failure: LearnerFailed) -> None:
        """Report a failure, then restart the learner after its backoff, or end the run past its budget."""
        unit = failure.unit
        self.failing.add(unit)
        self.stats.set(unit, S.STATUS, S.CRASHED)
        self.monitor.learner_error(unit, failure.summary, failure.traceback)
        restarts = self.stats.get(unit, S.RESTARTS)
        budget = self.config.max_learner_restarts
        if restarts >= budget:
            if self.fatal is None:
                note = (f"the learner of agent {unit!r} failed {restarts + 1} times (restart budget "
                        f"max_learner_restarts={budget})")
                self.fatal = learner_error(failure.error_type, failure.summary, failure.traceback, note)
            self.monitor.request_stop(f"the learner of {unit!r} kept failing")
            return
        self.restart_at[unit] = time.monotonic() + self.backoff(restarts)

    def backoff(self, restarts: int) -> float:
        return self.config.restart_backoff_s * (2 ** restarts)

    def restart_due(self) -> None:
        now = time.monotonic()
        for unit, when in list(self.restart_at.items()):
            if now >= when and self.fatal is None:
                del self.restart_at[unit]
                self.failing.discard(unit)
                self.stats.add(unit, S.RESTARTS, 1)
                self._restart(unit)

    def announce_restart(self, unit: str, setup: LearnerSetup) -> None:
        source = f"checkpoint {setup.resume_state_path}" if setup.resume_state_path else "its last published weights"
        logger.warning(f"restarting the learner of agent {unit!r} from {source} "
              f"(restart {self.stats.get(unit, S.RESTARTS)} of {self.config.max_learner_restarts})")


class InlineHost(LearnerHost):
    """Learners in the actor's process: each unit's due updates run just before its agents' decisions, on the
    replay-ratio schedule. This is the sequential runner; nothing runs while the actor acts."""

    name = "inline"
    paces_actor = False
    measures_processes = False

    @classmethod
    def learner_threads(cls, plan: RunPlan) -> int:
        return 1  # unused: inline learners run on the actor's threads

    @classmethod
    def actor_threads(cls, plan: RunPlan) -> int:
        return plan.torch_threads(1)

    def __init__(self, setups: dict[str, LearnerSetup], config: RunConfig, monitor: RunMonitor) -> None:
        super().__init__(setups, config, monitor)
        self.drivers: dict[str, LearnerDriver] = {}
        self.unit_of = {agent: p.unit for agent, p in monitor.plan.agents.items()}
        self.run_dir = monitor.run_dir
        self._next_checkpoint = float("inf")
        self.before_decision = self.update_before

    def start(self) -> None:
        for unit, setup in self.setups.items():
            self.drivers[unit] = start_driver(setup)
            self.stats.set(unit, S.STATUS, S.RUNNING)
        if self.config.checkpoint_every_s and self.run_dir is not None:
            self._next_checkpoint = time.monotonic() + self.config.checkpoint_every_s

    def backoff(self, restarts: int) -> float:
        return 0.0  # nothing to wait for: the learner only runs when the actor calls it

    def update_before(self, agent: str) -> None:
        """`before_decision`: the updates due to `agent`'s unit, run before its decision."""
        unit = self.unit_of[agent]
        driver = self.drivers.get(unit)
        if driver is None or self.fatal is not None or unit in self.restart_at:
            return
        try:
            while driver.try_update():
                pass
        except Exception as exc:  # noqa: BLE001 - a crashed learner is reported; acting goes on
            self.failed(LearnerFailed.from_exception(unit, exc))
            self.restart_due()

    def _restart(self, unit: str) -> None:
        setup = restarted(self.drivers[unit].setup)
        self.announce_restart(unit, setup)
        self.drivers[unit] = start_driver(setup)
        self.stats.set(unit, S.STATUS, S.RUNNING)

    def _report_all(self) -> None:
        for unit, driver in self.drivers.items():
            self.monitor.record_report(unit, driver.report(), log=False)

    def poll(self) -> None:
        self._report_all()
        if time.monotonic() >= self._next_checkpoint:
            self._next_checkpoint = time.monotonic() + self.config.checkpoint_every_s
            self._save_checkpoints()

    def _save_checkpoints(self) -> None:
        for driver in self.drivers.values():
            if driver.setup.checkpoint_path:
                driver.save_checkpoint(driver.setup.checkpoint_path)

    def stop(self) -> None:
        self._report_all()
        self._save_checkpoints()


class ProcessHost(LearnerHost):
    """Learner host processes on shared memory (the async runner's default host): the learning units are
    spread over `RunConfig.learner_processes` processes (`host_loop.LearnerHostLoop`), each
    updating its learners in turn. A learner that raises is restarted alone, inside its host; a host process
    that dies or hangs takes its learners with it, and each is reported, charged to its own restart budget and
    restarted."""

    name = "process"

    @classmethod
    def learner_threads(cls, plan: RunPlan) -> int:
        return plan.torch_threads(len(plan.learner_hosts()) + 1)

    def __init__(self, setups: dict[str, LearnerSetup], config: RunConfig, monitor: RunMonitor,
                 context: SpawnContext | ForkServerContext | None = None) -> None:
        super().__init__(setups, config, monitor)
        self.ctx = context or process_context()
        #: Host index -> its learning units, its current process, the pipe that sends it restarted learners,
        #: and the pipe its messages come back on. One message pipe per process, whose sending end only the
        #: child holds: a host that dies reads as end-of-file, even one killed halfway through a message.
        self.hosted: list[list[str]] = monitor.plan.learner_hosts()
        self.host_of = {unit: h for h, units in enumerate(self.hosted) for unit in units}
        self.processes: dict[int, BaseProcess] = {}
        self.commands: dict[int, Connection] = {}
        self.reports: dict[int, Connection] = {}

    def _spawn(self, host: int, setups: list[LearnerSetup]) -> None:
        receive, send = self.ctx.Pipe(duplex=False)
        reports, report_sender = self.ctx.Pipe(duplex=False)
        # A host sends reports synchronously (twice a second per learner, ~400 bytes each): room for minutes of
        # them, so a runner that reads late (a long env step, env workers starting) never holds learning up.
        enlarge_pipe(report_sender)
        process = self.ctx.Process(target=learner_host_process_main,
                                   args=(setups, MessagePipe(report_sender), self.config.checkpoint_every_s, receive),
                                   name=f"pzasync-learners-{host}", daemon=True)
        with shielded():
            process.start()
        receive.close()  # the child's ends
        report_sender.close()
        old = self.commands.pop(host, None)
        if old is not None:
            old.close()
        old_reports = self.reports.pop(host, None)
        if old_reports is not None:
            self._drain_host(old_reports)  # the last words of the process this one replaces
            old_reports.close()
        self.processes[host], self.commands[host], self.reports[host] = process, send, reports

    def start(self) -> None:
        for host, units in enumerate(self.hosted):
            self._spawn(host, [self.setups[u] for u in units])

    def _drain_host(self, reports: Connection) -> None:
        try:
            while reports.poll():
                self.handle(reports.recv())
        except (EOFError, OSError):
            pass  # the host process has exited; a message its death cut short is dropped

    def drain(self) -> None:
        for reports in list(self.reports.values()):
            self._drain_host(reports)

    def _next_message(self, timeout: float) -> LearnerReport | LearnerFailed | None:
        from multiprocessing.connection import wait

        for ready in wait(list(self.reports.values()), timeout):
            assert isinstance(ready, Connection), "wait() gives back the pipes it was given"
            try:
                return ready.recv()
            except (EOFError, OSError):
                continue  # that host has exited: `_check_started` tells
        if not self.reports:
            time.sleep(timeout)
        return None

    def _check_started(self, unit: str) -> None:
        process = self.processes[self.host_of[unit]]
        if not process.is_alive():
            self.drain()  # its last words, if it had time to say them
            raise LearnerStartupError(f"learner of agent {unit!r} failed to start:\n"
                                      f"{self.monitor.tracebacks.get(unit) or f'exit code {process.exitcode}'}")

    def _lost_with_host(self, host: int, why: str, cause: str | None = None, spare: str | None = None) -> None:
        """Report every learner of a dead (or killed) host that has not failed or finished already (`spare`:
        the one being restarted now; `cause`: the one that made the host be killed)."""
        for unit in self.hosted[host]:
            if unit == spare or unit in self.failing or self.stats.get(unit, S.STATUS) == S.DONE \
                    or self.fatal is not None:
                continue
            shared = [u for u in self.hosted[host] if u != unit]
            detail = why if unit == cause or cause is None else f"killed with its host process ({why})"
            if shared and cause is None:
                detail += f"; the process also hosted {shared}"
            self.failed(LearnerFailed.runtime(unit, detail))

    def poll(self) -> None:
        self.drain()
        for host, process in list(self.processes.items()):
            if self.fatal is not None:
                break
            units = self.hosted[host]
            if not process.is_alive():
                if all(u in self.failing or self.stats.get(u, S.STATUS) == S.DONE for u in units):
                    continue
                process.join(timeout=1)
                self.drain()  # its last words, if it had time to say them
                kind = "learner process" if len(units) == 1 else "learner host process"
                self._lost_with_host(host, f"the {kind} died (exit code {process.exitcode})")
                continue
            now = time.monotonic_ns()
            for unit in units:
                status = self.stats.get(unit, S.STATUS)
                if unit in self.failing or status not in (S.STARTING, S.RUNNING):
                    continue  # CRASHED: its LearnerFailed is on the way
                silent = (now - self.stats.get(unit, S.BEAT)) / 1e9
                # A learner still starting (a new process importing torch, building its network) beats only
                # once it runs: until then the start-up limit applies, not the heartbeat's, which may be shorter.
                limit = self.config.heartbeat_timeout_s if status == S.RUNNING else \
                    max(self.config.heartbeat_timeout_s, self.config.process_timeout_s)
                if silent > limit:
                    process.kill()
                    process.join(timeout=5)
                    self._lost_with_host(host, f"no heartbeat from {unit!r} for {silent:.0f}s (hung); killed",
                                         cause=unit)
                    break
        self.restart_due()

    def _restart(self, unit: str) -> None:
        host = self.host_of[unit]
        setup = restarted(self.setups[unit])
        self.stats.set(unit, S.STATUS, S.STARTING)
        self.stats.beat(unit)
        self.announce_restart(unit, setup)
        process = self.processes[host]
        if process.is_alive():
            try:
                self.commands[host].send(setup)  # the host starts it again beside its other learners
                return
            except OSError:  # the host died just now
                process.kill()
        process.join(timeout=5)
        self._lost_with_host(host, f"the learner host process died (exit code {process.exitcode})", spare=unit)
        self._spawn(host, [setup])  # the host's other learners join it when their own restarts are due

    def stop(self) -> None:
        """Ask every learner to stop (they write final checkpoints), join with timeouts, collect reports."""
        self.stats.request_stop()
        deadline = time.monotonic() + self.config.process_timeout_s
        for host, process in self.processes.items():
            while process.is_alive() and time.monotonic() < deadline:
                self.drain()  # so that no host waits on a full pipe to send its final reports
                process.join(timeout=0.05)
            if not process.is_alive():
                if all(self.stats.get(u, S.STATUS) == S.DONE and u not in self.failing for u in self.hosted[host]):
                    report_unclean_exit(f"learner host process {host} ({', '.join(self.hosted[host])})", process)
                continue
            process.terminate()
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        self.drain()
        self.release()

    def release(self) -> None:
        """Close every pipe to and from the host processes. Idempotent."""
        for conn in [*self.commands.values(), *self.reports.values()]:
            conn.close()
        self.commands.clear()
        self.reports.clear()
        self.processes.clear()
