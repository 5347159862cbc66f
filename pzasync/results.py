"""What a run returns (SPEC 5): the same `RunResult` from both runners."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class AgentResult:
    """One agent's side of a run."""

    agent: str
    learner: str
    updates: int = 0
    published_version: int = 0
    last_metrics: dict[str, float] = field(default_factory=dict)
    episode_returns: list[float] = field(default_factory=list)
    agent_steps: int = 0
    transitions_written: int = 0
    transitions_dropped: int = 0
    policy_lag_mean: float = 0.0
    policy_lag_p95: float = 0.0
    learner_wait_s: float = 0.0
    actor_wait_s: float = 0.0
    restarts: int = 0
    error: str | None = None
    nonfinite_transitions: int = 0

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.episode_returns)) if self.episode_returns else float("nan")


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
    run_dir: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def updates_per_agent_step(self) -> dict[str, float]:
        return {a: r.updates / r.agent_steps if r.agent_steps else 0.0 for a, r in self.agents.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, default=float)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        agents = {k: AgentResult(**v) for k, v in data.pop("agents").items()}
        return cls(agents=agents, **data)
