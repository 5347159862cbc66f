"""Run-wide counters in shared memory: agent steps, episodes, per-learner updates, heartbeats, waits, flags.

Every word has a single writer (the actor, or one learner), so plain aligned 8-byte stores suffice and any
process reads a recent value without locks. Times are `time.monotonic_ns()`, which all processes share.
"""

from __future__ import annotations

import time

from .shm import ArraySpec, Segment, carve, packed_size

# Run-wide words (written by the actor / main process).
AGENT_STEPS, EPISODES, STOP, ACTOR_BEAT = 0, 1, 2, 3
_GLOBAL_WORDS = 8

# Per-agent words. Actor-written: STEPS, ACTOR_WAIT_NS. Learner-written: the rest.
STEPS, UPDATES, VERSION, STATUS, BEAT, LEARNER_WAIT_NS, ACTOR_WAIT_NS, RESTARTS = range(8)
_AGENT_WORDS = 8

# Learner status values.
STARTING, RUNNING, DONE, CRASHED, NOT_LEARNING = 0, 1, 2, 3, 4
STATUS_NAMES = {STARTING: "starting", RUNNING: "running", DONE: "done", CRASHED: "crashed",
                NOT_LEARNING: "not learning"}


class RunStats:
    """Shared counters of one run; picklable, attaches in the process that unpickles it."""

    def __init__(self, segment: Segment, agents: list[str]) -> None:
        self._segment = segment
        self.agents = list(agents)
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        views = carve(segment.buf, _specs(len(agents)))
        self.run = views["run"]
        self.per_agent = views["agents"]
        # The same words as one flat int64 memoryview: item access costs tens of nanoseconds (hot paths).
        self.words = segment.buf[: 8 * (_GLOBAL_WORDS + _AGENT_WORDS * max(1, len(agents)))].cast("q")
        self._steps_word = {agent: self.word_index(agent, STEPS) for agent in self.agents}

    def record_steps(self, agent: str | None, agent_steps: int, total_steps: int) -> None:
        """The actor's counts after a decision: `agent`'s own steps (None: an opponent's decision, not counted
        for any agent) and the run's. Two aligned word stores through a cached index: the hot path."""
        words = self.words
        if agent is not None:
            words[self._steps_word[agent]] = agent_steps
        words[AGENT_STEPS] = total_steps

    def record_episodes(self, episodes: int) -> None:
        """The actor's count of finished (or cut) episodes, all env copies together."""
        self.words[EPISODES] = episodes

    def word_index(self, agent: str, word: int) -> int:
        """Index of an agent's word in `words` (the per-agent block follows the run block, both packed)."""
        return _GLOBAL_WORDS + self.index[agent] * _AGENT_WORDS + word

    @classmethod
    def create(cls, run_id: str, agents: list[str]) -> RunStats:
        return cls(Segment.create(run_id, "stats", packed_size(_specs(len(agents)))), agents)

    def __reduce__(self) -> tuple:
        return (_attach, (self._segment.name, self.agents))

    # ------------------------------------------------------------------------------------------- flags
    def request_stop(self) -> None:
        self.run[STOP] = 1

    @property
    def stop_requested(self) -> bool:
        return bool(self.run[STOP])

    def beat(self, agent: str | None = None) -> None:
        """Record that a process is alive (the actor when agent is None)."""
        if agent is None:
            self.run[ACTOR_BEAT] = time.monotonic_ns()
        else:
            self.per_agent[self.index[agent], BEAT] = time.monotonic_ns()

    def get(self, agent: str, word: int) -> int:
        return int(self.per_agent[self.index[agent], word])

    def set(self, agent: str, word: int, value: int) -> None:
        self.per_agent[self.index[agent], word] = value

    def add(self, agent: str, word: int, value: int) -> None:
        self.per_agent[self.index[agent], word] += value

    def close(self) -> None:
        self.run = self.per_agent = None
        if self.words is not None:
            self.words.release()
            self.words = None
        self._segment.close()

    def unlink(self) -> None:
        self._segment.unlink()


def _specs(n_agents: int) -> list[ArraySpec]:
    return [ArraySpec("run", (_GLOBAL_WORDS,), "int64"), ArraySpec("agents", (max(1, n_agents), _AGENT_WORDS), "int64")]


def _attach(name: str, agents: list[str]) -> RunStats:
    return RunStats(Segment.attach(name), agents)
