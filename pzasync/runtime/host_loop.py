"""A learner host process: one or several learners (`LearnerDriver`s, learner_loop.py) updated in turn until the run
stops (`LearnerHostLoop`), with per-learner heartbeats, reports, checkpoints and failures. Local learner host
processes run `learner_host_process_main`; the Ray backend's learner actors run a host of one
(`learner_process_main`).
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Callable, Protocol

from pzasync.runtime.learner_loop import LearnerDriver, LearnerFailed, LearnerReport, LearnerSetup, start_driver
from pzasync.runtime.processes import runner_is_gone
from pzasync.runtime.stop_signals import ignore_stop_signals
from pzasync.transport import stats as S
from pzasync.transport.protocols import PolicyStore, RunControl, TransitionSource
from pzasync.transport.shm import run_id_of, unlink_run


class MessageSink(Protocol):
    """Where a learner host's reports and failures go: a pipe's sending end (`MessagePipe`), or a queue."""

    def put(self, message: LearnerReport | LearnerFailed, /) -> None: ...


def learner_process_main(setup: LearnerSetup, messages: MessageSink, checkpoint_every_s: float,
                         is_orphaned: Callable[[], bool] | None = None) -> None:
    """Body of a process (or Ray actor) that hosts one learner: `learner_host_main` with a host of one."""
    learner_host_main([setup], messages, checkpoint_every_s, is_orphaned=is_orphaned)


class MessagePipe:
    """The sending end of a pipe, with the one call `learner_host_main` makes of its messages: `put`.

    A local learner host process reports through it (not a multiprocessing queue: the runner's end then reads
    end-of-file when the host dies, and no queue lock or feeder thread is left for a dead process to hold)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def put(self, message: LearnerReport | LearnerFailed, /) -> None:
        self.conn.send(message)


def learner_host_process_main(setups: list[LearnerSetup], messages: MessagePipe, checkpoint_every_s: float,
                              commands: Connection | None = None) -> None:
    """Body of a local learner host process: `learner_host_main`, ignoring SIGTERM and SIGINT (the
    runner stops the run, stop_signals.py)."""
    ignore_stop_signals()
    try:
        learner_host_main(setups, messages, checkpoint_every_s, commands)
    finally:
        messages.conn.close()


def learner_host_main(setups: list[LearnerSetup], messages: MessageSink, checkpoint_every_s: float,
                      commands: Connection | None = None, is_orphaned: Callable[[], bool] | None = None) -> None:
    """Body of a learner host process (`LearnerHostLoop`)."""
    LearnerHostLoop(setups, messages, checkpoint_every_s, commands, is_orphaned).run()


class LearnerHostLoop:
    """The body of a learner host process: its learners update in turn, each as its own schedule allows, until the
    run asks to stop (`run`).

    Every learner keeps its own driver (model, optimiser, buffer, slot, metrics) and its own heartbeat word.
    Reports and failures go to `messages.put` as `LearnerReport` / `LearnerFailed`, per learner: a learner that
    raises is reported and dropped (`fail`), the others go on, and the host starts it again when `commands` (the
    receiving end of a pipe) brings its restarted `LearnerSetup`. Ctrl-C is the runner's to handle (a terminal
    sends SIGINT to the whole process group), so it is ignored here. If the runner's process dies (SIGKILL),
    the host notices within half a second (`is_orphaned`, by default: its parent changed), unlinks the run's
    shared memory and exits (`release`).
    """

    #: Seconds between heartbeats and reports (and checks for restarted learners and a dead runner).
    REPORT_EVERY_S = 0.5
    #: The longest sleep while no learner has anything to do (the sleep doubles from 0.1 ms up to this).
    MAX_IDLE_SLEEP_S = 0.002

    def __init__(self, setups: list[LearnerSetup], messages: MessageSink, checkpoint_every_s: float,
                 commands: Connection | None = None, is_orphaned: Callable[[], bool] | None = None) -> None:
        first = setups[0]
        #: The runner's pid (recorded at the start: once the runner is gone, getppid() names another process).
        self.parent = parent = first.parent_pid or os.getppid()
        self.messages, self.commands, self.stats = messages, commands, first.transport()[2]
        self.checkpoint_every_s = checkpoint_every_s
        self.is_orphaned = is_orphaned or (lambda: runner_is_gone(parent))
        self.torch_threads = first.torch_threads
        #: Every setup received: their shared memory is closed on the way out.
        self.attached = list(setups)
        self.drivers: dict[str, LearnerDriver] = {}
        #: Per learner, since when (monotonic ns) it has had nothing to do, or None while it updates.
        self.idle_since: dict[str, int | None] = {}
        self.orphaned = False
        self.next_report = self.next_checkpoint = math.inf

    def run(self) -> None:
        """Start the learners, update them in turn until the run stops, then write their last checkpoints and
        reports; every failure is reported to the runner first."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ray's workers too; local hosts also ignore SIGTERM
        for setup in self.attached:
            self.stats.beat(setup.agent)
        try:
            self.orphaned = self.is_orphaned()
            if self.orphaned:
                return
            import torch

            torch.set_num_threads(self.torch_threads)
            for setup in list(self.attached):
                self.start(setup)
            now = time.monotonic()
            self.next_report = now
            self.next_checkpoint = now + self.checkpoint_every_s if self.checkpoint_every_s > 0 else math.inf
            self.loop()
            self.shutdown()
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the runner, then re-raised
            self.fail_all(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.release()

    def loop(self) -> None:
        """Passes over the learners (`tick`) until the run asks to stop, sleeping (doubling, up to
        MAX_IDLE_SLEEP_S) while none has anything to do, so idle learners leave the cores to the actor."""
        idle_sleep = 0.0001
        while not self.stats.stop_requested and not self.orphaned:
            if not self.drivers and self.commands is None:
                return  # a host of one whose learner failed: nothing can bring it back here
            progressed = self.tick()
            if self.orphaned:
                return
            if progressed:
                idle_sleep = 0.0001
            else:
                time.sleep(idle_sleep)
                idle_sleep = min(self.MAX_IDLE_SLEEP_S, idle_sleep * 2)
            self.orphaned = not self.periodic()

    def start(self, setup: LearnerSetup) -> None:
        """Build one learner (it publishes its first policy); one that fails to build is reported (`fail`)."""
        try:
            self.drivers[setup.agent] = start_driver(setup)
        except Exception as exc:  # noqa: BLE001 - reported per learner; the host's other learners go on
            self.fail(setup.agent, exc)
            return
        self.idle_since[setup.agent] = None
        self.stats.set(setup.agent, S.STATUS, S.RUNNING)
        self.stats.beat(setup.agent)

    def tick(self) -> bool:
        """One pass: an update of each learner that has one due (fair turns); whether any updated. Heartbeats
        and reports come after every update, so that a host whose pass is long still beats for each."""
        progressed = False
        for unit, driver in list(self.drivers.items()):
            try:
                updated = driver.try_update()
            except Exception as exc:  # noqa: BLE001 - this learner is reported and restarted alone
                self.fail(unit, exc)
                continue
            since = self.idle_since[unit]
            if updated:
                progressed = True
                if since is not None:
                    self.stats.add(unit, S.LEARNER_WAIT_NS, time.monotonic_ns() - since)
                    self.idle_since[unit] = None
                if not self.periodic():
                    self.orphaned = True
                    break
            elif since is None:
                self.idle_since[unit] = time.monotonic_ns()
        return progressed

    def fail(self, unit: str, exc: BaseException) -> None:
        """Drop a learner that raised and tell the runner, which decides about its restart."""
        self.drivers.pop(unit, None)
        self.stats.set(unit, S.STATUS, S.CRASHED)
        if not self.is_orphaned():
            self.messages.put(LearnerFailed.from_exception(unit, exc))

    def periodic(self) -> bool:
        """Heartbeats, reports, restarted learners and checkpoints when due; False once orphaned."""
        now = time.monotonic()
        if now >= self.next_report:
            if self.is_orphaned():
                return False
            while self.commands is not None and self.commands.poll():
                setup = self.commands.recv()  # a restarted learner of this host
                self.attached.append(setup)
                self.start(setup)
            for unit, driver in self.drivers.items():
                self.stats.beat(unit)
                self.messages.put(LearnerReport(unit, driver.report()))
            self.next_report = now + self.REPORT_EVERY_S
        if now >= self.next_checkpoint:
            self.checkpoint()
            self.next_checkpoint = now + self.checkpoint_every_s
        return True

    def checkpoint(self) -> None:
        for driver in self.drivers.values():
            if driver.setup.checkpoint_path:
                driver.save_checkpoint(driver.setup.checkpoint_path)

    def shutdown(self) -> None:
        """The run is over: last checkpoints, then (unless orphaned) last reports, each learner marked done."""
        self.checkpoint()
        if not self.orphaned:
            for unit, driver in self.drivers.items():
                self.messages.put(LearnerReport(unit, driver.report()))
                self.stats.set(unit, S.STATUS, S.DONE)

    def fail_all(self, exc: BaseException) -> None:
        """A failure outside any one learner's update: every learner of this host failed with it."""
        for unit in self.drivers:
            self.stats.set(unit, S.STATUS, S.CRASHED)
        self.orphaned = self.orphaned or self.is_orphaned()
        if not self.orphaned:
            for unit in self.drivers:
                self.messages.put(LearnerFailed.from_exception(unit, exc))

    def release(self) -> None:
        """Close this process's views of the run's memory; if orphaned, remove the whole run's memory first (the
        owner is gone and will never unlink it; other learners may not have lived long enough to do their part),
        without waiting on the dead runner's pipe."""
        if self.orphaned:
            if hasattr(self.messages, "cancel_join_thread"):
                self.messages.cancel_join_thread()
            unlink_run(run_id_of(self.attached[0].transport()[0].name), self.parent)
        closed: set[int] = set()
        for setup in self.attached:
            parts: tuple[TransitionSource | PolicyStore | RunControl, ...] = setup.transport()
            for part in parts:
                if id(part) not in closed:
                    closed.add(id(part))
                    part.close()
