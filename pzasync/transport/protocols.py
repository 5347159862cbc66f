"""The transport seam: what the actor, the learners and the runner need from whatever carries data between them.

```
env --actor--> TransitionWriter ==> TransitionSource --learner--> PolicyPublisher ==> PolicySource --> actor
                                   RunControl: stop flag, status, heartbeats, counters
```

Each arrow's two ends are one object today: `SharedRingBuffer` (transport/buffer.py) is a writer and a source,
`PolicySlot` (transport/slots.py) a publisher and a source (a `PolicyStore`: a learner reads back what it
published), `RunStats` (transport/stats.py) the run control, all in local shared memory. The Ray backend
(backends/ray/host.py) adds implementations for learners on another node: transitions go in chunks through Ray's
object store into a local ring buffer on the learner's node, and policies come back as versioned object
references. Code that moves data names these protocols, never the classes; a new
transport implements them and a `LearnerHost` (runtime/hosts.py) that knows where to run learners.

The contracts (docs/shared-memory.md states them for the shared-memory implementation):

- a reader never gets a torn transition or a half-written policy vector;
- on-policy reads are in write order, and `returned + dropped == written`;
- a policy source's `version` is cheap to read on every decision; `read` is called only when it changed.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from pzasync.core.transitions import Transition


@runtime_checkable
class TransitionWriter(Protocol):
    """The actor's end of one learner unit's transitions (one writer)."""

    capacity: int

    def write(self, t: Transition) -> int:
        """Append one transition; returns its logical index. Never blocks on the reader."""

    def write_batch(self, transitions: Sequence[Transition]) -> int:
        """Append transitions in order, as `write` one by one would (the actor's writes after each round);
        returns how many. Never blocks on the reader."""

    def write_rows(self, batch: dict[str, np.ndarray], follows: np.ndarray | None = None) -> int:
        """Append rows given column by column (as `read_new` returns them; the actor's writes in columns, on the
        parallel path; `follows`: `SharedRingBuffer.write_rows`); returns how many. Never blocks on the reader."""

    @property
    def written(self) -> int:
        """Transitions written so far."""

    @property
    def unread(self) -> int:
        """Transitions written but not yet read in order (on-policy backpressure looks at this)."""

    @property
    def dropped(self) -> int:
        """Transitions that will never reach the in-order reader (overwritten, or lost in transit)."""


@runtime_checkable
class TransitionSource(Protocol):
    """A learner's end: random samples (off-policy) or every transition once, in order (on-policy)."""

    capacity: int

    @property
    def name(self) -> str:
        """What messages call it (with shared memory, its segment's name, which names the run)."""

    @property
    def written(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """`batch_size` untorn rows drawn uniformly among those written."""

    def sample_windows(self, batch_size: int, window: int,
                       rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Sampled rows, each with the `window` rows written after it (n-step returns): `(batch, valid)`, columns
        shaped `(batch_size, window + 1, ...)` and whether each position holds the row it should
        (`SharedRingBuffer.sample_windows`)."""

    def read_new(self, max_rows: int | None = None) -> dict[str, np.ndarray] | None:
        """The next unread transitions in order, or None; skipped ones are counted in `dropped`."""

    def close(self) -> None:
        """Release this process's view of it (idempotent)."""


@runtime_checkable
class PolicyPublisher(Protocol):
    """A learner's end of its policy: flat float32 vectors with increasing versions (one publisher)."""

    size: int

    def publish(self, vector: np.ndarray) -> int:
        """Make `vector` the newest version and return that version."""

    @property
    def version(self) -> int: ...

    def close(self) -> None:
        """Release this process's view of it (idempotent)."""


@runtime_checkable
class PolicySource(Protocol):
    """The actor's (and evaluator's) end: the newest complete vector, never a half-written one."""

    size: int

    @property
    def version(self) -> int:
        """The newest version this process can read (0 before the first); cheap, read every decision."""

    def read(self, out: np.ndarray) -> int:
        """Copy the newest complete vector into `out`; returns its version (0: none yet, `out` untouched)."""


@runtime_checkable
class PolicyStore(PolicyPublisher, PolicySource, Protocol):
    """A learner's end of its policy as the learner holds it: it publishes, and reads back what it published (a
    restarted learner without a checkpoint starts from its last published weights)."""


@runtime_checkable
class RunControl(Protocol):
    """Run-wide flags and counters: one writer per word, any number of readers."""

    def request_stop(self) -> None: ...

    @property
    def stop_requested(self) -> bool: ...

    @property
    def progress(self) -> float:
        """The share of the run's budget spent so far, in [0, 1] (the runner writes it; schedules read it)."""

    def beat(self, agent: str | None = None) -> None:
        """Record that a process (the actor when agent is None) is alive."""

    def get(self, agent: str, word: int) -> int: ...

    def set(self, agent: str, word: int, value: int) -> None: ...

    def add(self, agent: str, word: int, value: int) -> None: ...

    def record_steps(self, agent: str | None, agent_steps: int, total_steps: int) -> None:
        """The actor's counts after each decision (hot path: must cost next to nothing)."""

    def record_episodes(self, episodes: int) -> None:
        """The actor's count of finished episodes, all env copies together."""

    def close(self) -> None:
        """Release this process's view of the counters (idempotent)."""
