"""What a run is, checked before any process starts (docs/reliability.md, invariant 7).

`RunPlan` resolves the env spec, each agent's learner and options, the learner units and agent groups, the
storage layouts and the per-unit sizes (buffer capacity, policy size, tracks), raising a `UserInputError`
that names the agent, space or option at fault. Two steps it takes are modules of their own: turning "auto"
options into numbers (autotune.py) and the shared memory, its budget checked here and created by `allocate`
(allocation.py). What a runner fixes about its processes comes in as a `Placement`, so the plan never needs
to know which runner it serves.

A *learner unit* owns one learner, buffer and slot: an agent on its own, or an agent group
(`RunConfig.agent_groups`, parameter sharing) whose members all act with copies of its one policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from pzasync.config import RunConfig
from pzasync.config.groups import AUTO, chosen
from pzasync.core.dataset import Dataset, open_dataset
from pzasync.core.drawn_observations import drawn
from pzasync.core.environments import EnvSpec, choose_env_api
from pzasync.core.envset_env import EnvSetSource
from pzasync.core.envset_spec import EnvSet
from pzasync.core.groups import resolve_groups
from pzasync.core.spaces import AgentLayout, env_layouts, probe_info_masks
from pzasync.errors import ConfigError, DatasetError, UserInputError
from pzasync.learners import Learner, Policy, policy_size, resolve_learner, state_request
from pzasync.logs import logger
from pzasync.recipes import env_api_for
from pzasync.remote.address import is_remote_id
from pzasync.runtime import allocation
from pzasync.runtime.autotune import Placement, autotune, env_step_seconds, usable_cores
from pzasync.specs import LATEST, SNAPSHOT, parse_mix, scripted_spec
from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.shards import ShardedBuffer
from pzasync.transport.shm import new_run_id
from pzasync.transport.slots import PolicySlot
from pzasync.transport.stats import RunStats


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
    effects beyond probing the env (and, for env_workers="auto", timing it): removing other runs' stale
    segments is the runner's separate step (`shm.remove_stale_segments`).

    `placement` is what the runner fixes about the run's processes (autotune.Placement): by default one
    actor process per `RunConfig.actors` and learners in processes of their own."""

    def __init__(self, env: Any, learners: Any, config: RunConfig | None = None, *, run_id: str | None = None,
                 placement: Placement = Placement()) -> None:  # noqa: B008 - a frozen dataclass, never changed
        self.config = (config or RunConfig()).validate()
        self.env_spec = EnvSpec.of(self._env_or_set(env))
        #: The env set the run plays (RunConfig.env_set, core/envset_spec.py), or None.
        self.env_set: EnvSet | None = self.env_spec.env_set
        if self.env_set is not None:
            self.env_spec.source.check()  # type: ignore[union-attr]  # same agents and spaces, named where not
        if is_remote_id(self.env_spec.source) and self.config.env_workers:
            if self.config.env_workers != AUTO:
                logger.info(f"env_workers={self.config.env_workers} is ignored: env {self.env_spec.name!r} is served "
                            f"by other processes, which step its copies (docs/remote.md)")
            self.config = replace(self.config, env_workers=0).validate()
        self.env_spec, drawn_note = drawn(self.env_spec, self.config.seed)
        probe = self.env_spec.make()
        try:
            agents = list(probe.possible_agents)
            if not agents:
                raise ConfigError(f"env {self.env_spec.name!r} declares no possible_agents")
        finally:
            probe.close()
        self.run_id = run_id or new_run_id()
        #: Env agent -> group members; `units` below holds one plan per learner unit.
        self.groups = resolve_groups(self.config.agent_groups, agents)
        specs = _learner_specs(learners, agents, self.groups)
        group_of = {a: g for g, members in self.groups.items() for a in members}
        # Each learning unit's learner is resolved and its options checked once, on its first agent: a group's
        # members share the group's spec (and, checked in `_group_unit`, its spaces), so what is measured on one
        # member (below: the policy's size) holds for all.
        first: dict[str, str] = {}
        for agent in specs:
            first.setdefault(group_of.get(agent, agent), agent)
        found = {unit: resolve_learner(specs[agent], agent) for unit, agent in first.items()}
        checked = {unit: (cls, cls.validate_config(first[unit], options)) for unit, (cls, options) in found.items()}
        resolved = {agent: checked[group_of.get(agent, agent)] for agent in specs}
        self.env_spec = self.env_spec.with_state(state_request(resolved, self.env_spec.name))
        probe = self.env_spec.make()
        try:
            #: The env's API the actor steps (RunConfig.env_api resolved): "aec" or "parallel".
            self.env_api, api_note = self._env_api(probe)
            layouts = env_layouts(probe, probe_info_masks(probe, seed=self.config.seed))
        finally:
            probe.close()
        self.agents: dict[str, AgentPlan] = {}
        sizes: dict[str, int] = {}  # policy floats per learning unit, measured on one module
        for index, (agent, spec) in enumerate(specs.items()):
            cls, options = resolved[agent]
            cls.check_spaces(layouts[agent])
            name = spec[0] if isinstance(spec, tuple) else spec
            capacity = self.config.buffer_capacity
            if isinstance(capacity, str):  # AUTO: the most `allocation.fit_buffers` gives, below, once sizes are known
                capacity = allocation.AUTO_BUFFER_TRANSITIONS
            if cls.on_policy:
                capacity = self.config.onpolicy_buffer_batches * int(options.get("batch_size", 64))
            unit = group_of.get(agent, agent)
            if unit not in sizes:
                sizes[unit] = policy_size(cls.build_policy(layouts[agent], options))
            size = sizes[unit]
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
        #: The learner units that learn: one learner each (in a learner host, a Ray actor, or inline).
        self.learning = [p for p in self.units.values() if p.learns]
        #: Recorded transitions (RunConfig.dataset): the dataset's header (None without one), and per agent the
        #: transitions its learning unit's learner loads (agents of units that do not learn load none).
        self.dataset, self.dataset_rows = self._check_dataset()
        tuning = autotune(self.config, learner_cores=self._learner_cores(placement), cores=usable_cores(),
                          placement=placement, step_seconds=lambda: env_step_seconds(
                              self.env_spec, layouts, self.config.seed))
        #: What the "auto" options (RunConfig.actors, envs_per_actor, env_workers, env_api) became, and why.
        self.auto: dict[str, str] = {**tuning.choices, **({"env_api": api_note} if api_note else {}),
                                     **({"render_mode": drawn_note} if drawn_note else {})}
        self.config = tuning.config
        #: Actor processes and env copies each: one process per RunConfig.actors with envs_per_actor copies,
        #: unless the runner placed the same actors x envs_per_actor copies in fewer (Placement.actor_processes).
        actors = chosen(self.config.actors, "actors")
        self.actors: int = placement.actor_processes or actors
        if actors % self.actors:
            raise ConfigError(f"option actors={self.config.actors}: the env copies of {self.config.actors} actors "
                              f"cannot be shared evenly by {self.actors} actor processes")
        self.envs_per_actor: int = chosen(self.config.envs_per_actor, "envs_per_actor") * actors // self.actors
        self._check_league()
        self._check_yardstick()
        if self.config.buffer_capacity == AUTO:
            note = allocation.fit_buffers(self)
            if note:
                self.auto["buffer_capacity"] = note
        #: Bytes of shared memory actually created by `allocate` (0 before).
        self.shm_in_use = 0
        #: Bytes of the actors' observation slots (transport/obs_slots.py), which each actor creates with env workers.
        self.env_obs_bytes = allocation.env_obs_bytes(self)
        #: Bytes of shared memory the run will take, checked against free /dev/shm.
        self.shm_bytes = allocation.shm_bytes(self)
        allocation.check_budget(self)
        self.stats: RunStats | None = None

    def _env_or_set(self, env: Any) -> Any:
        """The env the run plays: `env`, or the env set of RunConfig.env_set (or an `EnvSet` given as the env)."""
        if isinstance(env, EnvSet):
            return EnvSpec(EnvSetSource(env))
        value = self.config.env_set
        if value is None:
            return env
        if env is not None and not (isinstance(env, EnvSpec) and env.env_set is not None):
            raise ConfigError(f"option env_set={value!r}: the run plays the env set; give no env beside it (got "
                              f"{getattr(env, 'name', env)!r})")
        return env if env is not None else EnvSpec(EnvSetSource(EnvSet.of(value)))

    def _env_api(self, probe: Any) -> tuple[str, str | None]:
        """RunConfig.env_api resolved ("aec" or "parallel"), and where "auto" chose the parallel path, why
        (`choose_env_api`; `probe`, the env made to read its spaces, says what a remote env's server offers)."""
        return choose_env_api(self.env_spec, self.config.env_api, probe, env_api_for(self.env_spec.base_name))

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

    def _check_dataset(self) -> tuple[Dataset | None, dict[str, int]]:
        """RunConfig.dataset read and checked against every learning unit: its learner must be able to learn from
        recorded transitions (`Learner.dataset_refusal`), and each of its seats' recorded fields must be those of
        the seat's layout (a mismatch names the agent, the field and both shapes); a learner that learns only
        from them (`bc`) must find some."""
        path = self.config.dataset
        if path is None:
            return None, {}
        dataset = open_dataset(path)
        rows: dict[str, int] = {}
        for unit in self.learning:
            why = unit.learner_cls.dataset_refusal(unit.options)
            if why is not None:
                who = f"agent group {unit.agent!r}" if unit.members else f"agent {unit.agent!r}"
                raise ConfigError(f"{who}: option dataset={str(path)!r}: {why}")
            for seat in unit.seats:
                dataset.check(seat, self.agents[seat].layout)
                rows[seat] = dataset.rows_of(seat)
        for unit in self.learning:  # after every layout check: a dataset of another env is named as such first
            who = f"agent group {unit.agent!r}" if unit.members else f"agent {unit.agent!r}"
            if unit.learner_cls.needs_dataset and not any(rows[seat] for seat in unit.seats):
                raise DatasetError(f"{who}: {unit.learner_name} learns only from recorded transitions, "
                                   f"and dataset {str(path)!r} has none of {unit.seats}; it holds "
                                   f"{sorted(dataset.agents)}")
        return dataset, rows

    def _check_league(self) -> None:
        """Every league entry names a learning unit, and every scripted opponent can play the seats it takes."""

        league = dict(self.config.league)
        if "*" in league:  # every learning unit without a mix of its own
            default = league.pop("*")
            league = {**{p.agent: default for p in self.learning}, **league}
        league = self._curriculum_league(league)
        #: RunConfig.league with '*' expanded: learning unit -> opponent mix (with an env set's opponent steps,
        #: every learning unit; `League` plays each step's opponent while the curriculum is at it).
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

    def _curriculum_league(self, league: dict[str, Any]) -> dict[str, Any]:
        """The league with an env set's opponent steps (docs/running.md, "Env sets"): each step's opponent can
        play every learning unit's other seats, and every learning unit is in the league (plain self-play,
        `latest`, outside those steps unless RunConfig.league says otherwise)."""
        opponents = self.env_set.opponents if self.env_set is not None else []
        if not any(o is not None for o in opponents):
            return league
        assert self.env_set is not None
        where = f"env set {self.env_set.name!r} ({self.env_set.source})"
        if not self.learning:
            raise ConfigError(f"{where}: its curriculum sets league opponents, but no agent learns")
        if self.actors > 1:
            raise ConfigError(f"{where}: its curriculum sets league opponents, and a league keeps its snapshot pool "
                              f"and ratings in one actor: use actors=1 (or more envs_per_actor)")
        league = {**{p.agent: {LATEST: 1.0} for p in self.learning}, **league}
        for i, opponent in enumerate(opponents):
            if opponent is None or opponent in (LATEST, SNAPSHOT):
                continue
            for unit in league:
                members = self.units[unit].seats
                seats = [a for a in self.agents if a not in members] or members
                self.check_player(opponent, seats, f"{where}: curriculum[{i}] opponent")
        return league

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

    def tracks(self, unit: str) -> int:
        """Trajectories interleaved in the unit's buffer: one per env copy and group member."""
        return self.envs_per_actor * max(1, len(self.units[unit].members))

    def shard_capacity(self, unit: AgentPlan) -> int:
        """Rows of each of the unit's buffer shards: its capacity split over the actors."""
        return allocation.shard_capacity(self, unit)

    def learner_hosts(self) -> list[list[str]]:
        """The learning units of each learner host process (RunConfig.learner_processes, by default one per
        core beyond the actor's), dealt out in turn."""
        units = [p.agent for p in self.learning]
        wanted = self.config.learner_processes or max(1, usable_cores() - 1)  # a core for the actor
        hosts = max(1, min(len(units), wanted))
        return [units[h::hosts] for h in range(hosts)] if units else []

    def _learner_cores(self, placement: Placement) -> int:
        """Cores the learners take of their own: none inline, else one per learner host process (one Ray actor
        per learning unit with backend="ray", counted wherever it runs)."""
        if placement.inline_learners:
            return 0
        return len(self.learning) if self.config.backend != "shm" else len(self.learner_hosts())

    def torch_threads(self, processes: int) -> int:
        """Torch threads of each of `processes` processes sharing the usable cores (RunConfig.torch_threads)."""
        return self.config.torch_threads or max(1, usable_cores() // max(1, processes))

    def counters(self) -> RunStats:
        """The run's counters (`stats`), which `allocate` creates and `release` removes."""
        if self.stats is None:
            raise RuntimeError("the run's counters are read outside allocate() ... release()")
        return self.stats

    def allocate(self) -> None:
        """Create every learner unit's buffer and slot and the run's counters (owned by this process)."""
        allocation.allocate(self)

    def release(self) -> None:
        """Close and unlink everything `allocate` created; safe to call more than once."""
        allocation.release(self)
