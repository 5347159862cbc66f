"""A run's shared memory: how much it takes, whether it fits in free /dev/shm, and creating and removing it.

A checked `RunPlan` fixes every size: per learning unit a buffer (one shard per actor process, each the unit's
capacity split over the actors) and a policy slot, the run's counters, and, with env workers, each actor's
observation slots. `shm_bytes` adds them up and `check_budget` refuses, before any process starts, a run
that would not fit (docs/reliability.md, invariant 7). `allocate` then creates the segments, owned by the
calling process, and `release` closes and unlinks them. Every function takes the plan; it is typed `Any`
because the plan module imports this one.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from pzasync.transport.buffer import SharedRingBuffer
from pzasync.transport.obs_slots import ObservationSlots
from pzasync.transport.shards import ShardedBuffer
from pzasync.transport.shm import check_fits, free_shm_bytes
from pzasync.transport.slots import PolicySlot
from pzasync.transport.stats import NOT_LEARNING, STATUS, RunStats

#: RunConfig(buffer_capacity="auto"): each off-policy learner's buffer holds this many transitions, unless
#: together they would take more than AUTO_BUFFER_BYTES or half of free /dev/shm (`fit_buffers`).
AUTO_BUFFER_TRANSITIONS = 100_000
AUTO_BUFFER_BYTES = 4 << 30


def fit_buffers(plan: Any) -> str | None:
    """buffer_capacity="auto": give every off-policy learning unit an equal share of the byte budget, in rows of
    its own size, at most AUTO_BUFFER_TRANSITIONS. Returns what was cut, for the run's start-up lines (None
    where every buffer keeps AUTO_BUFFER_TRANSITIONS)."""
    units = [p for p in plan.learning if not p.learner_cls.on_policy]
    if not units:
        return None
    budget = min(AUTO_BUFFER_BYTES, free_shm_bytes() // 2)
    cut = []
    for unit in units:
        probe = 10_000
        per_row = SharedRingBuffer.nbytes_for(unit.layout, probe, buffer_extras(plan, unit),
                                              obs_storage=plan.config.obs_storage,
                                              tracks=plan.tracks(unit.agent)) / probe
        unit.capacity = int(max(2, min(AUTO_BUFFER_TRANSITIONS, budget // len(units) // per_row)))
        if unit.capacity < AUTO_BUFFER_TRANSITIONS:
            cut.append(f"{unit.capacity:,} transitions for {unit.agent} ({per_row:,.0f} bytes a row)")
    if not cut:
        return None
    size = f"{budget / 2**30:.1f} GiB" if budget >= 2**30 else f"{budget / 2**20:,.0f} MiB"
    return (f"{', '.join(cut)}: an equal share for each of the {len(units)} off-policy learner(s) of {size} "
            f"(half of free /dev/shm, at most {AUTO_BUFFER_BYTES / 2**30:.0f} GiB); --buffer-capacity N chooses")


def shard_capacity(plan: Any, unit: Any) -> int:
    """Rows of each of the unit's buffer shards: its capacity split over the actors."""
    return max(2, -(-unit.capacity // plan.actors))


def buffer_extras(plan: Any, unit: Any) -> dict[str, str]:
    """The unit's buffer columns beyond the transition: its learner's extras, `member` in a group, and
    `track` when several env copies (of one actor or of several) write into it."""
    extras = dict(unit.learner_cls.extra_fields(unit.options))
    if unit.members:
        extras["member"] = "int16"
    if plan.envs_per_actor * plan.actors > 1:
        extras["track"] = "int32"
    return extras


def buffer_bytes(plan: Any, unit: Any) -> int:
    """Bytes of the unit's buffer, all its shards."""
    return plan.actors * SharedRingBuffer.nbytes_for(
        unit.layout, shard_capacity(plan, unit), buffer_extras(plan, unit), obs_storage=plan.config.obs_storage,
        tracks=plan.tracks(unit.agent))


def env_obs_bytes(plan: Any) -> int:
    """Bytes of the actors' observation slots (obs_slots.py), which each actor creates with env workers."""
    if not plan.config.env_workers:
        return 0
    return plan.actors * ObservationSlots.nbytes({a: p.layout for a, p in plan.agents.items()}, plan.envs_per_actor,
                                                 per_agent=plan.env_api == "parallel")


def shm_bytes(plan: Any) -> int:
    """Bytes of the run's buffers, slots (two copies of each policy) and observation slots."""
    return sum(buffer_bytes(plan, p) + 2 * 4 * p.policy_floats + 4096 for p in plan.learning) + env_obs_bytes(plan)


def check_budget(plan: Any) -> None:
    """Refuse (InsufficientSharedMemoryError, naming the largest buffer) a run that would not fit in free
    /dev/shm."""
    obs = env_obs_bytes(plan)
    largest = max(plan.learning, default=None, key=lambda p: buffer_bytes(plan, p))
    check_fits(f"the run's buffers and slots ({len(plan.learning)} learners"
               + (f"; env workers' observation slots {obs:,} bytes" if obs else "")
               + (f"; the largest, for {largest.agent!r}, holds {largest.capacity:,} transitions"
                  if largest is not None else "") + ")", shm_bytes(plan))


def allocate(plan: Any) -> None:
    """Create every learner unit's buffer and slot and the run's counters (owned by this process), and set
    `plan.stats` and `plan.shm_in_use`; on any failure remove what was created."""
    try:
        names = list(plan.agents) + list(plan.groups)
        plan.stats = RunStats.create(plan.run_id, names, plan.actors)
        # An env set's copies (and the evaluator's) read the curriculum stage from the counters at each reset.
        plan.env_spec = plan.env_spec.with_stage(plan.stats)
        for unit in plan.units.values():
            if not unit.learns:
                plan.stats.set(unit.agent, STATUS, NOT_LEARNING)
                continue
            label = f"a{unit.index}" if not unit.members else f"g{unit.index}"
            shards = _create_shards(plan, unit, buffer_extras(plan, unit), f"buf-{label}")
            unit.buffer = shards[0] if plan.actors == 1 else ShardedBuffer(shards)
            unit.slot = PolicySlot.create(unit.policy_floats, plan.config.publish_mode, run_id=plan.run_id,
                                          label=f"slot-{label}")
        for p in plan.agents.values():
            if p.unit != p.agent:
                p.buffer, p.slot = plan.units[p.unit].buffer, plan.units[p.unit].slot
                if not p.learns:
                    plan.stats.set(p.agent, STATUS, NOT_LEARNING)
        plan.shm_in_use = plan.stats._segment.size + plan.env_obs_bytes + sum(
            u.buffer.nbytes + u.slot.nbytes for u in plan.units.values() if u.buffer is not None)
    except BaseException:
        release(plan)
        raise


def _create_shards(plan: Any, unit: Any, extras: dict[str, str], label: str) -> list[SharedRingBuffer]:
    """The unit's buffer, one shard per actor; if one cannot be created, those already made are removed."""
    shards: list[SharedRingBuffer] = []
    try:
        for k in range(plan.actors):
            shards.append(SharedRingBuffer.create(
                unit.layout, shard_capacity(plan, unit), extras, run_id=plan.run_id,
                label=label + (f"-s{k}" if plan.actors > 1 else ""), obs_storage=plan.config.obs_storage,
                tracks=plan.tracks(unit.agent)))
    except BaseException:
        for shard in shards:
            shard.close()
            shard.unlink()
        raise
    return shards


def detached(plan: Any) -> Any:
    """A copy of an allocated plan without its shared memory (no buffers, slots or counters), to `allocate`
    again somewhere else: another node's copy of the run's memory (backends/ray/sampling.py)."""
    clone = copy.copy(plan)
    agents = {a: dataclasses.replace(p, buffer=None, slot=None) for a, p in plan.agents.items()}
    clone.agents = agents
    clone.units = {u: agents[u] if plan.agents.get(u) is p else dataclasses.replace(p, buffer=None, slot=None)
                   for u, p in plan.units.items()}
    clone.learning = [clone.units[p.agent] for p in plan.learning]
    clone.stats = None
    clone.shm_in_use = 0
    clone.env_spec = plan.env_spec.with_stage(None)
    return clone


def release(plan: Any) -> None:
    """Close and unlink everything `allocate` created; safe to call more than once."""
    for unit in plan.units.values():
        for resource in (unit.buffer, unit.slot):
            if resource is not None:
                resource.close()
                resource.unlink()
    for p in [*plan.units.values(), *plan.agents.values()]:
        p.buffer = p.slot = None
    if plan.stats is not None:
        # What is made of the env afterwards (the final evaluation) plays the stage the run reached.
        plan.env_spec = plan.env_spec.with_stage(plan.stats.curriculum_stage if not plan.stats.closed else None)
        plan.stats.close()
        plan.stats.unlink()
        plan.stats = None
