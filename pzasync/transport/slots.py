"""Policy slots: a learner publishes a flat float32 parameter vector, the actor reads it (docs/shared-memory.md,
Policy slots).

Each copy of the vector is guarded by a sequence word (a seqlock): odd while the publisher writes it, `2 * v`
once it holds version `v`. A reader notes the word, copies, and reads the word again; if it changed or was
odd, the copy may mix two publications and is retried. In *double buffer* mode version `v` goes to copy
`v % 2`, so a reader copying the current version only collides with a publisher two versions ahead; in
*snapshot* mode there is one copy, half the memory, and a reader retries whenever a publication overlaps it.

Memory ordering: the publisher writes the odd word, fences, copies, fences and writes the even word; the reader
reads the word, fences, copies, fences and reads the word again. `ordering.full_fence` orders the accesses on
either side of it on any CPU (x86-64, ARMv8), so this holds without relying on the CPU's store order. A reader
also retries a copy whose word is older than the version it was directed to (the version word is written
after the copy's word, and without a fence between them another CPU may see them in either order). Every word
is an aligned 8-byte value, read and written in one access; slots are refused on 32-bit platforms.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np

from pzasync.errors import ConfigError, SlotReadTimeout
from pzasync.transport import ordering
from pzasync.transport.shm import ArraySpec, Segment, carve, new_run_id, packed_size

PublishMode = Literal["double_buffer", "snapshot"]
MODES: tuple[PublishMode, ...] = ("double_buffer", "snapshot")

# Header words: [0] current version, [1] sequence word of copy 0, [2] sequence word of copy 1.
_VERSION, _SEQ0 = 0, 1


def _specs(size: int, mode: str) -> list[ArraySpec]:
    copies = 2 if mode == "double_buffer" else 1
    return [ArraySpec("header", (8,), "int64")] + [ArraySpec(f"copy{i}", (size,), "float32") for i in range(copies)]


class PolicySlot:
    """One agent's published parameters in shared memory; one publisher, any number of readers."""

    def __init__(self, segment: Segment, size: int, mode: str) -> None:
        self._segment = segment
        self.size = size
        self.mode = mode
        views = carve(segment.view, _specs(size, mode))
        # A memoryview cast to int64 reads one word as a Python int in tens of nanoseconds.
        self._words = segment.view[: 8 * 8].cast("q")
        self._copies = [views[f"copy{i}"] for i in range(2 if mode == "double_buffer" else 1)]

    @classmethod
    def create(
        cls, size: int, mode: PublishMode = "double_buffer", *, run_id: str | None = None, label: str = "slot"
    ) -> PolicySlot:
        """Allocate a slot for vectors of `size` floats. The creating process owns (and unlinks) it."""
        ordering.check_word_size("a policy slot")
        if mode not in MODES:
            raise ConfigError(f"publish mode must be one of {MODES}, got {mode!r}")
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ConfigError(f"slot size must be a positive number of floats, got {size!r}")
        segment = Segment.create(run_id or new_run_id(), label, packed_size(_specs(int(size), mode)))
        return cls(segment, int(size), mode)

    @property
    def name(self) -> str:
        return self._segment.name

    @property
    def nbytes(self) -> int:
        return self._segment.size

    @property
    def version(self) -> int:
        """The latest published version (0 before the first publication); cheap enough for every turn."""
        return self._words[_VERSION]

    def publish(self, vector: np.ndarray, version: int | None = None) -> int:
        """Write `vector` as the next version (or as `version`, which must be newer: a mirror of a publisher
        elsewhere keeps its numbering) and return that version. One publisher per slot."""
        vector = np.asarray(vector)
        if vector.shape != (self.size,):
            raise ConfigError(f"slot {self.name!r} holds {self.size} floats, got an array of shape {vector.shape}")
        words = self._words
        if version is None:
            version = words[_VERSION] + 1
        elif version <= words[_VERSION]:
            raise ConfigError(f"slot {self.name!r}: version {version} is not newer than {words[_VERSION]}")
        copy = version % len(self._copies)
        words[_SEQ0 + copy] = 2 * version - 1
        ordering.full_fence()  # the odd word before any of the new data
        np.copyto(self._copies[copy], vector, casting="same_kind")
        ordering.full_fence()  # all of the data before the even word
        words[_SEQ0 + copy] = 2 * version
        words[_VERSION] = version
        return version

    def read(self, out: np.ndarray, timeout: float = 5.0) -> int:
        """Copy one complete published vector into `out`; return its version (0 if none yet, `out` untouched)."""
        if out.shape != (self.size,) or out.dtype != np.float32:
            raise ConfigError(f"slot {self.name!r} reads into a float32 array of shape ({self.size},), got "
                              f"{out.dtype} {out.shape}")
        words, copies = self._words, self._copies
        deadline = None
        while True:
            version = words[_VERSION]
            if version == 0:
                return 0
            copy = version % len(copies)
            before = words[_SEQ0 + copy]
            # Odd: a publication in progress. Older than `version`: this copy's newer word is not visible here yet.
            if not before & 1 and before >= 2 * version:
                ordering.full_fence()  # the word before any of the copy
                np.copyto(out, copies[copy])
                ordering.full_fence()  # all of the copy before the word again
                if words[_SEQ0 + copy] == before:
                    return before // 2
            # Torn or in progress: retry, giving the publisher the CPU now and then.
            if deadline is None:
                deadline = time.monotonic() + timeout
            elif time.monotonic() > deadline:
                raise SlotReadTimeout(f"slot {self.name!r}: no consistent copy within {timeout}s; "
                                      f"is a publisher writing without pause ({self.mode} mode)?")
            time.sleep(0)

    def close(self) -> None:
        """Detach this process from the slot's memory."""
        self._copies = []
        self._words.release()  # idempotent; a released view refuses every access
        self._segment.close()

    def unlink(self) -> None:
        """Remove the slot's memory from the system (owner, once every process is done)."""
        self._segment.unlink()

    def __reduce__(self) -> tuple:
        return (_attach_slot, (self._segment.name, self.size, self.mode))


def _attach_slot(name: str, size: int, mode: str) -> PolicySlot:
    return PolicySlot(Segment.attach(name), size, mode)
