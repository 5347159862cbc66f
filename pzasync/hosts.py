"""Learner hosts: where a run's learners live, and who starts, watches and restarts them.

A runner is assembled from the same parts whatever the host (runners.py); the host alone decides where the
learners run:

- `InlineHost`: in the actor's own process, updates interleaved with decisions (the sequential baseline);
- `ProcessHost`: one spawned local process per learner unit (the async runner on shared memory);
- `RayHost` (ray_backend.py): one Ray actor per learner unit, on any node of a Ray cluster.

Every host keeps the same failure semantics (docs/reliability.md): a learner that raises, dies or stops
sending heartbeats is reported, then restarted (after a backoff) from its latest checkpoint or, without
one, from the weights it last published; one failure past `max_learner_restarts` stops the run with the
learner's own exception type (see `errors.learner_error`).

Learners talk to their host through typed messages (`LearnerReport`, `LearnerFailed`), never tuples.
"""

from __future__ import annotations

import queue
import sys
import time
from typing import Any, Callable

from . import stats as S
from .errors import LearnerCrashedError, LearnerStartupError, learner_error
from .learner_loop import (LearnerDriver, LearnerFailed, LearnerReport, LearnerSetup, learner_process_main,
                           restarted, start_driver)


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

    def __init__(self, setups: dict[str, LearnerSetup], config: Any, monitor: Any) -> None:
        self.setups = setups
        self.config = config
        self.monitor = monitor
        self.stats = monitor.plan.stats
        #: The error that ends the run (a learner past its restart budget), raised by the runner at the end.
        self.fatal: LearnerCrashedError | None = None
        self.restart_at: dict[str, float] = {}
        #: Units whose current incarnation has failed and been handled (restart scheduled, or the run ends).
        self.failing: set[str] = set()

    # -------------------------------------------------------------------------------- what a host does
    @classmethod
    def learner_threads(cls, plan: Any) -> int:
        """Torch threads of each learner (cores shared among the learners and the actor)."""
        return plan.torch_threads(len(plan.learning) + 1)

    @classmethod
    def actor_threads(cls, plan: Any) -> int:
        """Torch threads of the actor's process."""
        return 1

    def start(self) -> None:
        """Build every learner; each publishes its first policy (version 1) as soon as it exists."""
        raise NotImplementedError

    def wait_for_first_policies(self) -> None:
        """Start-up barrier: return once every learner has published version 1, or raise LearnerStartupError."""
        deadline = time.monotonic() + self.config.process_timeout_s
        pending = set(self.setups)
        while True:
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
        print(f"pzasync: restarting the learner of agent {unit!r} from {source} "
              f"(restart {self.stats.get(unit, S.RESTARTS)} of {self.config.max_learner_restarts})", file=sys.stderr)


class InlineHost(LearnerHost):
    """Learners in the actor's process: each unit's due updates run just before its agents' decisions, on the
    replay-ratio schedule. This is the sequential runner; nothing runs while the actor acts."""

    name = "inline"
    paces_actor = False
    measures_processes = False

    @classmethod
    def learner_threads(cls, plan: Any) -> int:
        return 1  # unused: inline learners run on the actor's threads

    @classmethod
    def actor_threads(cls, plan: Any) -> int:
        return plan.torch_threads(1)

    def __init__(self, setups: dict[str, LearnerSetup], config: Any, monitor: Any) -> None:
        super().__init__(setups, config, monitor)
        self.drivers: dict[str, LearnerDriver] = {}
        self.unit_of = {agent: p.unit for agent, p in monitor.plan.agents.items()}
        self.run_dir = monitor.run_dir
        self._next_checkpoint = float("inf")

    def start(self) -> None:
        for unit, setup in self.setups.items():
            self.drivers[unit] = start_driver(setup)
            self.stats.set(unit, S.STATUS, S.RUNNING)
        if self.config.checkpoint_every_s and self.run_dir is not None:
            self._next_checkpoint = time.monotonic() + self.config.checkpoint_every_s

    def backoff(self, restarts: int) -> float:
        return 0.0  # nothing to wait for: the learner only runs when the actor calls it

    def before_decision(self, agent: str) -> None:  # type: ignore[override]
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
        for unit, driver in self.drivers.items():
            if driver.setup.checkpoint_path:
                driver.save_checkpoint(driver.setup.checkpoint_path)

    def stop(self) -> None:
        self._report_all()
        self._save_checkpoints()


class ProcessHost(LearnerHost):
    """One spawned local process per learner unit, on shared memory (the async runner's default host)."""

    name = "process"

    def __init__(self, setups: dict[str, LearnerSetup], config: Any, monitor: Any, context: Any = None) -> None:
        super().__init__(setups, config, monitor)
        import multiprocessing as mp

        self.ctx = context or mp.get_context("spawn")
        self.messages: Any = self.ctx.Queue()
        self.processes: dict[str, Any] = {}

    def _spawn(self, unit: str, setup: LearnerSetup) -> None:
        process = self.ctx.Process(target=learner_process_main,
                                   args=(setup, self.messages, self.config.checkpoint_every_s),
                                   name=f"pzasync-learner-{unit}", daemon=True)
        process.start()
        self.processes[unit] = process

    def start(self) -> None:
        for unit, setup in self.setups.items():
            self._spawn(unit, setup)

    def drain(self) -> None:
        while self.messages is not None:
            try:
                message = self.messages.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            self.handle(message)

    def _next_message(self, timeout: float) -> LearnerReport | LearnerFailed | None:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            return None

    def _check_started(self, unit: str) -> None:
        process = self.processes[unit]
        if not process.is_alive():
            self.drain()  # its last words, if it had time to say them
            raise LearnerStartupError(f"learner of agent {unit!r} failed to start:\n"
                                      f"{self.monitor.tracebacks.get(unit) or f'exit code {process.exitcode}'}")

    def poll(self) -> None:
        self.drain()
        for unit, process in self.processes.items():
            if unit in self.failing or self.fatal is not None:
                continue
            status = self.stats.get(unit, S.STATUS)
            if not process.is_alive() and status != S.DONE:
                process.join(timeout=1)
                self.drain()  # its last words, if it had time to say them
                if unit in self.failing:
                    continue
                self.failed(LearnerFailed.runtime(unit, f"the learner process died (exit code {process.exitcode})"))
            elif status in (S.STARTING, S.RUNNING):  # CRASHED: its LearnerFailed is on the way
                silent = (time.monotonic_ns() - self.stats.get(unit, S.BEAT)) / 1e9
                if silent > self.config.heartbeat_timeout_s:
                    process.kill()
                    process.join(timeout=5)
                    self.failed(LearnerFailed.runtime(unit, f"no heartbeat for {silent:.0f}s (hung); killed"))
        self.restart_due()

    def _restart(self, unit: str) -> None:
        old = self.processes[unit]
        if old.is_alive():
            old.kill()
        old.join(timeout=5)
        setup = restarted(self.setups[unit])
        self.stats.set(unit, S.STATUS, S.STARTING)
        self.stats.beat(unit)
        self.announce_restart(unit, setup)
        self._spawn(unit, setup)

    def stop(self) -> None:
        """Ask every learner to stop (they write final checkpoints), join with timeouts, collect reports."""
        self.stats.request_stop()
        deadline = time.monotonic() + self.config.process_timeout_s
        for process in self.processes.values():
            process.join(timeout=max(0.1, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        self.drain()
        self.release()

    def release(self) -> None:
        """Close the message queue now, so its semaphores (`/dev/shm/sem.mp-*`) go with the run. Idempotent."""
        messages, self.messages = self.messages, None
        if messages is not None:
            messages.close()
            messages.join_thread()
        self.processes.clear()
