"""SIGTERM and SIGINT for a whole run: one graceful stop, whichever process of the run they reach.

Schedulers (timeout, systemd, Slurm) and terminals signal every process of a job at once, not just the parent.
So the run's own processes (learner hosts, the evaluator, actor processes, env workers) ignore both signals
and stop when the runner tells them (the run control block's stop flag, a closed pipe) or when the runner's
process is gone; the runner alone decides (docs/reliability.md, "Stopping"):

- from start-up to the end of acting, a first SIGTERM or SIGINT asks for a graceful stop (`on_stop`), which
  every start-up wait and the actor's next decision honour; a second SIGINT while acting raises
  KeyboardInterrupt wherever the actor is (an env step that never returns);
- while stopping (final checkpoints, joins), signals are recorded and nothing is interrupted: every wait on
  that path has a deadline, so the stop ends by itself.

A child starts with both signals blocked (`shielded`), so that one arriving while it boots is held
until it has set them to be ignored (`ignore_stop_signals`), rather than killing it half-started.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

#: The signals a run turns into a graceful stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_code(signum: int) -> int:
    """The shell's convention for a process ended by `signum`: 128 + signum (143 for SIGTERM, 130 for SIGINT)."""
    return 128 + int(signum)


def reason(signum: int) -> str:
    """The run's `stopped_because` for a stop signal."""
    return "SIGTERM" if signum == signal.SIGTERM else "interrupted (SIGINT)"


def ignore_stop_signals() -> None:
    """In a child process of a run: ignore SIGTERM and SIGINT (the runner stops us), then let signals in again
    (they were blocked while the child started, see `shielded`). Only the main thread can set handlers."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def shielded() -> Iterator[None]:
    """Block SIGTERM and SIGINT in this thread while a child starts: the child starts with this blocked mask
    (inherited across exec when spawned, set from its starter's when forked from the fork server:
    runtime/processes.py), so a signal sent to the whole group while it boots waits until
    `ignore_stop_signals`. In this process a signal that arrives meanwhile is only deferred to the end of the
    block."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StopSignals:
    """SIGTERM and SIGINT handlers installed for a whole run (main thread only; elsewhere it does nothing).

    `received` is the first stop signal (None if none came). `acting` is set by the runner while the actor
    acts: only then does a second SIGINT raise KeyboardInterrupt. `ignore_after`, set once a command's work is
    done, leaves both signals ignored on exit instead of restoring the previous handlers: from there to the
    process's exit a signal changes nothing (Python's own handlers would print a KeyboardInterrupt traceback,
    or, once the interpreter shuts down, let the signal kill the finished process)."""

    def __init__(self, on_stop: Callable[[int], None]) -> None:
        self.on_stop = on_stop
        self.received: int | None = None
        self.acting = False
        self.ignore_after = False
        self._interrupted_while_acting = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum
        if signum == signal.SIGINT and self.acting:
            if self._interrupted_while_acting:
                raise KeyboardInterrupt
            self._interrupted_while_acting = True
        self.on_stop(signum)

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.ignore_after else previous)
        self._previous = {}
