"""How a run starts its processes (actor processes, learner hosts, env workers, the evaluator), and how they
tell that the runner is gone.

On Linux they are forked from a fork server that has imported numpy, torch, Gymnasium and PettingZoo once:
a child starts in tens of milliseconds, where a spawned one spends 1.5-3 s importing torch on a small machine
before it does anything. A fork server's child starts as a spawned one does, with a clean interpreter (no copy
of the runner's threads, locks, CUDA state or memory), receives what it needs by pickling, and imports the
user's modules itself. What this module adds keeps the rest of spawn's behaviour:

- the child runs with the environment variables of the process that started it, not the fork server's;
- the child starts with its starter's signal mask, so a SIGTERM or Ctrl-C sent to the whole process group
  while it starts waits until it decides how to handle them (`runtime/stop_signals.py`), and the fork server
  itself never dies of one (it exits when the last process that can use it does);
- "is the runner gone" is asked of the runner's end of a pipe, as a child's parent pid names the fork server.

Elsewhere (macOS, Windows), and with `PZASYNC_START_METHOD=spawn`, processes are spawned. Variables a library
reads once when it loads (`OMP_NUM_THREADS`, `OMP_WAIT_POLICY`) reach a fork server's children as they were
when the fork server started, the first time this Python process started a run's process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
from multiprocessing.context import ForkServerContext, ForkServerProcess, SpawnContext
from typing import Any

from pzasync.transport.shm import _alive

#: The environment variable that picks the start method: "forkserver" (the default on Linux) or "spawn".
START_METHOD_VARIABLE = "PZASYNC_START_METHOD"

#: What the fork server imports before it forks anything; a module missing here is skipped. The first one
#: blocks SIGTERM and SIGINT in the fork server (see `_fork_server_signals`).
FORK_SERVER_PRELOAD = ("pzasync.runtime._fork_server_signals", "numpy", "torch", "gymnasium", "pettingzoo",
                       "pettingzoo.utils")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _ForkServerChild(ForkServerProcess):
    """A fork server's child with its starter's environment variables and signal mask, as spawn gives."""

    def start(self) -> None:
        self._starter_environ = dict(os.environ)
        self._starter_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        super().start()

    def run(self) -> None:
        os.environ.clear()
        os.environ.update(self._starter_environ)
        # SIGINT's handler is Python's again (the fork server resets it); both stay blocked until the mask is set.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._starter_mask)
        super().run()


class _ForkServerContext(ForkServerContext):
    Process = _ForkServerChild


_FORK_SERVER = _ForkServerContext()


def start_method() -> str:
    """The start method of a run's processes: `PZASYNC_START_METHOD` if set, else "forkserver" on Linux and
    "spawn" elsewhere."""
    method = os.environ.get(START_METHOD_VARIABLE, "").strip().lower()
    if method:
        if method not in ("forkserver", "spawn"):
            raise ValueError(f"{START_METHOD_VARIABLE}={method!r}: must be 'forkserver' or 'spawn'")
        if method == "forkserver" and "forkserver" not in mp.get_all_start_methods():
            raise ValueError(f"{START_METHOD_VARIABLE}=forkserver: this platform has no fork server; use 'spawn'")
        return method
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def process_context() -> SpawnContext | ForkServerContext:
    """The multiprocessing context a run starts its processes with (`start_method`)."""
    if start_method() == "spawn":
        return mp.get_context("spawn")
    _FORK_SERVER.set_forkserver_preload(list(FORK_SERVER_PRELOAD))  # used when the fork server (re)starts
    return _FORK_SERVER


def runner_is_gone(runner_pid: int) -> bool:
    """Whether the runner, the process `runner_pid` that started this one, has died. Asked of the pipe the
    runner holds where it started this process itself (spawned or forked from a fork server, whose children's
    parent pid is the fork server's); else of the pid (a process that exists, zombies included, is alive)."""
    parent: Any = mp.parent_process()
    if parent is not None and parent.pid == runner_pid:
        return not parent.is_alive()
    return not _alive(runner_pid)
