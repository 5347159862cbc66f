"""Learner processes of an async run: start, watch, restart, stop.

The supervisor runs in the actor's process and does its work from `RunMonitor` polls, so the actor never
blocks on it. A learner that crashes, exits unexpectedly, or stops sending heartbeats for
`heartbeat_timeout_s` is restarted after a backoff from its latest checkpoint (or, without one, from the
weights it last published); past `max_learner_restarts` the run stops with `LearnerCrashedError`.
"""

from __future__ import annotations

import queue
import sys
import time
from typing import Any

from . import stats as S
from .errors import LearnerCrashedError, LearnerStartupError
from .learner_loop import LearnerSetup, learner_process_main, restarted
from .progress import RunMonitor


def restart_budget_error(agent: str, restarts: int, budget: int, monitor: RunMonitor) -> LearnerCrashedError:
    """The error that ends a run whose learner failed once more after `budget` restarts."""
    return LearnerCrashedError(
        f"the learner of agent {agent!r} failed {restarts + 1} times (restart budget max_learner_restarts="
        f"{budget}); last failure: {monitor.errors.get(agent)}\n{monitor.tracebacks.get(agent, '')}"
    )


class LearnerSupervisor:
    """Owns the learner processes of one async run."""

    def __init__(self, ctx: Any, setups: dict[str, LearnerSetup], config: Any, monitor: RunMonitor) -> None:
        self.ctx = ctx
        self.setups = setups
        self.config = config
        self.monitor = monitor
        self.stats = monitor.plan.stats
        self.messages = ctx.Queue()
        self.processes: dict[str, Any] = {}
        self.restart_at: dict[str, float] = {}
        self.fatal: LearnerCrashedError | None = None

    def _spawn(self, agent: str, setup: LearnerSetup) -> None:
        process = self.ctx.Process(target=learner_process_main,
                                   args=(setup, self.messages, self.config.checkpoint_every_s),
                                   name=f"pzasync-learner-{agent}", daemon=True)
        process.start()
        self.processes[agent] = process

    def start(self) -> None:
        for agent, setup in self.setups.items():
            self._spawn(agent, setup)

    def wait_for_first_policies(self) -> None:
        """Start-up barrier: every learner publishes version 1 before the actor's first decision."""
        deadline = time.monotonic() + self.config.process_timeout_s
        pending = set(self.processes)
        while pending:
            self.monitor.drain(self.messages)
            for agent in list(pending):
                process = self.processes[agent]
                if self.stats.get(agent, S.VERSION) >= 1:
                    pending.discard(agent)
                elif agent in self.monitor.errors or not process.is_alive():
                    detail = self.monitor.tracebacks.get(agent, f"exit code {process.exitcode}")
                    raise LearnerStartupError(f"learner of agent {agent!r} failed to start:\n{detail}")
            if time.monotonic() > deadline:
                raise LearnerStartupError(f"learners of {sorted(pending)} did not publish a first policy within "
                                          f"{self.config.process_timeout_s}s")
            time.sleep(0.01)
        self.monitor.crashes.clear()

    # ------------------------------------------------------------------------------------------ watching
    def poll(self) -> None:
        """Called from the monitor's polls: handle crashes, deaths and hangs; perform due restarts."""
        now = time.monotonic()
        while self.monitor.crashes:
            self._schedule_restart(self.monitor.crashes.pop(0), now)
        for agent, process in self.processes.items():
            if agent in self.restart_at:
                continue
            status = self.stats.get(agent, S.STATUS)
            if not process.is_alive() and status != S.DONE:
                self.monitor.drain(self.messages)  # its last words, if it had time to say them
                if self.monitor.crashes:
                    continue
                self.monitor.learner_error(agent, f"the learner process died (exit code {process.exitcode})", "")
                self.monitor.crashes.remove(agent)
                self._schedule_restart(agent, now)
            elif status in (S.STARTING, S.RUNNING):
                silent = (time.monotonic_ns() - self.stats.get(agent, S.BEAT)) / 1e9
                if silent > self.config.heartbeat_timeout_s:
                    process.kill()
                    process.join(timeout=5)
                    self.monitor.learner_error(agent, f"no heartbeat for {silent:.0f}s (hung); killed", "")
                    self.monitor.crashes.remove(agent)
                    self._schedule_restart(agent, now)
        for agent, when in list(self.restart_at.items()):
            if now >= when and self.fatal is None:
                del self.restart_at[agent]
                self._restart(agent)

    def _schedule_restart(self, agent: str, now: float) -> None:
        restarts = self.stats.get(agent, S.RESTARTS)
        if restarts >= self.config.max_learner_restarts:
            self.fatal = restart_budget_error(agent, restarts, self.config.max_learner_restarts, self.monitor)
            self.monitor.request_stop(f"the learner of {agent!r} kept failing")
            return
        self.restart_at[agent] = now + self.config.restart_backoff_s * (2 ** restarts)

    def _restart(self, agent: str) -> None:
        old = self.processes[agent]
        if old.is_alive():
            old.kill()
        old.join(timeout=5)
        setup = restarted(self.setups[agent])
        self.stats.add(agent, S.RESTARTS, 1)
        self.stats.set(agent, S.STATUS, S.STARTING)
        self.stats.beat(agent)
        source = f"checkpoint {setup.resume_state_path}" if setup.resume_state_path else "its last published weights"
        print(f"pzasync: restarting the learner of agent {agent!r} from {source} "
              f"(restart {self.stats.get(agent, S.RESTARTS)} of {self.config.max_learner_restarts})",
              file=sys.stderr)
        self._spawn(agent, setup)

    # ------------------------------------------------------------------------------------------ stopping
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
        self.monitor.drain(self.messages)
        self.release()

    def get_nowait(self) -> Any:
        """The next learner message, for `RunMonitor.drain` (queue.Empty once released)."""
        if self.messages is None:
            raise queue.Empty
        return self.messages.get_nowait()

    def release(self) -> None:
        """Close the message queue and drop it, so its semaphores (`/dev/shm/sem.mp-*`) go now, not at the next
        garbage collection (the monitor and the supervisor refer to each other). Safe to call twice."""
        messages, self.messages = self.messages, None
        if messages is not None:
            messages.close()
            messages.join_thread()
        self.processes.clear()
        if self.monitor.on_poll == self.poll:
            self.monitor.on_poll = None
