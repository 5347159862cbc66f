"""Everything a run needs, checked before any process starts (invariant 7) and then allocated.

`RunPlan` resolves the env spec, each agent's learner and options, the storage layouts and the shared-memory
budget, raising a `UserInputError` that names the agent, space or option at fault. `allocate` then creates the
per-agent buffers and slots and the run's counters; `release` closes and unlinks all of them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from .buffer import SharedRingBuffer
from .config import RunConfig
from .environments import EnvSpec
from .errors import ConfigError
from .learners import Learner, LearnerContext, Policy, policy_size, resolve_learner
from .shm import check_fits, clean_stale, new_run_id
from .slots import PolicySlot
from .spaces import AgentLayout, env_layouts, probe_info_masks
from .stats import NOT_LEARNING, STATUS, RunStats


@dataclass
class AgentPlan:
    """One agent's resolved learner, options and storage."""

    agent: str
    index: int
    learner_cls: type[Learner]
    learner_name: str
    options: dict[str, Any]
    layout: AgentLayout
    capacity: int
    policy_floats: int
    buffer: SharedRingBuffer | None = None
    slot: PolicySlot | None = None

    @property
    def learns(self) -> bool:
        return bool(self.learner_cls.learns)

    @property
    def learner_path(self) -> str:
        return f"{self.learner_cls.__module__}:{self.learner_cls.__qualname__}"

    def seed(self, base: int) -> int:
        return base + 1009 * (self.index + 1)

    def build_policy(self, base_seed: int) -> Policy:
        """The actor's copy of this agent's policy, seeded for reproducible sampling."""
        import torch

        torch.manual_seed(self.seed(base_seed))
        policy = self.learner_cls.build_policy(self.layout, self.options)
        policy.eval()
        policy.seed(self.seed(base_seed) + 1)
        return policy


def _learner_specs(learners: Any, agents: list[str]) -> dict[str, Any]:
    if isinstance(learners, dict):
        default = learners.get("*")
        unknown = sorted(set(learners) - set(agents) - {"*"})
        if unknown:
            raise ConfigError(f"learners given for unknown agent(s) {unknown}; the env's agents are {agents}")
        missing = [a for a in agents if a not in learners and default is None]
        if missing:
            raise ConfigError(f"no learner for agent(s) {missing}; give one per agent or a default under '*'")
        return {a: learners.get(a, default) for a in agents}
    return dict.fromkeys(agents, learners)


class RunPlan:
    """A validated description of one run; `allocate` turns it into shared memory."""

    def __init__(self, env: Any, learners: Any, config: RunConfig | None = None, *, run_id: str | None = None):
        self.config = (config or RunConfig()).validate()
        self.env_spec = EnvSpec.of(env)
        probe = self.env_spec.make()
        try:
            agents = list(probe.possible_agents)
            if not agents:
                raise ConfigError(f"env {self.env_spec.name!r} declares no possible_agents")
            layouts = env_layouts(probe, probe_info_masks(probe, seed=self.config.seed))
        finally:
            probe.close()
        self.run_id = run_id or new_run_id()
        self.agents: dict[str, AgentPlan] = {}
        for index, (agent, spec) in enumerate(_learner_specs(learners, agents).items()):
            cls, options = resolve_learner(spec, agent)
            cls.check_spaces(layouts[agent])
            options = cls.validate_config(agent, options)
            name = spec[0] if isinstance(spec, tuple) else spec
            capacity = self.config.buffer_capacity
            if cls.on_policy:
                capacity = self.config.onpolicy_buffer_batches * int(options.get("batch_size", 64))
            size = policy_size(cls.build_policy(layouts[agent], options))
            self.agents[agent] = AgentPlan(agent, index, cls, name if isinstance(name, str) else cls.__name__,
                                           options, layouts[agent], max(2, capacity), size)
        self._check_devices()
        self.learning = [p for p in self.agents.values() if p.learns]
        self.shm_bytes = sum(
            SharedRingBuffer.nbytes_for(p.layout, p.capacity, p.learner_cls.extras) + 2 * 4 * p.policy_floats + 4096
            for p in self.learning
        )
        check_fits(f"the run's buffers and slots ({len(self.learning)} learning agents)", self.shm_bytes)
        self.stats: RunStats | None = None
        self.removed_stale = clean_stale()
        if self.removed_stale:
            total = sum(seg.size for seg in self.removed_stale)
            runs = sorted({seg.run_id for seg in self.removed_stale})
            print(f"pzasync: removed {len(self.removed_stale)} shared-memory segment(s) ({total:,} bytes) left by "
                  f"dead run(s) {', '.join(runs)}", file=sys.stderr)

    def _check_devices(self) -> None:
        wanted = {self.config.device_for(a) for a, p in self.agents.items() if p.learns}
        if any(d.startswith("cuda") for d in wanted):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(f"device {sorted(wanted)} requested but CUDA is not available on this machine")
            for device in wanted:
                if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
                    raise ConfigError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here")

    def learner_context(self, agent: str) -> LearnerContext:
        plan = self.agents[agent]
        return LearnerContext(agent, plan.layout, plan.options, self.config.device_for(agent),
                              plan.seed(self.config.seed))

    def torch_threads(self, processes: int) -> int:
        return self.config.torch_threads or max(1, (os.cpu_count() or 1) // max(1, processes))

    def allocate(self) -> None:
        """Create every agent's buffer and slot and the run's counters (owned by this process)."""
        try:
            self.stats = RunStats.create(self.run_id, list(self.agents))
            for plan in self.agents.values():
                if not plan.learns:
                    self.stats.set(plan.agent, STATUS, NOT_LEARNING)
                    continue
                label = f"a{plan.index}"
                plan.buffer = SharedRingBuffer.create(plan.layout, plan.capacity, plan.learner_cls.extras,
                                                      run_id=self.run_id, label=f"buf-{label}")
                plan.slot = PolicySlot.create(plan.policy_floats, self.config.publish_mode, run_id=self.run_id,
                                              label=f"slot-{label}")
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Close and unlink everything `allocate` created; safe to call more than once."""
        for plan in self.agents.values():
            for resource in (plan.buffer, plan.slot):
                if resource is not None:
                    resource.close()
                    resource.unlink()
            plan.buffer = plan.slot = None
        if self.stats is not None:
            self.stats.close()
            self.stats.unlink()
            self.stats = None
