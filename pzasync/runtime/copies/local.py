"""Env copies stepped in the actor's own process: `LocalEnvs` holds the env instances, `LocalCopies` steps
them for one run, each copy a `CopyStepper` (so transitions are assembled with `rollout`'s exact semantics): an
`EpisodeStepper` on the AEC path, one decision of a copy at a time, or a `ParallelStepper` on the parallel path
(`parallel=True`: the envs are parallel envs), every live agent's decision of a copy's cycle at once. An env
worker steps its own groups with the same class. Given a `ColumnSink`, parallel copies are stepped in columns
(`ColumnStepper`, core/parallel_columns.py): a block of arrays per cycle, transitions as columns."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

from pzasync.core.parallel_columns import ColumnSink, ColumnStepper
from pzasync.core.parallel_stepper import ParallelStepper
from pzasync.core.spaces import AgentLayout, env_action_converter
from pzasync.core.stepper import CopyStepper, EpisodeStepper, PendingDecision
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition
from pzasync.runtime.copies.protocol import Answer, emitting


class LocalEnvs:
    """Env instances stepped in this process (`EnvCopiesFactory`); they live until `close`. With `parallel`, they
    are parallel envs, stepped a cycle at a time (the parallel path)."""

    def __init__(self, envs: Any, env_name: str | None = None, parallel: bool = False) -> None:
        self.parallel = parallel
        self.envs = list(envs) if isinstance(envs, (list, tuple)) else [envs]
        self.copies = len(self.envs)
        self.env = self.envs[0]
        self.env_name = env_name or str(self.env)

    @property
    def steps_columns(self) -> bool:
        """Parallel copies in this process can be stepped in columns (`EnvCopiesFactory`)."""
        return self.parallel

    def open(self, seed: int | None, layouts: dict[str, AgentLayout], *, emit: Callable[[Transition, int], None],
             on_episode: Callable[[EpisodeSummary], None], on_start: Callable[[int], None],
             check_rewards: bool = True, max_episode_steps: int | None = None,
             columns: ColumnSink | None = None) -> LocalCopies:
        """`EnvCopiesFactory.open`; with `columns` (parallel envs only), the copies are stepped in columns."""
        return LocalCopies(self.envs, list(range(self.copies)), seed, layouts, emit=emit, on_episode=on_episode,
                           on_start=on_start, check_rewards=check_rewards, max_episode_steps=max_episode_steps,
                           parallel=self.parallel, columns=columns)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class LocalCopies:
    """Env copies stepped in this process. `emit(t, copy)`, `on_episode(summary)` and `on_start(copy)` are
    called as things happen."""

    def __init__(self, envs: list[Any], copies: list[int], seed: int | None, layouts: dict[str, AgentLayout], *,
                 emit: Callable[[Transition, int], None], on_episode: Callable[[EpisodeSummary], None],
                 on_start: Callable[[int], None], check_rewards: bool = True,
                 max_episode_steps: int | None = None, parallel: bool = False,
                 columns: ColumnSink | None = None) -> None:

        to_env = env_action_converter(layouts)
        self.envs = envs
        self.on_start = on_start
        #: A copy's decisions are answered together: on the parallel path a cycle is stepped whole, so nothing of a
        #: round may be held back (Actor.align); on the AEC path a copy waits on one decision, which may be.
        self.holds_back = not parallel
        if columns is not None and not parallel:
            raise ValueError("columns are for parallel env copies")
        stepper: type[EpisodeStepper] | type[ParallelStepper] = ParallelStepper if parallel else EpisodeStepper
        self.steppers: dict[int, CopyStepper] = {
            k: (stepper(env, emitting(emit, k), copy=k, seed=None if seed is None else seed + k,
                        layouts=LayoutBook(env, layouts, fixed=True), check_rewards=check_rewards,
                        max_episode_steps=max_episode_steps, to_env=to_env, on_episode=on_episode)
                if columns is None else
                ColumnStepper(env, partial(columns.emit_rows, k), columns.units, copy=k,
                              seed=None if seed is None else seed + k, layouts=LayoutBook(env, layouts, fixed=True),
                              check_rewards=check_rewards, max_episode_steps=max_episode_steps, to_env=to_env,
                              on_episode=on_episode))
            for k, env in zip(copies, envs)
        }
        #: The copy being stepped (for error messages).
        self.current = copies[0]

    def _next(self, stepper: CopyStepper, may_reset: bool) -> list[PendingDecision]:
        """The copy's next decisions, starting episodes while `may_reset`."""
        self.current = stepper.copy
        while True:
            if not stepper.in_episode:
                if not may_reset:
                    return []
                stepper.reset()
                self.on_start(stepper.copy)
            decisions = stepper.next_decisions()
            if decisions:
                return decisions

    # The group interface the actor drives (one group here; two per worker in WorkerCopies).
    _ready: list[PendingDecision] | None = None

    def start(self, may_reset: bool) -> None:
        """Bring every copy to its first pending decisions."""
        self._ready = [d for s in self.steppers.values() for d in self._next(s, may_reset)]

    def submit(self, group: int, answered: list[Answer], cut: list[int], may_reset: bool,
               held: Sequence[PendingDecision] = ()) -> None:
        """Answer the group's pending decisions (and cut the copies in `cut`); `held` ones, not answered this
        round (Actor.align), are offered again first."""
        self._ready = list(held) + self.step(answered, cut, may_reset)

    def next_ready(self) -> tuple[int, list[PendingDecision]] | None:
        """The next group with an answer outstanding and its new pending decisions; None when none is."""
        ready, self._ready = self._ready, None
        return None if ready is None else (0, ready)

    def step(self, answered: list[Answer], cut: list[int], may_reset: bool) -> list[PendingDecision]:
        """Cut the copies in `cut`, give each copy the answers to its decisions, and return the next decisions
        (each copy's together, copies in the order of their first answer)."""
        for k in cut:
            self.current = k
            self.steppers[k].cut()
        by_copy: dict[int, list[Answer]] = {}
        for answer in answered:
            by_copy.setdefault(answer[0].copy, []).append(answer)
        following = []
        for copy, answers in by_copy.items():
            stepper = self.steppers[copy]
            self.current = copy
            stepper.answer(answers)
            following += self._next(stepper, may_reset)
        return following

    def finish(self) -> None:
        """Cut every copy still in an episode (the run is over)."""
        for k, stepper in self.steppers.items():
            self.current = k
            stepper.cut()

    def failure_context(self) -> tuple[int, str | None, int]:
        """(copy, agent whose turn it was, episode index of that copy) for an error raised while stepping."""
        stepper = self.steppers[self.current]
        return self.current, getattr(stepper.env, "agent_selection", None), stepper.episode_index

    def close(self) -> None:
        """Nothing to release: the envs belong to their `LocalEnvs`."""
