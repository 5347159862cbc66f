"""Everything a run needs, checked before any process starts (docs/reliability.md, invariant 7) and then allocated.

`RunPlan` resolves the env spec, each agent's learner and options, the storage layouts and the shared-memory
budget, raising a `UserInputError` that names the agent, space or option at fault. `allocate` then creates the
buffers and slots and the run's counters; `release` closes and unlinks all of them.

A *learner unit* owns one learner, buffer and slot: an agent on its own, or an agent group
(`RunConfig.agent_groups`, parameter sharing) whose members all act with copies of its one policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.shards import ShardedBuffer
from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.errors import ConfigError, UserInputError
from pzasync.core.groups import resolve_groups
from pzasync.specs import LATEST, SNAPSHOT, parse_mix, scripted_spec
from pzasync.learners import Learner, LearnerContext, Policy, policy_size, resolve_learner
from pzasync.transport.obs_slots import ObservationSlots
from pzasync.transport.shm import check_fits, new_run_id
from pzasync.transport.slots import PolicySlot
from pzasync.core.spaces import AgentLayout, env_layouts, probe_info_masks
from pzasync.transport.stats import NOT_LEARNING, STATUS, RunStats


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
    #: Its learner's source: the buffer, or with several actors a `ShardedBuffer` of one shard per actor.
    buffer: SharedRingBuffer | ShardedBuffer | None = None
    slot: PolicySlot | None = None
    #: The learner unit this agent belongs to: its own name, or its group's.
    unit: str = ""
    #: In a group: this agent's index among the members (the `member` field of its transitions).
    member: int | None = None
    #: For a group's unit: its member agents, in env order.
    members: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.unit = self.unit or self.agent

    @property
    def learns(self) -> bool:
        return bool(self.learner_cls.learns)

    @property
    def seats(self) -> list[str]:
        """The env agents this unit acts for: a group's members, or the agent itself."""
        return self.members or [self.agent]

    @property
    def learner_path(self) -> str:
        return f"{self.learner_cls.__module__}:{self.learner_cls.__qualname__}"

    def writer(self, actor: int) -> SharedRingBuffer | None:
        """The buffer (shard) actor `actor` writes this agent's transitions to."""
        if isinstance(self.buffer, ShardedBuffer):
            return self.buffer.shard(actor)
        return self.buffer

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


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under `pzasync bench --cores` or taskset)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


#: RunConfig(env_workers="auto") gives every spare core to an env whose step takes at least this long (timed
#: on a probe copy): pistonball through SuperSuit (0.8 ms) is env-dominated (docs/benchmarks.md, "Vectorised
#: acting").
AUTO_WORKER_MIN_STEP_S = 0.5e-3
#: A cheaper env gets one worker from this many copies on: on connect_four (0.05 ms a step) one worker beat
#: stepping the copies in the actor at 16 and 64 copies and lost at 4 and 8, where the halves the worker
#: steps while the actor runs inference are too small to hide the pipe.
AUTO_WORKER_MIN_COPIES = 16


def resolve_auto(config: RunConfig, plan: RunPlan, *, one_actor: bool) -> RunConfig:
    """`config` with every "auto" among `actors`, `envs_per_actor` and `env_workers` replaced by a number
    from the usable cores; `plan.auto` records each choice with its reason (printed by `pzasync train`).

    Cores go first to the learner hosts (RunPlan.learner_hosts) and the evaluator (when `eval_vs` is set),
    then one to each actor, then to env workers:

    - `actors`: one per core left (at least 1). 1 where several actors cannot run: the sequential runner,
      a league, or backend="ray".
    - `envs_per_actor`: AUTO_ENVS_PER_ACTOR.
    - `env_workers`: the cores still left (at most one per copy), if the env's step takes at least
      AUTO_WORKER_MIN_STEP_S; else one, from AUTO_WORKER_MIN_COPIES copies on; else 0.
    """
    from dataclasses import replace

    from pzasync.config import AUTO, AUTO_ENVS_PER_ACTOR

    if AUTO not in (config.actors, config.envs_per_actor, config.env_workers):
        return config
    cores = usable_cores()
    # Ray: one actor per learning unit (on this node or another; counted here).
    learner_cores = (0 if one_actor else len(plan.learning) if config.backend != "shm"
                     else len(plan.learner_hosts()))
    evaluator = 1 if config.eval_vs else 0
    left = cores - learner_cores - evaluator
    taken = f"{cores} usable cores, {learner_cores} for learner hosts" + (", 1 for the evaluator" if evaluator else "")
    changes: dict[str, int] = {}
    if config.envs_per_actor == AUTO:
        changes["envs_per_actor"] = AUTO_ENVS_PER_ACTOR
        plan.auto["envs_per_actor"] = f"{AUTO_ENVS_PER_ACTOR} (pzasync train's measured choice)"
    copies = changes.get("envs_per_actor", config.envs_per_actor)
    actors = config.actors
    if actors == AUTO:
        why_one = ("the sequential runner" if one_actor else "a league" if config.league
                   else f"backend={config.backend!r}" if config.backend != "shm" else None)
        actors = 1 if why_one else max(1, left)
        plan.auto["actors"] = f"{actors} (1 with {why_one})" if why_one else f"{actors} ({taken})"
        changes["actors"] = actors
    if config.env_workers == AUTO:
        acting = 1 if one_actor else actors
        spare = left - acting
        workers = 0
        if spare < 1:
            why = f"no core left ({taken}, {acting} for the actor{'s' if acting > 1 else ''})"
        else:
            step_s = plan.env_step_seconds()
            took = f"an env step takes {step_s * 1e3:.2f} ms"
            if step_s >= AUTO_WORKER_MIN_STEP_S:
                workers, why = min(copies, spare), f"{took}, {spare} cores left"
            elif copies >= AUTO_WORKER_MIN_COPIES:
                workers, why = 1, (f"{took}, under {AUTO_WORKER_MIN_STEP_S * 1e3:g} ms: one worker for "
                                   f"{copies} copies")
            else:
                why = (f"{took}, under {AUTO_WORKER_MIN_STEP_S * 1e3:g} ms, and {copies} copies: workers would "
                       f"not pay below {AUTO_WORKER_MIN_COPIES}")
        plan.auto["env_workers"] = f"{workers} ({why})"
        changes["env_workers"] = workers
    return replace(config, **changes).validate()


def _learner_specs(learners: Any, agents: list[str], groups: dict[str, list[str]]) -> dict[str, Any]:
    """Learner spec per agent; a group's members take the spec given under the group's name (or the default)."""
    group_of = {a: g for g, members in groups.items() for a in members}
    if isinstance(learners, dict):
        default = learners.get("*")
        unknown = sorted(set(learners) - set(agents) - set(groups) - {"*"})
        if unknown:
            raise ConfigError(f"learners given for unknown agent(s) {unknown}; the env's agents are {agents}"
                              + (f" and its agent groups {sorted(groups)}" if groups else ""))
        grouped = sorted(a for a in learners if a in group_of)
        if grouped:
            raise ConfigError(f"agent(s) {grouped} are in agent group(s) "
                              f"{sorted({group_of[a] for a in grouped})}: give the learner under the group's name")
        if default is None:
            missing = list(dict.fromkeys(group_of.get(a, a) for a in agents if group_of.get(a, a) not in learners))
            if missing:
                kind = "agent group(s)" if all(m in groups for m in missing) else "agent(s)"
                raise ConfigError(f"no learner for {kind} {missing}; give one per agent (or agent group) or a "
                                  f"default under '*'")
        return {a: learners.get(group_of.get(a, a), default) for a in agents}
    return dict.fromkeys(agents, learners)


class RunPlan:
    """A validated description of one run; `allocate` turns it into shared memory. Building one has no side
    effects beyond probing the env: removing other runs' stale segments is the runner's separate step
    (`shm.remove_stale_segments`)."""

    def __init__(self, env: Any, learners: Any, config: RunConfig | None = None, *, run_id: str | None = None,
                 one_actor: bool = False):
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
        #: Env agent -> group members; `units` below holds one plan per learner unit.
        self.groups = resolve_groups(self.config.agent_groups, agents)
        self.agents: dict[str, AgentPlan] = {}
        for index, (agent, spec) in enumerate(_learner_specs(learners, agents, self.groups).items()):
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
        self.units: dict[str, AgentPlan] = {}
        grouped = {a for members in self.groups.values() for a in members}
        for agent, p in self.agents.items():
            if agent not in grouped:
                self.units[agent] = p
        for group, members in self.groups.items():
            self.units[group] = self._group_unit(group, members)
        self._check_devices()
        self._check_backend()
        #: The learner units that learn: one learner process (async) or driver (sequential) each.
        self.learning = [p for p in self.units.values() if p.learns]
        #: What the "auto" options (RunConfig.actors, envs_per_actor, env_workers) became, and why.
        self.auto: dict[str, str] = {}
        self.config = resolve_auto(self.config, self, one_actor=one_actor)
        #: Actor processes (RunConfig.actors) and env copies each. `one_actor` (the sequential runner) keeps
        #: the same env copies in one actor: actors x envs_per_actor of them.
        self.actors = 1 if one_actor else self.config.actors
        self.envs_per_actor = self.config.envs_per_actor * (self.config.actors if one_actor else 1)
        self._check_league()
        self._check_yardstick()
        #: Bytes of shared memory actually created by `allocate` (0 before).
        self.shm_in_use = 0
        #: Bytes of the actors' observation slots (transport/obs_slots.py), which each actor creates with env workers.
        self.env_obs_bytes = self.actors * ObservationSlots.nbytes(
            {a: p.layout for a, p in self.agents.items()}, self.envs_per_actor) if self.config.env_workers else 0
        self.shm_bytes = sum(self._buffer_bytes(p) + 2 * 4 * p.policy_floats + 4096
                             for p in self.learning) + self.env_obs_bytes
        largest = max(self.learning, default=None, key=self._buffer_bytes)
        check_fits(f"the run's buffers and slots ({len(self.learning)} learners"
                   + (f"; env workers' observation slots {self.env_obs_bytes:,} bytes" if self.env_obs_bytes else "")
                   + (f"; the largest, for {largest.agent!r}, holds {largest.capacity:,} transitions"
                      if largest is not None else "") + ")", self.shm_bytes)
        self.stats: RunStats | None = None

    def _group_unit(self, group: str, members: list[str]) -> AgentPlan:
        """One learner unit for the group's members, which must agree on spaces (what one policy needs)."""
        first = self.agents[members[0]]
        for agent in members[1:]:
            other = self.agents[agent]
            for what, mine, theirs in (("observation", first.layout.obs_space, other.layout.obs_space),
                                       ("action", first.layout.action_space, other.layout.action_space),
                                       ("action mask shape", first.layout.mask_shape, other.layout.mask_shape)):
                if mine != theirs:
                    raise ConfigError(
                        f"agent group {group!r}: {members[0]!r} and {agent!r} have different {what} spaces "
                        f"({mine} vs {theirs}); one shared policy needs equal spaces. Pad them first, e.g. with "
                        f"supersuit.pad_observations_v0 / pad_action_space_v0")
        unit = AgentPlan(group, first.index, first.learner_cls, first.learner_name, first.options, first.layout,
                         first.capacity, first.policy_floats, members=list(members))
        for i, agent in enumerate(members):
            self.agents[agent].unit, self.agents[agent].member = group, i
        return unit

    def _check_league(self) -> None:
        """Every league entry names a learning unit, and every scripted opponent can play the seats it takes."""

        league = dict(self.config.league)
        if "*" in league:  # every learning unit without a mix of its own
            default = league.pop("*")
            league = {**{p.agent: default for p in self.learning}, **league}
        #: RunConfig.league with '*' expanded: learning unit -> opponent mix.
        self.league = league
        for unit, mix in league.items():
            if unit not in self.units:
                raise ConfigError(f"option league: {unit!r} is not an agent or agent group of this env; "
                                  f"learning units: {[p.agent for p in self.learning]}")
            if not self.units[unit].learns:
                raise ConfigError(f"option league: {unit!r} does not learn ({self.units[unit].learner_name}); "
                                  f"a league is for learning agents or groups")
            members = self.units[unit].seats
            seats = [a for a in self.agents if a not in members] or members
            for kind in parse_mix(unit, mix):
                if kind not in (LATEST, SNAPSHOT):
                    self.check_player(kind, seats, f"option league for {unit!r}")
        self._check_trainee_weights()

    def _check_trainee_weights(self) -> None:
        """RunConfig.league_trainee_weights names seats of league units, and leaves each unit a seat to train."""
        weights = self.config.league_trainee_weights
        seats = {a for unit in self.league for a in self.units[unit].seats}
        for seat in weights:
            if seat not in seats:
                raise ConfigError(f"option league_trainee_weights: {seat!r} is not a seat of a unit with a league; "
                                  f"seats: {sorted(seats)}")
        for unit in self.league:
            members = self.units[unit].seats
            if not any(weights.get(a, 1.0) > 0 for a in members):
                raise ConfigError(f"option league_trainee_weights: every seat of {unit!r} ({members}) weighs 0; "
                                  f"at least one must be > 0")

    def _check_backend(self) -> None:
        if self.config.backend == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise ConfigError('option backend="ray" needs Ray, which is not installed: pip install "pzasync[ray]"')

    def _check_yardstick(self) -> None:
        yardstick = self.config.eval_vs
        if yardstick is None or os.path.isdir(yardstick):
            if yardstick is not None and not os.path.exists(os.path.join(yardstick, "run.json")):
                raise ConfigError(f"option eval_vs={yardstick!r}: a directory, but not a pzasync run directory")
            return
        self.check_player(yardstick, list(self.agents), f"option eval_vs={yardstick!r}")

    def check_player(self, spec: str, seats: list[str], where: str) -> None:
        """A never-learning player spec ('one_ply', 'negamax,depth=2', 'mod:fn') that can play every seat given."""

        for seat in seats:
            try:
                cls, options = resolve_learner(scripted_spec(spec), seat)
                cls.check_spaces(self.agents[seat].layout)
                cls.validate_config(seat, options)
            except UserInputError as exc:
                raise ConfigError(f"{where}: {exc}") from exc
            if cls.learns:
                raise ConfigError(f"{where}: {spec!r} is a learner; opponents and yardsticks must be players that "
                                  f"never learn (random, one_ply, negamax, perfect, fixed, or 'module:callable')")

    def _check_devices(self) -> None:
        wanted = {self.config.device_for(a): "device" for a, p in self.units.items() if p.learns}
        if self.config.actor_device != "cpu":
            wanted.setdefault(self.config.actor_device, "actor_device")
        if any(d.startswith("cuda") for d in wanted):
            import torch

            if not torch.cuda.is_available():
                asked = ", ".join(f"{option}={device!r}" for device, option in sorted(wanted.items())
                                  if device.startswith("cuda"))
                raise ConfigError(f"{asked} requested, but CUDA is not available on this machine")
            for device, option in wanted.items():
                if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
                    raise ConfigError(f"{option} {device!r}: only {torch.cuda.device_count()} CUDA device(s) here")

    def learner_context(self, unit: str) -> LearnerContext:
        plan = self.units[unit]
        return LearnerContext(unit, plan.layout, plan.options, self.config.device_for(unit),
                              plan.seed(self.config.seed), members=list(plan.members), tracks=self.tracks(unit))

    def tracks(self, unit: str) -> int:
        """Trajectories interleaved in the unit's buffer: one per env copy and group member."""
        return self.envs_per_actor * max(1, len(self.units[unit].members))

    def _buffer_extras(self, unit: AgentPlan) -> dict[str, str]:
        """The unit's buffer columns beyond the transition: its learner's extras, `member` in a group, and
        `track` when several env copies (of one actor or of several) write into it."""
        extras = dict(unit.learner_cls.extras)
        if unit.members:
            extras["member"] = "int16"
        if self.envs_per_actor * self.actors > 1:
            extras["track"] = "int32"
        return extras

    def shard_capacity(self, unit: AgentPlan) -> int:
        """Rows of each of the unit's buffer shards: its capacity split over the actors."""
        return max(2, -(-unit.capacity // self.actors))

    def _buffer_bytes(self, unit: AgentPlan) -> int:
        return self.actors * SharedRingBuffer.nbytes_for(
            unit.layout, self.shard_capacity(unit), self._buffer_extras(unit), obs_storage=self.config.obs_storage,
            tracks=self.tracks(unit.agent))

    def learner_hosts(self) -> list[list[str]]:
        """The learning units of each learner host process (RunConfig.learner_processes, by default one per
        core beyond the actor's), dealt out in turn."""
        units = [p.agent for p in self.learning]
        wanted = self.config.learner_processes or max(1, usable_cores() - 1)  # a core for the actor
        hosts = max(1, min(len(units), wanted))
        return [units[h::hosts] for h in range(hosts)] if units else []

    def env_step_seconds(self, steps: int = 200, budget_s: float = 1.0) -> float:
        """Mean seconds of one agent step on a fresh copy, random legal actions (for env_workers="auto"): the
        mean, since a parallel env converted to AEC runs its whole step at one agent's turn of each cycle."""
        import time

        import numpy as np

        env, times = self.env_spec.make(), []
        try:
            env.reset(seed=self.config.seed)
            rng, start = np.random.default_rng(self.config.seed), time.perf_counter()
            while len(times) < steps and time.perf_counter() - start < budget_s:
                if not env.agents:
                    env.reset()
                    continue
                agent = env.agent_selection
                observation, _, terminated, truncated, info = env.last()
                if terminated or truncated:
                    action = None
                else:
                    layout = self.agents[agent].layout
                    _, mask = layout.split(observation, info)
                    space = layout.action_space
                    action = (int(rng.choice(np.flatnonzero(mask)) + getattr(space, "start", 0))
                              if mask is not None and mask.any() else space.sample())
                tick = time.perf_counter()
                env.step(action)
                times.append(time.perf_counter() - tick)
        finally:
            env.close()
        return float(np.mean(times)) if times else 0.0

    def torch_threads(self, processes: int) -> int:
        return self.config.torch_threads or max(1, usable_cores() // max(1, processes))

    def allocate(self) -> None:
        """Create every learner unit's buffer and slot and the run's counters (owned by this process)."""
        try:
            names = list(self.agents) + [g for g in self.groups]
            self.stats = RunStats.create(self.run_id, names, self.actors)
            for unit in self.units.values():
                if not unit.learns:
                    self.stats.set(unit.agent, STATUS, NOT_LEARNING)
                    continue
                label = f"a{unit.index}" if not unit.members else f"g{unit.index}"
                extras = self._buffer_extras(unit)
                shards = self._create_shards(unit, extras, f"buf-{label}")
                unit.buffer = shards[0] if self.actors == 1 else ShardedBuffer(shards)
                unit.slot = PolicySlot.create(unit.policy_floats, self.config.publish_mode, run_id=self.run_id,
                                              label=f"slot-{label}")
            for p in self.agents.values():
                if p.unit != p.agent:
                    p.buffer, p.slot = self.units[p.unit].buffer, self.units[p.unit].slot
                    if not p.learns:
                        self.stats.set(p.agent, STATUS, NOT_LEARNING)
            self.shm_in_use = self.stats._segment.size + self.env_obs_bytes + sum(
                u.buffer.nbytes + u.slot.nbytes for u in self.units.values() if u.buffer is not None)
        except BaseException:
            self.release()
            raise

    def _create_shards(self, unit: AgentPlan, extras: dict[str, str], label: str) -> list[SharedRingBuffer]:
        """The unit's buffer, one shard per actor; if one cannot be created, those already made are removed."""
        shards: list[SharedRingBuffer] = []
        try:
            for k in range(self.actors):
                shards.append(SharedRingBuffer.create(
                    unit.layout, self.shard_capacity(unit), extras, run_id=self.run_id,
                    label=label + (f"-s{k}" if self.actors > 1 else ""), obs_storage=self.config.obs_storage,
                    tracks=self.tracks(unit.agent)))
        except BaseException:
            for shard in shards:
                shard.close()
                shard.unlink()
            raise
        return shards

    def release(self) -> None:
        """Close and unlink everything `allocate` created; safe to call more than once."""
        for plan in self.units.values():
            for resource in (plan.buffer, plan.slot):
                if resource is not None:
                    resource.close()
                    resource.unlink()
        for plan in [*self.units.values(), *self.agents.values()]:
            plan.buffer = plan.slot = None
        if self.stats is not None:
            self.stats.close()
            self.stats.unlink()
            self.stats = None
