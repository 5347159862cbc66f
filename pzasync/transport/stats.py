"""Run-wide counters in shared memory: agent steps, episodes, per-learner updates, heartbeats, waits, flags.

Every word has a single writer (one actor, or one learner), so plain aligned 8-byte stores suffice and any
process reads a recent value without locks. Times are `time.monotonic_ns()`, which all processes share.
With several actor processes (`RunConfig.actors`) each actor has its own words for what actors count (agent
steps, episodes, heartbeat, per-agent steps and wait time); readers get the sums.
"""

from __future__ import annotations

import time

import numpy as np

from pzasync.transport.shm import DETACHED, ArraySpec, Segment, carve, packed_size

# Run-wide words, written by the main process: the stop flag, the go that starts every actor at once, an env
# set's curriculum stage (core/envset_spec.py), which every env copy reads at its reset, and the share of the
# run's budget spent (parts per million), which learners' schedules read.
STOP, GO, STAGE, PROGRESS = 2, 4, 5, 6
_PROGRESS_SCALE = 1_000_000
# Each actor's own words (`actor_words`): its agent steps, finished episodes and heartbeat.
AGENT_STEPS, EPISODES, ACTOR_BEAT = 0, 1, 3
_RUN_WORDS = 8
_ACTOR_WORDS = 8

# Per-agent words. Actor-written (one word per actor, summed on reading): STEPS, ACTOR_WAIT_NS.
# Learner-written: the rest.
STEPS, UPDATES, VERSION, STATUS, BEAT, LEARNER_WAIT_NS, ACTOR_WAIT_NS, RESTARTS = range(8)
_AGENT_WORDS = 8
_PER_ACTOR = {STEPS: 0, ACTOR_WAIT_NS: 1}

# Learner status values.
STARTING, RUNNING, DONE, CRASHED, NOT_LEARNING = 0, 1, 2, 3, 4
STATUS_NAMES = {STARTING: "starting", RUNNING: "running", DONE: "done", CRASHED: "crashed",
                NOT_LEARNING: "not learning"}


class RunStats:
    """Shared counters of one run; picklable, attaches in the process that unpickles it. `actor` is the actor
    this process's actor-side writes belong to (`for_actor`)."""

    def __init__(self, segment: Segment, agents: list[str], actors: int = 1, actor: int = 0) -> None:
        self._segment = segment
        self.agents = list(agents)
        self.actors, self.actor = int(actors), int(actor)
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        n = max(1, len(agents))
        flat = carve(segment.view, _specs(len(agents), self.actors))["words"]
        #: Set by `close`: the arrays below are then empty and view nothing.
        self.closed = False
        self.run: np.ndarray = flat[:_RUN_WORDS]
        self.per_agent: np.ndarray = flat[_RUN_WORDS:_RUN_WORDS + n * _AGENT_WORDS].reshape(n, _AGENT_WORDS)
        base = _RUN_WORDS + n * _AGENT_WORDS
        #: Per actor: AGENT_STEPS, EPISODES, ACTOR_BEAT.
        self.actor_words: np.ndarray = flat[base:base + self.actors * _ACTOR_WORDS].reshape(self.actors, _ACTOR_WORDS)
        base += self.actors * _ACTOR_WORDS
        #: Per actor and agent: STEPS, ACTOR_WAIT_NS.
        self.actor_agent: np.ndarray = flat[base:base + self.actors * n * 2].reshape(self.actors, n, 2)
        # The same words as one flat int64 memoryview: item access costs tens of nanoseconds (hot paths).
        self.words = segment.view[: 8 * len(flat)].cast("q")
        mine = _RUN_WORDS + n * _AGENT_WORDS
        self._total_word = mine + self.actor * _ACTOR_WORDS + AGENT_STEPS
        first_step = mine + self.actors * _ACTOR_WORDS + self.actor * n * 2
        self._steps_word = {agent: first_step + 2 * i for i, agent in enumerate(self.agents)}

    def for_actor(self, actor: int) -> RunStats:
        """These counters as actor `actor` writes them (in the process that runs it)."""
        return RunStats(Segment.attach(self._segment.name), self.agents, self.actors, actor)

    def record_steps(self, agent: str | None, agent_steps: int, total_steps: int) -> None:
        """This actor's counts after a decision: `agent`'s own steps (None: an opponent's decision, not counted
        for any agent) and all of its steps. Two aligned word stores through a cached index: the hot path."""
        words = self.words
        if agent is not None:
            words[self._steps_word[agent]] = agent_steps
        words[self._total_word] = total_steps

    def record_episodes(self, episodes: int) -> None:
        """This actor's count of finished (or cut) episodes, all its env copies together."""
        self.actor_words[self.actor, EPISODES] = episodes

    @property
    def total_steps(self) -> int:
        """Agent steps of every actor together."""
        return int(self.actor_words[:, AGENT_STEPS].sum())

    @property
    def total_episodes(self) -> int:
        return int(self.actor_words[:, EPISODES].sum())

    @classmethod
    def create(cls, run_id: str, agents: list[str], actors: int = 1) -> RunStats:
        return cls(Segment.create(run_id, "stats", packed_size(_specs(len(agents), actors))), agents, actors)

    def __reduce__(self) -> tuple:
        return (_attach, (self._segment.name, self.agents, self.actors, self.actor))

    # ------------------------------------------------------------------------------------------- flags
    def request_stop(self) -> None:
        self.run[STOP] = 1

    @property
    def stop_requested(self) -> bool:
        return bool(self.run[STOP])

    def let_actors_go(self) -> None:
        """Every actor process is ready (RunConfig.actors): they may start acting."""
        self.run[GO] = 1

    @property
    def go(self) -> bool:
        return bool(self.run[GO])

    @property
    def curriculum_stage(self) -> int:
        """The env set's curriculum step the run is at (0: the first), read by env copies at each reset."""
        return int(self.run[STAGE])

    def set_curriculum_stage(self, stage: int) -> None:
        """Move the run's curriculum to `stage` (the runner's process only: one writer)."""
        self.run[STAGE] = stage

    @property
    def progress(self) -> float:
        """The share of the run's budget (its seconds or agent steps, whichever runs out first) spent so far, in
        [0, 1]; 0 for a run with no budget known. Learning-rate schedules read it (learners/base.py)."""
        return int(self.run[PROGRESS]) / _PROGRESS_SCALE

    def set_progress(self, fraction: float) -> None:
        """Record the share of the budget spent (the runner's process only: one writer), clipped to [0, 1]."""
        self.run[PROGRESS] = round(min(1.0, max(0.0, fraction)) * _PROGRESS_SCALE)

    def beat(self, agent: str | None = None) -> None:
        """Record that a process is alive (this actor when agent is None)."""
        if agent is None:
            self.actor_words[self.actor, ACTOR_BEAT] = time.monotonic_ns()
        else:
            self.per_agent[self.index[agent], BEAT] = time.monotonic_ns()

    def actor_beat(self, actor: int = 0) -> int:
        """`time.monotonic_ns()` of actor `actor`'s last heartbeat."""
        return int(self.actor_words[actor, ACTOR_BEAT])

    def get(self, agent: str, word: int) -> int:
        if word in _PER_ACTOR:
            return int(self.actor_agent[:, self.index[agent], _PER_ACTOR[word]].sum())
        return int(self.per_agent[self.index[agent], word])

    def set(self, agent: str, word: int, value: int) -> None:
        if word in _PER_ACTOR:
            self.actor_agent[self.actor, self.index[agent], _PER_ACTOR[word]] = value
        else:
            self.per_agent[self.index[agent], word] = value

    def add(self, agent: str, word: int, value: int) -> None:
        if word in _PER_ACTOR:
            self.actor_agent[self.actor, self.index[agent], _PER_ACTOR[word]] += value
        else:
            self.per_agent[self.index[agent], word] += value

    def close(self) -> None:
        self.closed = True
        self.run = self.per_agent = self.actor_words = self.actor_agent = DETACHED
        self.words.release()  # idempotent; a released view refuses every access
        self._segment.close()

    def unlink(self) -> None:
        self._segment.unlink()


def _specs(n_agents: int, actors: int = 1) -> list[ArraySpec]:
    n = max(1, n_agents)
    return [ArraySpec("words", (_RUN_WORDS + n * _AGENT_WORDS + actors * (_ACTOR_WORDS + 2 * n),), "int64")]


def _attach(name: str, agents: list[str], actors: int = 1, actor: int = 0) -> RunStats:
    return RunStats(Segment.attach(name), agents, actors, actor)
