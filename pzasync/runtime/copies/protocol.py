"""The seam between the actor and its env copies (docs/architecture.md, "Env copies").

An actor steps N copies of one env through an `EnvCopiesFactory` (what the copies are made from: env
instances in the actor's process, env worker processes, and later environments served by another process),
which opens one `EnvCopies` per run. The actor drives it in rounds, group by group, and never asks which kind
it is:

    copies.start(may_reset)                       every copy to its first pending decision
    while (ready := copies.next_ready()):         a group whose pending decisions are ready
        copies.submit(group, answered, cut, ...)  answer them (and cut copies out of budget)
    copies.finish(); copies.close()

Events the answers cause (completed transitions, episode starts and ends) reach the actor through the
callbacks given to `open`, in order per copy, before the next pending decisions of that copy.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from pzasync.core.parallel_columns import ColumnSink
from pzasync.core.spaces import AgentLayout
from pzasync.core.stepper import PendingDecision
from pzasync.core.transitions import EpisodeSummary, Transition

#: A pending decision with the action and extras (stored with the transition) that answer it.
Answer = tuple[PendingDecision, Any, dict[str, Any]]


def emitting(emit: Callable[[Transition, int], None], copy: int) -> Callable[[Transition], None]:
    """`emit(transition, copy)` for the transitions of one copy (what its stepper emits)."""
    return lambda t: emit(t, copy)


class EnvCopies(Protocol):
    """One run's env copies, stepped in rounds by group."""

    @property
    def holds_back(self) -> bool:
        """Whether the actor may answer part of a group and hold the rest back (`submit`'s `held`): copies
        stepped in the actor's process can; a group sent to another process is answered whole."""

    def start(self, may_reset: bool) -> None:
        """Bring every copy to its first pending decision (starting episodes while `may_reset`)."""

    def next_ready(self) -> tuple[int, list[PendingDecision]] | None:
        """The next group with an answer outstanding and its new pending decisions (waiting for it); None
        when no group is outstanding."""

    def submit(self, group: int, answered: list[Answer], cut: list[int], may_reset: bool,
               held: Sequence[PendingDecision] = ()) -> None:
        """Answer a group's pending decisions, cut the copies in `cut` (their episodes end, truncated), and
        offer `held` decisions again first."""

    def finish(self) -> None:
        """Cut every copy still in an episode and deliver those transitions (the run is over)."""

    def failure_context(self) -> tuple[int, str | None, int]:
        """(copy, agent whose turn it was, episode of that copy) for an error raised while stepping here;
        (-1, None, -1) where errors carry their own context."""

    def close(self) -> None:
        """Release what this run opened (worker processes, their memory); never raises."""


class EnvCopiesFactory(Protocol):
    """What an actor's env copies are made from; it outlives the runs that `open` copies."""

    @property
    def copies(self) -> int:
        """How many copies each run steps."""

    @property
    def env_name(self) -> str:
        """The env's name, for messages."""

    @property
    def env(self) -> Any:
        """The copy stepped in the actor's own process when there is one (an AEC env, read for messages), else
        None."""

    @property
    def steps_columns(self) -> bool:
        """Whether `open` can step its copies in columns (parallel copies in this process: their pending
        decisions are then one `CycleBlock` per copy, core/parallel_columns.py)."""

    def open(self, seed: int | None, layouts: dict[str, AgentLayout], *, emit: Callable[[Transition, int], None],
             on_episode: Callable[[EpisodeSummary], None], on_start: Callable[[int], None],
             check_rewards: bool, max_episode_steps: int | None, columns: ColumnSink | None = None) -> EnvCopies:
        """The copies for one run: copy k's first reset gets `seed + k`; `emit(transition, copy)`,
        `on_episode(summary)` and `on_start(copy)` are called as things happen. With `columns` (only where
        `steps_columns`), transitions reach `columns.emit_rows` instead of `emit`."""

    def close(self) -> None:
        """Release what the factory holds (env instances); never raises."""
