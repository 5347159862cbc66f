"""Jobs side by side: functions run in fresh processes, N at a time, each pinned to its share of the cores
(`pzasync suite --parallel N`, `pzasync sweep`).

A job is a picklable function and its arguments, run in a spawned process of its own (a clean interpreter, as
bench trials run). Each job process:

- gets `cores_per_job` cores of its own by CPU affinity (slot k of N takes the k-th slice of the usable cores),
  so that a run inside it sizes its learner hosts, torch threads and "auto" options to its share
  (`runtime.autotune.usable_cores` reads the affinity mask) instead of every job taking every core;
- leaves the terminal's process group, so a Ctrl-C or a scheduler's signal reaches the parent alone, which then
  asks each job to stop with exactly one SIGINT (`stop`): a run inside stops gracefully, as on Ctrl-C
  (runtime/stop_signals.py; a second SIGINT would interrupt it where it stands);
- stops itself the same way if the parent dies, so nothing outlives the command;
- sends back its function's value, or its exception with the traceback, or that it was stopped.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from pzasync.errors import PzasyncError, report_unclean_exit
from pzasync.runtime.stop_signals import shielded

#: How long a job may take to stop after its SIGINT before it is killed (a run's own stop has deadlines:
#: final checkpoints, joins; RunConfig.process_timeout_s is 60 s by default).
STOP_GRACE_S = 120.0


def usable_core_ids() -> list[int]:
    """The cores this process may run on (its affinity mask), in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def core_slices(parallel: int, cores: list[int] | None = None) -> list[list[int]]:
    """The cores of each of `parallel` slots: equal slices of `cores` (default: the usable ones), at least one
    core each; with more slots than cores, slots share cores round-robin."""
    cores = usable_core_ids() if cores is None else list(cores)
    per = max(1, len(cores) // parallel)
    return [cores[(k * per) % len(cores):(k * per) % len(cores) + per] for k in range(parallel)]


@dataclass
class Outcome:
    """How a job ended: `status` "ok" (its `value`), "stopped" (by `stop` or its parent's signal before it
    finished: KeyboardInterrupt inside) or "error" (`error`, one line, and `trace`, the job's traceback)."""

    key: Hashable
    status: str
    value: Any = None
    error: BaseException | None = None
    trace: str = ""
    seconds: float = 0.0


@dataclass
class _Running:
    process: Any
    receiver: Any
    slot: int
    started: float
    stop_sent: float | None = None
    outcome: Outcome | None = field(default=None)


class SideBySide:
    """At most `parallel` jobs at a time, each in a fresh process pinned to its slot's cores (`core_slices`).

    `start(key, fn, *args)` starts a job in a free slot; `poll(timeout)` returns the outcomes of jobs that ended;
    `stop(key)` asks one job to stop (one SIGINT); `close()` stops every job still running and waits for them.
    Use it as a context manager so that nothing outlives it, whatever raises."""

    def __init__(self, parallel: int, cores: list[int] | None = None, name: str = "pzasync-job") -> None:
        if parallel < 1:
            raise PzasyncError(f"parallel={parallel}: must be >= 1")
        self.parallel = parallel
        self.slices = core_slices(parallel, cores)
        self.name = name
        self.running: dict[Hashable, _Running] = {}
        self._context = mp.get_context("spawn")

    def __enter__(self) -> SideBySide:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def free(self) -> int:
        """Slots free for a new job."""
        return self.parallel - len(self.running)

    def start(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> int:
        """Start `fn(*args)` in a fresh process in a free slot; returns the slot's index."""
        if self.free < 1:
            raise PzasyncError("no free slot: poll() until a job ends")
        if key in self.running:
            raise PzasyncError(f"a job {key!r} is already running")
        slot = min(set(range(self.parallel)) - {r.slot for r in self.running.values()})
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_job_main, args=(fn, args, sender, self.slices[slot], os.getpid()),
                                        name=f"{self.name}-{key}")
        with shielded():  # the child starts with SIGINT/SIGTERM blocked until it has left our process group
            process.start()
        sender.close()
        self.running[key] = _Running(process, receiver, slot, time.monotonic())
        return slot

    def pid(self, key: Hashable) -> int | None:
        """The process id of a running job."""
        job = self.running.get(key)
        return job.process.pid if job is not None else None

    def stop(self, key: Hashable) -> None:
        """Ask a running job to stop: one SIGINT, which a run inside takes as Ctrl-C (a graceful stop, nothing
        left behind). A second call does nothing."""
        job = self.running.get(key)
        if job is None or job.stop_sent is not None:
            return
        job.stop_sent = time.monotonic()
        if job.process.is_alive():
            try:
                os.kill(job.process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def poll(self, timeout: float = 0.25) -> list[Outcome]:
        """The outcomes of the jobs that ended within `timeout` seconds (waiting at most that long)."""
        from multiprocessing.connection import wait

        if not self.running:
            return []
        waitables = [job.receiver for job in self.running.values()] + \
                    [job.process.sentinel for job in self.running.values()]
        wait(waitables, timeout)
        ended = []
        for key, job in list(self.running.items()):
            outcome = self._outcome(key, job)
            if outcome is not None:
                ended.append(outcome)
                del self.running[key]
            elif job.stop_sent is not None and time.monotonic() - job.stop_sent > STOP_GRACE_S:
                job.process.kill()
        return ended

    def _outcome(self, key: Hashable, job: _Running) -> Outcome | None:
        message = None
        if job.receiver.poll():
            try:
                message = job.receiver.recv()
            except EOFError:
                message = None
        elif job.process.is_alive():
            return None
        job.process.join(30 if message is not None else 5)
        if job.process.is_alive():
            job.process.kill()
            job.process.join()
        job.receiver.close()
        seconds = time.monotonic() - job.started
        if message is None:
            if job.stop_sent is not None:
                return Outcome(key, "stopped", seconds=seconds)
            return Outcome(key, "error", error=PzasyncError(
                f"{self.name} {key!r} (pid {job.process.pid}) died with exit code {job.process.exitcode} before "
                f"reporting"), seconds=seconds)
        status, payload, trace = message
        if status == "ok":
            report_unclean_exit(f"{self.name} {key!r}", job.process)
            return Outcome(key, "ok", value=payload, seconds=seconds)
        if status == "stopped":
            return Outcome(key, "stopped", seconds=seconds)
        return Outcome(key, "error", error=payload, trace=trace, seconds=seconds)

    def close(self) -> list[Outcome]:
        """Stop every running job (one SIGINT each) and wait until they have ended; their outcomes."""
        for key in list(self.running):
            self.stop(key)
        ended = []
        while self.running:
            ended += self.poll(0.5)
        return ended


def _job_main(fn: Callable[..., Any], args: tuple, conn: Any, cores: list[int], parent: int) -> None:
    """The body of a job's process: its own process group and cores, a watch on its parent, then `fn(*args)`;
    what happened goes back over `conn`."""
    os.setpgrp()  # signals to the terminal's process group reach the parent, which forwards one SIGINT
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
    threading.Thread(target=_stop_when_orphaned, args=(parent,), daemon=True, name="pzasync-job-parent").start()
    try:
        message: tuple = ("ok", fn(*args), "")
    except KeyboardInterrupt:
        message = ("stopped", None, "")
    except BaseException as exc:  # noqa: BLE001 - sent to the parent with its traceback
        message = ("error", exc, traceback.format_exc())
    try:
        conn.send(message)
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as text
        conn.send(("error", PzasyncError(f"{type(message[1]).__name__}: {message[1]}"), message[2]))
    conn.close()
    # As a bench trial does: leave without the interpreter's teardown, which can hit a C++ std::terminate
    # (SIGABRT) after the work is done (docs/benchmarks.md#reliability); everything the job made is released.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _stop_when_orphaned(parent: int) -> None:
    """If the parent dies, interrupt this job once (a run stops gracefully), so that nothing outlives it."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGINT)
