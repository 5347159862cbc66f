"""Shared-memory segments with one owner each, named so that leftovers of dead runs can be found.

A segment is named `pzasync_<run id>_<owner pid>_<label>`. The process that creates it owns it and is the only
one that unlinks it; other processes attach by name. Python's `multiprocessing.shared_memory` registers every
attach with a resource tracker that may unlink a segment it does not own and warns at exit (CPython issue
82300), so segments here are opened with `_posixshmem` directly and tracked by us: `Segment.close`/`unlink`
in normal runs, `clean_stale()` (also `pzasync clean`) for runs whose owner died.
"""

from __future__ import annotations

import _posixshmem
import mmap
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pzasync.errors import InsufficientSharedMemoryError, PzasyncError
from pzasync.logs import logger

PREFIX = "pzasync"
SHM_DIR = Path("/dev/shm")
_NAME_RE = re.compile(rf"^{PREFIX}_(?P<run>[0-9a-f]+)_(?P<pid>\d+)_(?P<label>[\w.-]+)$")
#: What a closed object's arrays on a segment are replaced with, so that the segment can be unmapped: an empty,
#: read-only array that views no segment.
DETACHED = np.empty(0, np.int64)
DETACHED.flags.writeable = False


def new_run_id() -> str:
    """A short random id that marks every segment of one run."""
    return secrets.token_hex(4)


def free_shm_bytes() -> int:
    """Bytes free in the shared-memory filesystem (what new segments can still take)."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return 1 << 62
    return st.f_bavail * st.f_frsize


def check_fits(what: str, nbytes: int, margin: int = 1 << 20) -> None:
    """Refuse, naming both numbers, an allocation that would not fit in free /dev/shm."""
    available = free_shm_bytes()
    if nbytes + margin > available:
        raise InsufficientSharedMemoryError(what, nbytes, available)


class Segment:
    """One POSIX shared-memory segment mapped into this process."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        self.name = name
        self.size = size
        self.owner = create
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                size = os.fstat(fd).st_size
                self.size = size
            self._mmap: mmap.mmap | None = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            if create:
                _posixshmem.shm_unlink("/" + name)
            raise
        os.close(fd)
        self.buf: memoryview | None = memoryview(self._mmap)

    @property
    def view(self) -> memoryview:
        """`buf`, while the segment is mapped in this process."""
        if self.buf is None:
            raise PzasyncError(f"shared-memory segment {self.name!r} is closed in this process")
        return self.buf

    @classmethod
    def create(cls, run_id: str, label: str, size: int) -> Segment:
        check_fits(f"segment {label!r}", size)
        return cls(f"{PREFIX}_{run_id}_{os.getpid()}_{label}", max(size, 1), create=True)

    @classmethod
    def attach(cls, name: str) -> Segment:
        return cls(name, 0, create=False)

    def close(self) -> None:
        """Unmap from this process. Views (numpy arrays) on `buf` must be dropped first."""
        try:
            if self.buf is not None:
                self.buf.release()
            if self._mmap is not None:
                self._mmap.close()
        except BufferError:
            # A numpy view on the segment is still alive; the mapping goes when the last view is collected.
            pass
        self.buf = None
        self._mmap = None

    def unlink(self) -> None:
        """Remove the name; memory is freed once every process has unmapped it. Owner only, idempotent."""
        try:
            _posixshmem.shm_unlink("/" + self.name)
        except FileNotFoundError:
            pass


@dataclass(frozen=True)
class StaleSegment:
    """A segment left by a run whose owner process is gone."""

    name: str
    run_id: str
    owner_pid: int
    size: int


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_segments() -> list[tuple[str, str, int]]:
    """All pzasync segments on this machine: (name, run id, owner pid)."""
    if not SHM_DIR.is_dir():
        return []
    found = []
    for path in SHM_DIR.iterdir():
        match = _NAME_RE.match(path.name)
        if match:
            found.append((path.name, match["run"], int(match["pid"])))
    return found


def find_stale() -> list[StaleSegment]:
    """Segments whose owner pid no longer exists."""
    stale = []
    for name, run_id, pid in list_segments():
        if not _alive(pid):
            try:
                size = (SHM_DIR / name).stat().st_size
            except FileNotFoundError:
                continue
            stale.append(StaleSegment(name, run_id, pid, size))
    return stale


def unlink_run(run_id: str, owner_pid: int) -> list[str]:
    """Unlink every segment of one run (used by a learner whose runner died and can no longer do it)."""
    removed = []
    for name, run, pid in list_segments():
        if run == run_id and pid == owner_pid:
            try:
                _posixshmem.shm_unlink("/" + name)
            except FileNotFoundError:
                continue
            removed.append(name)
    return removed


def run_id_of(segment_name: str) -> str:
    """The run id inside a segment name."""
    match = _NAME_RE.match(segment_name)
    if not match:
        raise ValueError(f"{segment_name!r} is not a pzasync segment name")
    return match["run"]


def remove_stale_segments() -> list[StaleSegment]:
    """A run's first step before it allocates: `clean_stale`, saying what it removed (the `pzasync` logger)."""
    removed = clean_stale()
    if removed:
        total = sum(seg.size for seg in removed)
        runs = sorted({seg.run_id for seg in removed})
        logger.warning(f"removed {len(removed)} shared-memory segment(s) ({total:,} bytes) left by dead run(s) "
              f"{', '.join(runs)}")
    return removed


def clean_stale() -> list[StaleSegment]:
    """Unlink the segments of dead runs and return what was removed."""
    removed = []
    for seg in find_stale():
        try:
            _posixshmem.shm_unlink("/" + seg.name)
        except FileNotFoundError:
            continue
        removed.append(seg)
    return removed


@dataclass(frozen=True)
class ArraySpec:
    """A named array to be placed in a segment."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * np.dtype(self.dtype).itemsize


def _align(offset: int, to: int = 64) -> int:
    return (offset + to - 1) // to * to


def packed_size(specs: list[ArraySpec]) -> int:
    """Bytes needed to hold `specs` back to back, each 64-byte aligned (one cache line)."""
    offset = 0
    for spec in specs:
        offset = _align(offset) + spec.nbytes
    return _align(offset)


def carve(buf: memoryview, specs: list[ArraySpec]) -> dict[str, np.ndarray]:
    """Numpy views on `buf` laid out as `packed_size` computed them."""
    views, offset = {}, 0
    for spec in specs:
        offset = _align(offset)
        count = spec.nbytes // np.dtype(spec.dtype).itemsize
        views[spec.name] = np.frombuffer(buf, dtype=spec.dtype, count=count, offset=offset).reshape(spec.shape)
        offset += spec.nbytes
    return views
