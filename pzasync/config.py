"""Run options, validated before any process starts (docs/reliability.md, invariant 7): every error names the
option at fault."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pzasync.errors import ConfigError
from pzasync.specs import parse_mix
from pzasync.transport.slots import MODES

#: The value of `envs_per_actor`, `env_workers` and `actors` that asks the plan to pick from the core count
#: (autotune.autotune).
AUTO = "auto"
#: RunConfig(envs_per_actor="auto"), and the self-play recipes (pzasync.recipes): the copies chosen by measurement
#: (docs/benchmarks.md, "Why 8 copies"). Env copies amortise forwards on one core, so their number does not
#: follow the core count.
AUTO_ENVS_PER_ACTOR = 8

#: RunConfig.backend values.
BACKENDS: tuple[str, ...] = ("shm", "ray")
#: RunConfig.ray_transport values.
RAY_TRANSPORTS: tuple[str, ...] = ("auto", "object_store")


@dataclass
class RunConfig:
    """Options shared by AsyncRunner and SequentialRunner, so both run the same algorithm from the same seed."""

    #: Seed of the env's first reset, of every learner (seed + agent index) and of every policy's sampling.
    seed: int = 0
    #: How learners publish parameters: "double_buffer" (two copies, readers never wait) or "snapshot" (one copy).
    publish_mode: str = "double_buffer"
    #: Learner updates between two publications of its policy.
    publish_every: int = 10
    #: Ring-buffer capacity per agent, in transitions (off-policy learners). On-policy buffers hold
    #: `onpolicy_buffer_batches` times the learner's batch size.
    buffer_capacity: int = 100_000
    onpolicy_buffer_batches: int = 4
    #: How buffers keep observations (docs/shared-memory.md, Observations stored once): "once", each
    #: observation stored one time and `next_obs` found by reference (about half the memory); "twice", in
    #: `obs` and again in `next_obs` of every row; "auto", once for observations of at least 512 bytes.
    obs_storage: str = "auto"
    #: Updates per agent step for off-policy learners. None: the async learner runs free, as fast as it can;
    #: the sequential runner then uses `sequential_replay_ratio`. With a value, both runners run this schedule.
    replay_ratio: float | None = None
    sequential_replay_ratio: float = 0.25
    #: Under a replay ratio, how many agent steps the actor may run ahead of its learner before it waits.
    max_actor_lead: int = 64
    #: On-policy learners: make the actor wait instead of overwriting unread transitions (reported as wait time).
    backpressure: bool = False
    #: Torch device of every learner ("cpu", "cuda", "cuda:1"); per-agent overrides in `devices`.
    device: str = "cpu"
    devices: dict[str, str] = field(default_factory=dict)
    #: Torch threads per process; None picks max(1, cores // processes).
    torch_threads: int | None = None
    #: Learner host processes of the async runner on shared memory (docs/running.md, Learner hosts): the
    #: learning units are spread over at most this many spawned processes, each updating its learners in
    #: turn, so that torch and the imports are paid once per host rather than once per learner. Every learner
    #: keeps its own model, optimiser, buffer, slot, heartbeat, restart budget and metrics. None: one host per
    #: usable core beyond the actor's (at least one), at most one per learning unit; a value >= the learning
    #: units gives each its own process.
    learner_processes: int | None = None
    #: Env copies the actor steps side by side (docs/running.md, Vectorised acting). Each copy's pending
    #: decisions are grouped by acting agent and answered with one batched forward per agent; copy k gets
    #: seed + k at its first reset. Transitions then carry `track` (which copy, and group member, they
    #: continue) so learners keep each copy's trajectories apart. "auto": AUTO_ENVS_PER_ACTOR.
    envs_per_actor: int | str = 1
    #: Worker processes that step the env copies (0: the actor steps them itself). For envs whose step
    #: dominates: the workers step while the actor runs inference; at most `envs_per_actor`. "auto": the
    #: cores left over, for an env whose step is slow enough to pay (autotune.autotune).
    env_workers: int | str = 0
    #: Actor processes (docs/running.md, Several actors): the async runner runs this one actor in the calling
    #: process and actors - 1 more in spawned processes, each with its own `envs_per_actor` env copies
    #: (actor a's copy k gets seed + a * envs_per_actor + k) and its own buffer shard per learning unit, so no
    #: buffer has two writers; learners read all shards. The sequential runner steps the same
    #: actors * envs_per_actor copies in one actor. Not with a league or backend="ray". "auto": one per
    #: usable core not taken by learner hosts or the evaluator (autotune.autotune).
    actors: int | str = 1
    #: Torch device of the actor's policy copies ("cpu" or "cuda[:i]"): where its batched forwards run.
    actor_device: str = "cpu"
    #: Cut episodes after this many decisions (docs/transitions.md, rule 5); None: episodes end only when the env
    #: ends them.
    max_episode_steps: int | None = None
    #: Check reward conservation (docs/transitions.md, invariant 8) on every episode.
    check_rewards: bool = True
    #: Where metrics, checkpoints and plots go; None: no run directory.
    out_dir: str | None = None
    #: Seconds between periodic checkpoints (0: only at the end).
    checkpoint_every_s: float = 300.0
    #: Seconds to wait for processes to start, stop or answer before giving up on them.
    process_timeout_s: float = 60.0
    #: A learner that crashes (or hangs) is restarted from its checkpoint or its published weights, at most
    #: this many times per agent, waiting `restart_backoff_s` * 2^(restarts so far) first; one more crash
    #: stops the run with LearnerCrashedError.
    max_learner_restarts: int = 3
    restart_backoff_s: float = 1.0
    #: A learner process silent (no heartbeat) for this long is reported as hung, killed and restarted.
    heartbeat_timeout_s: float = 120.0
    #: NaN or inf in an observation or reward: "count" (reported per agent) or "raise".
    nonfinite: str = "count"
    #: Show a live progress display.
    progress: bool = False
    #: Parameter sharing: group name -> member agents (names or fnmatch patterns such as "piston_*"). Each
    #: group gets one learner, one buffer and one slot; its members act with copies of the one policy and
    #: their transitions carry `member` (index in the group) so the learner can tell them apart. Learner
    #: specs and `devices` may name the group. Agents in no group keep their own learner.
    agent_groups: dict[str, list[str]] = field(default_factory=dict)
    #: Every this many agent steps (at the next episode end), keep a copy of each learning agent's acting
    #: policy in `RunResult.snapshots`, so learning curves can be evaluated after the run, outside its timing.
    snapshot_every_steps: int | None = None
    #: Self-play with a league (docs/league.md): learning unit (agent or group) -> opponent mix, e.g.
    #: {"players": {"latest": 0.5, "snapshot": 0.4, "negamax,depth=2": 0.1}}; drawn once per episode. The
    #: key "*" gives the mix of every learning unit not named. A mix may be written "latest=0.5;snapshot=0.5".
    league: dict[str, Any] = field(default_factory=dict)
    #: League snapshot pool: at most this many frozen policies per unit (oldest evicted) ...
    league_pool_size: int = 20
    #: ... one taken every this many of the unit's own decisions (at the next episode start).
    league_snapshot_every: int = 10_000
    #: Which seat of a league unit is the trainee of a non-`latest` game: seat -> relative weight (seats not
    #: named weigh 1), e.g. {"player_1": 4.0} trains the second seat four times as often as the first against
    #: snapshots and players. Empty: uniform over the unit's members.
    league_trainee_weights: dict[str, float] = field(default_factory=dict)
    #: Evaluation while training (docs/running.md): a separate, low-priority process plays each learning
    #: agent's newest published policy, greedily, against this yardstick ("random", "one_ply", "negamax,
    #: depth=2", "perfect", "module:callable" or another run's directory) every `eval_every_s` seconds, for
    #: `eval_episodes` games per agent. The actor never waits for it. None: no evaluator.
    eval_vs: str | None = None
    eval_every_s: float = 30.0
    eval_episodes: int = 100
    #: Where the async runner's learners run (docs/distributed.md): "shm", one local process each on shared
    #: memory; "ray", one Ray actor each on a Ray cluster (`pip install "pzasync[ray]"`). Learners on the
    #: actor's node still use shared memory; those on other nodes get transitions in chunks and publish
    #: policies through Ray's object store.
    backend: str = "shm"
    #: backend="ray": the cluster to join ("auto", "ray://host:10001", "host:6379"); None starts a local Ray
    #: instance for the run (and shuts it down after).
    ray_address: str | None = None
    #: backend="ray": resources each learner actor asks for. CPUs default to 1; GPUs default to 1 for
    #: learners on a "cuda" device and 0 otherwise.
    ray_learner_cpus: float = 1.0
    ray_learner_gpus: float | None = None
    #: backend="ray": custom Ray resources each learner actor asks for, e.g. {"learner_node": 1} to place
    #: learners on the nodes started with `ray start --resources='{"learner_node": 4}'`.
    ray_learner_resources: dict[str, float] = field(default_factory=dict)
    #: backend="ray": "auto" (shared memory for learners on the actor's node, chunks through the object store
    #: for the others) or "object_store" (chunks for every learner: what crossing a node costs, on one machine).
    ray_transport: str = "auto"
    #: backend="ray": run the actor itself (with the monitor and the learner host) as a Ray actor asking for
    #: these custom resources and `ray_actor_cpus` CPUs, e.g. {"actor_node": 1}; {} lets Ray place it
    #: anywhere. None: the actor runs in the calling process.
    ray_actor_resources: dict[str, float] | None = None
    ray_actor_cpus: float = 1.0
    #: backend="ray", learners on another node: transitions per chunk sent to a learner, and chunks in flight
    #: per learner before the actor drops (and counts) new chunks instead of waiting.
    ray_chunk_rows: int = 256
    ray_max_chunks_in_flight: int = 8

    def validate(self) -> RunConfig:
        """Raise ConfigError naming the first bad option; returns self."""
        def bad(name: str, why: str) -> None:
            raise ConfigError(f"option {name}={getattr(self, name)!r}: {why}")

        if not isinstance(self.seed, int):
            bad("seed", "must be an integer")
        if self.publish_mode not in MODES:
            bad("publish_mode", f"must be one of {MODES}")
        for name in ("publish_every", "buffer_capacity", "onpolicy_buffer_batches", "max_actor_lead",
                     "league_pool_size", "league_snapshot_every", "eval_episodes", "envs_per_actor"):
            value = getattr(self, name)
            if name == "envs_per_actor" and value == AUTO:
                continue
            if not isinstance(value, int) or value < 1:
                bad(name, "must be an integer >= 1")
        if self.buffer_capacity < 2:
            bad("buffer_capacity", "must be >= 2")
        from pzasync.transport.buffer import OBS_STORAGE

        if self.obs_storage not in OBS_STORAGE:
            bad("obs_storage", f"must be one of {OBS_STORAGE}")
        for name in ("replay_ratio",):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0):
                bad(name, "must be a positive number of updates per agent step, or None for free running")
        if not (isinstance(self.sequential_replay_ratio, (int, float)) and self.sequential_replay_ratio > 0):
            bad("sequential_replay_ratio", "must be a positive number")
        if self.torch_threads is not None and (not isinstance(self.torch_threads, int) or self.torch_threads < 1):
            bad("torch_threads", "must be an integer >= 1 or None")
        for name in ("max_episode_steps", "snapshot_every_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                bad(name, "must be an integer >= 1 or None")
        for name in ("checkpoint_every_s",):
            if getattr(self, name) < 0:
                bad(name, "must be >= 0")
        if not isinstance(self.league, dict):
            bad("league", "must be a dict of learning agent or group -> opponent mix")

        for unit, mix in self.league.items():
            parse_mix(unit, mix)
        weights = self.league_trainee_weights
        if not isinstance(weights, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and v >= 0 for k, v in weights.items()):
            bad("league_trainee_weights", "must be a dict of seat (agent name) -> weight, a number >= 0")
        if self.eval_vs is not None and (not isinstance(self.eval_vs, str) or not self.eval_vs):
            bad("eval_vs", "must be a yardstick player spec, a run directory, or None")
        for name in ("process_timeout_s", "heartbeat_timeout_s", "eval_every_s"):
            if not getattr(self, name) > 0:
                bad(name, "must be > 0")
        if self.backend not in BACKENDS:
            bad("backend", f"must be one of {BACKENDS}")
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or not self.ray_address):
            bad("ray_address", "must be a Ray cluster address such as 'auto' or 'ray://head:10001', or None")
        if not isinstance(self.ray_learner_cpus, (int, float)) or self.ray_learner_cpus < 0:
            bad("ray_learner_cpus", "must be a number of CPUs >= 0")
        if self.ray_learner_gpus is not None and (not isinstance(self.ray_learner_gpus, (int, float))
                                                  or self.ray_learner_gpus < 0):
            bad("ray_learner_gpus", "must be a number of GPUs >= 0, or None")
        if self.ray_transport not in RAY_TRANSPORTS:
            bad("ray_transport", "must be 'auto' or 'object_store'")
        if not isinstance(self.ray_learner_resources, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
                for k, v in self.ray_learner_resources.items()):
            bad("ray_learner_resources", "must be a dict of resource name -> amount >= 0")
        if self.ray_actor_resources is not None:
            if self.backend != "ray":
                bad("ray_actor_resources", "places the actor on a Ray cluster: it needs backend='ray'")
            if not isinstance(self.ray_actor_resources, dict) or not all(
                    isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
                    for k, v in self.ray_actor_resources.items()):
                bad("ray_actor_resources", "must be a dict of resource name -> amount >= 0, or None")
        if not isinstance(self.ray_actor_cpus, (int, float)) or self.ray_actor_cpus < 0:
            bad("ray_actor_cpus", "must be a number of CPUs >= 0")
        for name in ("ray_chunk_rows", "ray_max_chunks_in_flight"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                bad(name, "must be an integer >= 1")
        if not isinstance(self.max_learner_restarts, int) or self.max_learner_restarts < 0:
            bad("max_learner_restarts", "must be an integer >= 0")
        if self.restart_backoff_s < 0:
            bad("restart_backoff_s", "must be >= 0")
        if self.nonfinite not in ("count", "raise"):
            bad("nonfinite", "must be 'count' or 'raise'")
        if not isinstance(self.agent_groups, dict):
            bad("agent_groups", "must be a dict of group name -> list of agent names or patterns")
        for group, members in self.agent_groups.items():
            if not isinstance(group, str) or not group or group == "*":
                raise ConfigError(f"option agent_groups: group name {group!r} must be a non-empty string other than '*'")
            if isinstance(members, str) or not members or not all(isinstance(m, str) for m in members):
                raise ConfigError(f"option agent_groups: group {group!r} needs a non-empty list of agent names or "
                                  f"patterns, got {members!r}")
        if self.learner_processes is not None:
            if not isinstance(self.learner_processes, int) or isinstance(self.learner_processes, bool) \
                    or self.learner_processes < 1:
                bad("learner_processes", "must be an integer >= 1, or None for one per usable core beyond the actor's")
            if self.backend != "shm":
                bad("learner_processes", f"groups learners into local processes on shared memory; with "
                                         f"backend={self.backend!r} every learner unit is its own Ray actor")
        if self.env_workers != AUTO and (not isinstance(self.env_workers, int) or isinstance(self.env_workers, bool)
                                         or self.env_workers < 0):
            bad("env_workers", "must be an integer >= 0 (0: the actor steps its env copies itself) or 'auto'")
        if AUTO not in (self.env_workers, self.envs_per_actor) and self.env_workers > self.envs_per_actor:
            bad("env_workers", f"must be at most envs_per_actor={self.envs_per_actor}: each worker steps at least "
                               f"one env copy")
        if self.actors != AUTO:
            if not isinstance(self.actors, int) or isinstance(self.actors, bool) or self.actors < 1:
                bad("actors", "must be an integer >= 1 or 'auto'")
            if self.actors > 1 and self.backend != "shm":
                bad("actors", f"several actor processes write buffer shards in local shared memory; with "
                              f"backend={self.backend!r} use actors=1")
            if self.actors > 1 and self.league:
                bad("actors", "a league keeps its snapshot pool and ratings in one actor; use actors=1 with a "
                              "league, or more envs_per_actor")
        if not isinstance(self.actor_device, str) or not (self.actor_device == "cpu"
                                                          or self.actor_device.startswith("cuda")):
            bad("actor_device", "must be 'cpu' or 'cuda[:N]'")
        for agent, device in {"*": self.device, **self.devices}.items():
            if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda") or device == "mps"):
                raise ConfigError(f"option device for agent {agent!r}: {device!r} is not 'cpu', 'cuda[:N]' or 'mps'")
        return self

    def device_for(self, agent: str) -> str:
        return self.devices.get(agent, self.device)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown run option(s) {unknown}; known options: {sorted(known)}")
        return cls(**values).validate()
