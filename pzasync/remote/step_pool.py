"""The threads of a paced server (docs/remote.md, "Replies at the server's pace"): each instance's step runs on
one of them, so an env whose steps take their own time (waiting on a simulator, a device, a person) holds up
only its own instance; what finishes is handed back to the server's selector loop through a wake-up socket.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections import deque
from typing import Any, Callable

#: Seconds `close` waits for each thread (one stuck in an env step is a daemon and is left behind).
_JOIN_S = 1.0


class StepPool:
    """`workers` daemon threads running submitted jobs; `wake` (a socket for a selector) becomes readable when
    a job has finished, and `finished` takes the results, in the order they finished."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a step pool needs at least one worker thread, got {workers}")
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: deque = deque()
        self.wake, self._waker = socket.socketpair()
        self.wake.setblocking(False)
        self._waker.setblocking(False)
        self._threads = [threading.Thread(target=self._work, name=f"pzasync-step-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[], Any]) -> None:
        """Run `job()` on a worker thread; its result comes back through `finished`."""
        self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._done.append(job())
            try:
                self._waker.send(b"\0")
            except OSError:  # the buffer is full (the loop wakes anyway) or the pool was closed
                pass

    def finished(self) -> list[Any]:
        """The results of the jobs finished since the last call (after `wake` became readable)."""
        try:
            while self.wake.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        done = self._done
        return [done.popleft() for _ in range(len(done))]

    def close(self) -> None:
        """Stop the threads (each after its current job) and close the wake-up socket; never raises."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(_JOIN_S)
        for sock in (self.wake, self._waker):
            try:
                sock.close()
            except OSError:
                pass
