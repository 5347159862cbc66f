"""Memory ordering for the seqlocks of policy slots and ring buffers (docs/shared-memory.md, invariants 1-2).

A seqlock needs the writer's stores (word, data, word) and the reader's loads (word, data, word) to take effect
in that order for every other process. x86-64 keeps plain stores in order, and plain loads, but ARMv8 (Graviton,
Apple silicon) reorders both. `full_fence()` orders every memory access this thread made before the call
before every access it makes after it, on either CPU, with no compiled code of our own.

It takes and releases a process-local `threading.Lock` twice. Nobody else waits on that lock (another thread of
the same process calling `full_fence` at the same moment waits at most for that call). Why that is a barrier:

- On x86-64 each acquire and release is a `lock cmpxchg`, a full barrier by itself.
- On ARMv8 every access before a release stays before it, every access after an acquire stays after it, and a
  release followed in program order by an acquire stays in that order (the architecture's
  "barrier-ordered-before": `po; [L]`, `[A]; po`, `[L]; po; [A]`). The first pair's release and the second
  pair's acquire chain every access before the call to every access after it.
- What the lock is made of: CPython 3.10-3.13 on Linux use a POSIX semaphore (`sem_trywait`, then `sem_post`;
  Python/thread_pthread.h), which glibc implements with an acquire compare-and-swap and a release
  compare-and-swap (nptl/sem_waitcommon.c, nptl/sem_post.c). After 3.13, `_thread.lock` is a `PyMutex`
  (Modules/_threadmodule.c), whose lock and unlock are sequentially consistent compare-and-swaps
  (Include/cpython/lock.h, Python/lock.c, Include/cpython/pyatomic.h). On macOS, which has no
  `sem_timedwait`, CPython before that builds the lock from a pthread mutex and condition variable; that
  path was not checked here.

One pair is not enough on ARMv8 with glibc's semaphore: its acquire comes before its release, so a store
before the pair and a load or store after it stay unordered. POSIX.1 lists `sem_wait`, `sem_trywait` and
`sem_post` among the functions that "synchronize memory", but only for programs without data races, which a
seqlock is not; the argument above is the one at the level of the instructions.

The data copies between fences are numpy calls, separate C calls from the fence's, so no compiler moves a
memory access across a fence. Each sequence word is an aligned 8-byte value, read and written in one access on
a 64-bit CPU; `check_word_size` refuses 32-bit platforms, where that does not hold.
"""

from __future__ import annotations

import platform
import struct
import threading

from pzasync.errors import ConfigError

_lock = threading.Lock()
_acquire, _release = _lock.acquire, _lock.release


def full_fence() -> None:
    """Order every memory access before this call before every access after it, for every process."""
    _acquire()
    _release()
    _acquire()
    _release()


def check_word_size(what: str) -> None:
    """Refuse to create shared memory guarded by 8-byte sequence words where they could be torn (32-bit)."""
    pointer_bytes = struct.calcsize("P")
    if pointer_bytes < 8:
        raise ConfigError(
            f"{what} needs a 64-bit platform: its sequence words are 8 bytes, read and written in one access "
            f"only by a 64-bit CPU, and this Python is {8 * pointer_bytes}-bit ({platform.machine() or 'unknown'}, "
            f"{platform.system() or 'unknown OS'})")
