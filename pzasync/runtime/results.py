"""What a run returns (docs/running.md, RunResult): the same `RunResult` from both runners."""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class AgentResult:
    """One agent's side of a run."""

    agent: str
    learner: str
    #: The agent group whose learner this agent shares (RunConfig.agent_groups); None on its own. Learner
    #: figures (updates, version, lag, waits, restarts, dropped) are then the group's.
    group: str | None = None
    updates: int = 0
    published_version: int = 0
    last_metrics: dict[str, float] = field(default_factory=dict)
    episode_returns: list[float] = field(default_factory=list)
    agent_steps: int = 0
    transitions_written: int = 0
    #: Recorded transitions of this agent its learner loaded before acting started (RunConfig.dataset): counted
    #: here, never in `agent_steps` or `transitions_written`.
    dataset_transitions: int = 0
    transitions_dropped: int = 0
    policy_lag_mean: float = 0.0
    policy_lag_p95: float = 0.0
    learner_wait_s: float = 0.0
    actor_wait_s: float = 0.0
    restarts: int = 0
    error: str | None = None
    nonfinite_transitions: int = 0
    #: CPU seconds (since its learner started) and peak resident memory of this agent's learner process
    #: (async runner only; in the sequential runner learners share the runner's process: RunResult.process_*).
    #: Learners that share a learner host process report the same process, named by `learner_pid`.
    learner_cpu_seconds: float | None = None
    learner_peak_rss_mb: float | None = None
    learner_pid: int | None = None
    #: Ray backend: the node its learner ran on (last incarnation) and how transitions reached it ("shm" on
    #: the actor's node, "object_store" from another); None with the other hosts.
    learner_node: str | None = None
    learner_transport: str | None = None

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.episode_returns)) if self.episode_returns else float("nan")


@dataclass
class PolicySnapshot:
    """Each learning agent's acting policy at one moment of a run (`RunConfig.snapshot_every_steps`)."""

    agent_steps: int
    #: Seconds since acting started (start-up excluded), when the copy was taken.
    seconds: float
    updates: dict[str, int]
    versions: dict[str, int]
    vectors: dict[str, np.ndarray]


@dataclass
class RunResult:
    """Counts, timings and per-agent results of one `run()`."""

    runner: str
    env: str
    agent_steps: int
    episodes: int
    wall_seconds: float
    startup_seconds: float
    acting_seconds: float
    actor_steps_per_second: float
    stopped_because: str
    agents: dict[str, AgentResult]
    #: Where the learners ran: "inline" (sequential), "process" (local processes) or "ray" (Ray actors).
    learner_host: str = ""
    #: The Ray node the actor ran on when it ran as a Ray actor (`RunConfig.ray_actor_resources`), else None.
    actor_node: str | None = None
    run_dir: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    #: CPU seconds of the runner's own process while acting, and its peak resident memory (lifetime): the
    #: actor, plus the learners in the sequential runner.
    process_cpu_seconds: float = 0.0
    process_peak_rss_mb: float = 0.0
    #: Actor processes (RunConfig.actors; the sequential runner always has one), and the figures of those
    #: beyond the runner's own (actor 1, 2, ...): `{"actor", "cpu_seconds", "peak_rss_mb"}` each.
    actors: int = 1
    actor_processes: list[dict[str, Any]] = field(default_factory=list)
    #: Actors placed by Ray (backend="ray", RunConfig.actors > 1; else empty): per actor (0: the runner's own)
    #: its `node`, `transport` ("driver", "shm" or "object_store"), `agent_steps`, `steps_per_second`,
    #: `restarts`, `policy_lag_mean` (of the rows that came through the object store) and `received` per unit.
    actor_nodes: list[dict[str, Any]] = field(default_factory=list)
    #: Bytes of shared memory the run's buffers, slots and counters occupied (and its env workers' observation
    #: slots).
    shm_bytes: int = 0
    #: Evaluation while training (RunConfig.eval_vs): one row per agent and evaluation round.
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    #: Self-play league (RunConfig.league): games per opponent kind, snapshot pool and ratings.
    league: dict[str, Any] | None = None
    #: On an env set (RunConfig.env_set): its name, the curriculum stage reached (`stage` of `stages`, `step`),
    #: each stage change, and episodes per env played.
    env_set: dict[str, Any] | None = None
    #: Policy copies taken during the run (not part of the JSON form).
    snapshots: list[PolicySnapshot] = field(default_factory=list, repr=False)

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """`actor_nodes` per Ray node: its actors, agent steps, steps/s and restarts."""
        nodes: dict[str, dict[str, Any]] = {}
        for row in self.actor_nodes:
            n = nodes.setdefault(row["node"], {"node": row["node"], "actors": [], "agent_steps": 0,
                                               "steps_per_second": 0.0, "restarts": 0})
            n["actors"].append(row["actor"])
            n["agent_steps"] += row["agent_steps"]
            n["steps_per_second"] += row["steps_per_second"]
            n["restarts"] += row["restarts"]
        return list(nodes.values())

    @property
    def updates_per_agent_step(self) -> dict[str, float]:
        return {a: r.updates / r.agent_steps if r.agent_steps else 0.0 for a, r in self.agents.items()}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("snapshots")
        return data

    def to_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, default=float)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        data = dict(data)
        agents = {k: AgentResult(**v) for k, v in data.pop("agents").items()}
        return cls(agents=agents, **data)


def process_usage() -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MiB of the calling process, from getrusage."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
    return usage.ru_utime + usage.ru_stime, peak
