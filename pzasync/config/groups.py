"""The run options, declared once each (`option`) in groups: what a run is (`RunOptions`), how it acts, learns,
plays its league, is evaluated, survives failures, and runs on Ray. `RunConfig` (config/run.py) combines them
into one flat set of options; each group is a table of the TOML file (`[acting] envs_per_actor = 8`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from pzasync.config.declare import NONE, Check, OptionGroup, key_values, option
from pzasync.core.environments import ENV_APIS
from pzasync.errors import ConfigError
from pzasync.specs import parse_mix
from pzasync.transport.buffer import OBS_STORAGE
from pzasync.transport.slots import MODES

#: The value of `envs_per_actor`, `env_workers` and `actors` that asks the plan to pick from the core count
#: (autotune.autotune).
AUTO = "auto"
#: RunConfig(envs_per_actor="auto"), and the self-play recipes (pzasync.recipes): the copies chosen by measurement
#: (docs/benchmarks.md#connect_four). Env copies amortise forwards on one core, so their number does not
#: follow the core count.
AUTO_ENVS_PER_ACTOR = 8

#: RunConfig.eval_scoring values: how a trained result is scored (pzasync/evaluation/scoring.py, docs/league.md
#: "Scoring"): each seat against yardsticks, the whole team's summed return, or each side (agents sharing a name
#: prefix) against the others.
SCORING_MODES: tuple[str, ...] = ("seats", "team", "sides")

#: RunConfig.backend values.
BACKENDS: tuple[str, ...] = ("shm", "ray")
#: RunConfig.ray_transport values.
RAY_TRANSPORTS: tuple[str, ...] = ("auto", "object_store")

#: RunConfig.tracker's names (pzasync/runtime/trackers: each name's module, imported only when a run names it);
#: "module:Class" names a tracker of the user's own.
TRACKERS: tuple[str, ...] = ("tensorboard", "wandb", "mlflow")

COUNT = Check(int, ge=1)
SECONDS = Check(float, gt=0)
RESOURCES = Check(dict, items=Check(float, ge=0), why="a dict of resource name -> amount >= 0")


def chosen(value: int | str, option: str) -> int:
    """The number an "auto"-able count option (`actors`, `envs_per_actor`, `env_workers`) holds once the run's plan
    has chosen it (runtime/autotune.py); still "auto" there is a bug, named here."""
    if isinstance(value, str):
        raise ValueError(f"option {option}={value!r} read as a number before the run's plan chose one")
    return value


def _is_device(name: Any) -> bool:
    return name == "cpu" or name == "mps" or name.startswith("cuda")


def _device(agent: str) -> Any:
    def check(device: Any) -> None:
        if not isinstance(device, str) or not _is_device(device):
            raise ConfigError(f"option device for agent {agent!r}: {device!r} is not 'cpu', 'cuda[:N]' or 'mps'")
    return check


def _devices(devices: dict[str, Any]) -> None:
    for agent, device in devices.items():
        _device(agent)(device)


def _groups(groups: dict[Any, Any]) -> None:
    for group, members in groups.items():
        if not isinstance(group, str) or not group or group == "*":
            raise ConfigError(f"option agent_groups: group name {group!r} must be a non-empty string other than '*'")
        if isinstance(members, str) or not members or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"option agent_groups: group {group!r} needs a non-empty list of agent names or "
                              f"patterns, got {members!r}")


def _league(league: dict[str, Any]) -> None:
    for unit, mix in league.items():
        parse_mix(unit, mix)


def tracker_names(value: str | Sequence[str]) -> tuple[str, ...]:
    """RunConfig.tracker as a tuple of names: one text may hold several, comma-separated ("wandb,mlflow");
    each name once, in the order given."""
    names: list[Any] = []
    for part in value.split(",") if isinstance(value, str) else value:
        name = part.strip() if isinstance(part, str) else part
        if name != "" and name not in names:
            names.append(name)
    return tuple(names)


def _tracker_refusal(value: str | Sequence[str]) -> str | None:
    """Why a tracker name is refused: neither a known tracker nor "module:Class"."""
    for name in tracker_names(value):
        if not isinstance(name, str) or not (name in TRACKERS or (":" in name and all(name.partition(":")[::2]))):
            return (f"must name trackers among {', '.join(map(repr, TRACKERS))} or 'module:Class', got "
                    f"{name!r}")
    return None


def parse_trackers(text: str) -> tuple[str, ...]:
    """--tracker NAME[,NAME]: the names; `none` -> () (TensorBoard alone, where it is installed)."""
    return () if text.strip() == NONE else tracker_names(text)


def parse_groups(items: tuple[str, ...]) -> dict[str, list[str]]:
    """Repeated NAME=PATTERN[,PATTERN...] texts -> agent_groups (patterns as fnmatch, e.g. piston_*)."""
    groups: dict[str, list[str]] = {}
    for item in items:
        name, sep, patterns = item.partition("=")
        name, members = name.strip(), [p.strip() for p in patterns.split(",") if p.strip()]
        if not sep or not name or not members:
            raise ConfigError(f"--group {item!r}: expected NAME=PATTERN[,PATTERN...], e.g. pistons=piston_*")
        if name in groups:
            raise ConfigError(f"--group {name!r} is given twice")
        groups[name] = members
    return groups


def parse_league(mix: str) -> dict[str, Any]:
    """--league MIX -> {"*": MIX}: the mix of every learning unit; `none` -> {} (no league)."""
    return {} if mix == NONE else {"*": mix}


@dataclass(kw_only=True)
class RunOptions(OptionGroup):
    """What the run is: its seed, where it writes, what it shows and keeps."""

    TABLE = "run"
    TITLE = "Run options"

    seed: int = option(0, "Seed of the env's first reset, of every learner (seed + agent index) and of every "
                          "policy's sampling.", Check(int))
    out_dir: str | None = option(None, "Where metrics, checkpoints and plots go: the parent folder of the run "
                                       "directory. None: no run directory.",
                                 Check((str, os.PathLike), optional=True, what="a folder"),
                                 alias="--out", metavar="DIR")
    progress: bool = option(False, "Show a live progress display.", Check(bool))
    snapshot_every_steps: int | None = option(
        None, "Every this many agent steps (at the next episode end), keep a copy of each learning agent's acting "
              "policy in `RunResult.snapshots` and, with a run directory, in its snapshots/ (`pzasync eval RUN "
              "--snapshot STEPS` scores one), so learning curves can be evaluated after the run, outside its timing.",
        Check(int, ge=1, optional=True), metavar="N")
    tracker: Sequence[str] = option(
        (), "Experiment trackers that get the run's learner metrics, evaluation rows, parameters and plots, beside "
            "its run directory (docs/running.md, \"Trackers\"): \"wandb\" (Weights & Biases: offline, in the run "
            "directory, unless WANDB_MODE or an API key says otherwise), \"mlflow\" (a file store in the run "
            "directory unless MLFLOW_TRACKING_URI is set), \"tensorboard\", or \"module:Class\" (your own); "
            "several as a list or comma-separated. TensorBoard is written whenever its extra is installed; naming "
            "it makes that extra required. Each needs its extra (pip install \"pzasync[wandb]\"), checked before "
            "the run starts; a tracker that fails later is one warning, and the run goes on. Needs `out_dir`.",
        Check((str, list, tuple), why="tracker names ('wandb', 'mlflow', 'tensorboard' or 'module:Class'), as a "
                                      "list or one comma-separated text"),
        metavar="NAME[,NAME]", parse=parse_trackers, validator=_tracker_refusal)

    def __post_init__(self) -> None:
        if isinstance(self.tracker, (str, list, tuple)):  # anything else is refused by `validate`
            self.tracker = tracker_names(self.tracker)


@dataclass(kw_only=True)
class ActingOptions(OptionGroup):
    """How the actor plays: env copies, worker and actor processes, its device, episode rules."""

    TABLE = "acting"
    TITLE = "Acting options"

    env_api: str = option(
        AUTO, "Which of the env's APIs the actor steps (docs/transitions.md, \"The parallel path\"): \"aec\", one "
              "decision at a time through agent_iter(); \"parallel\", every live agent of a cycle at once through "
              "the parallel API, answered with one batched forward per policy; \"auto\": \"parallel\" for an env "
              "that is simultaneous-move underneath (a ParallelEnv, a module with parallel_env(), an AEC env made "
              "by parallel_to_aec), \"aec\" for every other env and for remote envs.",
        Check(str, choices=ENV_APIS, why="'auto', 'aec' or 'parallel'"), metavar="auto|aec|parallel")
    env_set: str | dict | None = option(
        None, "An env set (docs/running.md, \"Env sets\"): a TOML file whose [envset] table names several envs and "
              "their structure: a train split (weighted), a test split (what `pzasync eval` scores), a prior (env "
              "args drawn per episode) and a curriculum (steps held until the evaluator's figure passes a "
              "threshold). The run plays it instead of an env id; every env of the set must have the same agents "
              "and spaces. In a file or from Python, the [envset] table itself may be given.",
        Check((str, os.PathLike, dict), optional=True, what="a TOML file of an env set, or its table"),
        metavar="FILE", validator=lambda v: None if isinstance(v, dict) or os.path.isfile(v) else
        "must be an existing TOML file (docs/running.md, \"Env sets\")")
    envs_per_actor: int | str = option(
        1, "Env copies the actor steps side by side (docs/running.md, Vectorised acting). Each copy's pending "
           "decisions are grouped by acting agent and answered with one batched forward per agent; copy k gets "
           "seed + k at its first reset. Transitions then carry `track` (which copy, and group member, they "
           "continue) so learners keep each copy's trajectories apart. \"auto\": AUTO_ENVS_PER_ACTOR (8).",
        Check(int, ge=1, also=(AUTO,)), metavar="N|auto")
    env_workers: int | str = option(
        0, "Worker processes that step the env copies (0: the actor steps them itself). For envs whose step "
           "dominates: the workers step while the actor runs inference; at most `envs_per_actor`. \"auto\": the "
           "cores left over, for an env whose step is slow enough to pay (autotune.autotune).",
        Check(int, ge=0, also=(AUTO,),
              why="an integer >= 0 (0: the actor steps its env copies itself) or 'auto'"), metavar="N|auto")
    actors: int | str = option(
        1, "Actor processes (docs/running.md, Several actors): the async runner runs this one actor in the "
           "calling process and actors - 1 more in spawned processes, each with its own `envs_per_actor` env "
           "copies (actor a's copy k gets seed + a * envs_per_actor + k) and its own buffer shard per learning "
           "unit, so no buffer has two writers; learners read all shards. With backend=\"ray\" actors 1..M-1 are Ray "
           "actors on any node (docs/distributed.md). The sequential runner steps the same "
           "actors * envs_per_actor copies in one actor. Not with a league. \"auto\": one per "
           "usable core not taken by learner hosts or the evaluator (autotune.autotune).",
        Check(int, ge=1, also=(AUTO,)), metavar="N|auto")
    actor_device: str = option("cpu", "Torch device of the actor's policy copies (\"cpu\" or \"cuda[:N]\"): where "
                                      "its batched forwards run.",
                               Check(str, test=lambda d: d == "cpu" or d.startswith("cuda"), why="'cpu' or 'cuda[:N]'"),
                               metavar="DEVICE")
    max_episode_steps: int | None = option(
        None, "Cut episodes after this many decisions (docs/transitions.md, rule 5). None: episodes end only when "
              "the env ends them.", Check(int, ge=1, optional=True), metavar="N")
    check_rewards: bool = option(True, "Check reward conservation (docs/transitions.md, invariant 8) on every "
                                       "episode.", Check(bool))
    nonfinite: str = option("count", "NaN or inf in an observation or reward: \"count\" (reported per agent) or "
                                     "\"raise\".", Check(str, choices=("count", "raise"), why="'count' or 'raise'"))


@dataclass(kw_only=True)
class LearningOptions(OptionGroup):
    """How learners learn and publish: schedules, buffers, devices, processes, parameter sharing."""

    TABLE = "learning"
    TITLE = "Learning options"

    publish_mode: str = option("double_buffer", "How learners publish parameters: \"double_buffer\" (two copies, "
                                                "readers never wait) or \"snapshot\" (one copy).",
                               Check(str, choices=MODES), alias="--publish")
    publish_every: int = option(10, "Learner updates between two publications of its policy (off-policy learners; "
                                    "on-policy learners publish after every update).", COUNT, metavar="N")
    buffer_capacity: int | str = option(
        AUTO, "Ring-buffer capacity per learner (an agent, or an agent group), in transitions (off-policy learners). "
              "\"auto\": AUTO_BUFFER_TRANSITIONS (100,000), or fewer where the off-policy learners' buffers "
              "together would take more than AUTO_BUFFER_BYTES (4 GiB) or half of free /dev/shm "
              "(runtime/allocation.py: large observations such as raw frames get fewer rows, not a refusal).",
        Check(int, ge=2, also=(AUTO,), why="an integer >= 2 or 'auto'"), metavar="N|auto")
    onpolicy_buffer_batches: int = option(4, "Ring-buffer capacity of on-policy learners, in learner batches.",
                                          COUNT, metavar="N")
    obs_storage: str = option(
        "auto", "How buffers keep observations (docs/shared-memory.md, Observations stored once): \"once\", each "
                "observation stored one time and `next_obs` found by reference (about half the memory); \"twice\", "
                "in `obs` and again in `next_obs` of every row; \"auto\", once for observations of at least 512 "
                "bytes.", Check(str, choices=OBS_STORAGE))
    replay_ratio: float | None = option(
        None, "Updates per agent step for off-policy learners. None: the async learner runs free, as fast as it "
              "can; the sequential runner then uses `sequential_replay_ratio`. With a value, both runners run this "
              "schedule.", Check(float, gt=0, finite=True, optional=True,
                                 why="a positive number of updates per agent step, or None for free running"),
        metavar="R")
    sequential_replay_ratio: float = option(0.25, "The sequential runner's updates per agent step when "
                                                  "`replay_ratio` is None.",
                                            Check(float, gt=0, why="a positive number"), metavar="R")
    max_actor_lead: int = option(64, "Under a replay ratio, how many agent steps the actor may run ahead of its "
                                     "learner before it waits.", COUNT, metavar="N")
    backpressure: bool = option(False, "On-policy learners: make the actor wait instead of overwriting unread "
                                       "transitions (reported as wait time).", Check(bool))
    device: str = option("cpu", "Torch device of every learner (\"cpu\", \"cuda\", \"cuda:1\", \"mps\"); per-agent "
                                "overrides in `devices`.", Check(str), metavar="DEVICE", validator=_device("*"))
    devices: dict[str, str] = option({}, "Per-agent (or group) learner devices, overriding `device`.",
                                     Check(dict, items=Check(str), why="a dict of agent -> device"),
                                     metavar="AGENT=DEVICE", multiple=True,
                                     parse=key_values("--devices", "AGENT=DEVICE"), validator=_devices)
    torch_threads: int | None = option(None, "Torch threads per process. None picks max(1, cores // processes).",
                                       Check(int, ge=1, optional=True), metavar="N")
    learner_processes: int | None = option(
        None, "Learner host processes of the async runner on shared memory (docs/running.md, Learner hosts): the "
              "learning units are spread over at most this many spawned processes, each updating its learners in "
              "turn, so that torch and the imports are paid once per host rather than once per learner. Every "
              "learner keeps its own model, optimiser, buffer, slot, heartbeat, restart budget and metrics. None: "
              "one host per usable core beyond the actor's (at least one), at most one per learning unit; a value "
              ">= the learning units gives each its own process.",
        Check(int, ge=1, optional=True,
              why="an integer >= 1, or None for one per usable core beyond the actor's"), metavar="N")
    dataset: str | None = option(
        None, "Recorded transitions (a directory written by `pzasync rollout ENV --record PATH`; docs/running.md, "
              "\"Recorded data\") loaded by every learning unit's learner, for its agents, before the actor starts: "
              "`bc` learns only from them, `dqn` samples them beside its buffer's rows; a learner that cannot use "
              "them (on-policy `ppo`, `mappo`) is refused. None: no recorded data.",
        Check((str, os.PathLike), optional=True, what="a dataset directory"), metavar="PATH")
    agent_groups: dict[str, list[str]] = option(
        {}, "Parameter sharing: group name -> member agents (names or fnmatch patterns such as \"piston_*\"). Each "
            "group gets one learner, one buffer and one slot; its members act with copies of the one policy and "
            "their transitions carry `member` (index in the group) so the learner can tell them apart. Learner "
            "specs and `devices` may name the group. Agents in no group keep their own learner.",
        Check(dict, why="a dict of group name -> list of agent names or patterns"), alias="--group",
        metavar="NAME=PATTERN[,PATTERN]", multiple=True, parse=parse_groups, validator=_groups)


@dataclass(kw_only=True)
class LeagueOptions(OptionGroup):
    """Self-play with a league (docs/league.md): opponent mixes, the snapshot pool, the trainee seats."""

    TABLE = "league"
    TITLE = "League options"

    league: dict[str, Any] = option(
        {}, "Self-play with a league (docs/league.md): learning unit (agent or group) -> opponent mix, e.g. "
            "{\"players\": {\"latest\": 0.5, \"snapshot\": 0.4, \"negamax,depth=2\": 0.1}}; drawn once per episode. "
            "The key \"*\" gives the mix of every learning unit not named. A mix may be written "
            "\"latest=0.5;snapshot=0.5\". On the command line: one MIX for every unit, or 'none'.",
        Check(dict, why="a dict of learning agent or group -> opponent mix"), metavar="MIX", parse=parse_league,
        validator=_league)
    league_pool_size: int = option(20, "League snapshot pool: at most this many frozen policies per unit (oldest "
                                       "evicted).", COUNT, metavar="N")
    league_snapshot_every: int = option(10_000, "A league snapshot is taken every this many of the unit's own "
                                                "decisions (at the next episode start).", COUNT, metavar="N")
    league_trainee_weights: dict[str, float] = option(
        {}, "Which seat of a league unit is the trainee of a non-`latest` game: seat -> relative weight (seats not "
            "named weigh 1), e.g. {\"player_1\": 4.0} trains the second seat four times as often as the first "
            "against snapshots and players. Empty: uniform over the unit's members.",
        Check(dict, items=Check(float, ge=0, finite=True),
              why="a dict of seat (agent name) -> weight, a number >= 0"),
        alias="--league-trainee", metavar="SEAT=WEIGHT", multiple=True, parse=key_values("--league-trainee",
                                                                                          "SEAT=WEIGHT"))


@dataclass(kw_only=True)
class EvaluationOptions(OptionGroup):
    """Evaluation while training, in a separate low-priority process."""

    TABLE = "evaluation"
    TITLE = "Evaluation options"

    eval_vs: str | None = option(
        None, "Evaluation while training (docs/running.md): a separate, low-priority process plays each learning "
              "agent's newest published policy, greedily, against this yardstick (\"random\", \"one_ply\", "
              "\"negamax,depth=2\", \"perfect\", \"module:callable\" or another run's directory) every "
              "`eval_every_s` seconds, for `eval_episodes` games per agent. The actor never waits for it. None: no "
              "evaluator.", Check(str, optional=True, test=bool,
                                  why="a yardstick player spec, a run directory, or None"),
        alias="--vs", metavar="PLAYER")
    eval_every_s: float = option(30.0, "Seconds between two evaluations while training.", SECONDS,
                                 alias="--eval-every", metavar="SECONDS")
    eval_episodes: int = option(100, "Games per scored unit (seat, side or team) in each evaluation while training; "
                                     "fewer where they would take longer than `eval_every_s` (long games of many "
                                     "agents).", COUNT,
                                metavar="N")
    eval_scoring: str | None = option(
        None, "How evaluation scores the policies (docs/league.md, \"Scoring\"): \"seats\" (each learning seat "
              "against the yardstick), \"team\" (every seat its own policy, scored by the team's summed return) "
              "or \"sides\" (each side, agents sharing a name prefix, against the other sides played by the "
              "yardstick). None: the env's recipe's, else read from the env.",
        Check(str, optional=True, choices=SCORING_MODES, why="'seats', 'team', 'sides' or None"),
        alias="--scoring", metavar="MODE")


@dataclass(kw_only=True)
class ReliabilityOptions(OptionGroup):
    """Checkpoints, timeouts, and restarting learners that crash or hang (docs/reliability.md)."""

    TABLE = "reliability"
    TITLE = "Reliability options"

    checkpoint_every_s: float = option(300.0, "Seconds between periodic checkpoints (0: only at the end).",
                                       Check(float, ge=0), metavar="SECONDS")
    process_timeout_s: float = option(60.0, "Seconds to wait for processes to start, stop or answer before giving "
                                            "up on them.", SECONDS, metavar="SECONDS")
    max_learner_restarts: int = option(
        3, "A learner that crashes (or hangs) is restarted from its checkpoint or its published weights, at most "
           "this many times per agent, waiting `restart_backoff_s` * 2^(restarts so far) first; one more crash "
           "stops the run with LearnerCrashedError.", Check(int, ge=0), metavar="N")
    restart_backoff_s: float = option(1.0, "Seconds to wait before a learner's first restart, doubled at each "
                                           "further restart of the same learner.", Check(float, ge=0),
                                      metavar="SECONDS")
    heartbeat_timeout_s: float = option(120.0, "A learner process silent (no heartbeat) for this long is reported "
                                               "as hung, killed and restarted (while it starts, the longer of this and "
                                               "`process_timeout_s`).", SECONDS, metavar="SECONDS")


@dataclass(kw_only=True)
class RayOptions(OptionGroup):
    """Where the async runner's learners run: local processes, or Ray actors on a cluster (docs/distributed.md)."""

    TABLE = "ray"
    TITLE = "Backend and Ray options"

    backend: str = option(
        "shm", "Where the async runner's learners run (docs/distributed.md): \"shm\", one local process each on "
               "shared memory; \"ray\", one Ray actor each on a Ray cluster (`pip install \"pzasync[ray]\"`). "
               "Learners on the actor's node still use shared memory; those on other nodes get transitions in "
               "chunks and publish policies through Ray's object store.", Check(str, choices=BACKENDS))
    ray_address: str | None = option(
        None, "backend=\"ray\": the cluster to join (\"auto\", \"ray://host:10001\", \"host:6379\"). None starts a "
              "local Ray instance for the run (and shuts it down after).",
        Check(str, optional=True, test=bool,
              why="a Ray cluster address such as 'auto' or 'ray://head:10001', or None"), metavar="ADDRESS")
    ray_learner_cpus: float = option(1.0, "backend=\"ray\": CPUs each learner actor asks for.",
                                     Check(float, ge=0, what="a number of CPUs"), metavar="N")
    ray_learner_gpus: float | None = option(
        None, "backend=\"ray\": GPUs each learner actor asks for. None: 1 for learners on a \"cuda\" device, 0 "
              "otherwise.", Check(float, ge=0, optional=True, what="a number of GPUs"), metavar="N")
    ray_learner_resources: dict[str, float] = option(
        {}, "backend=\"ray\": custom Ray resources each learner actor asks for, e.g. {\"learner_node\": 1} to place "
            "learners on the nodes started with `ray start --resources='{\"learner_node\": 4}'`.", RESOURCES,
        metavar="NAME=AMOUNT", multiple=True, parse=key_values("--ray-learner-resources", "NAME=AMOUNT"))
    ray_transport: str = option(
        "auto", "backend=\"ray\": \"auto\" (shared memory for learners on the actor's node, chunks through the "
                "object store for the others) or \"object_store\" (chunks for every learner: what crossing a node "
                "costs, on one machine).", Check(str, choices=RAY_TRANSPORTS, why="'auto' or 'object_store'"))
    ray_actor_resources: dict[str, float] | None = option(
        None, "backend=\"ray\": run the actor itself (with the monitor and the learner host) as a Ray actor asking "
              "for these custom resources and `ray_actor_cpus` CPUs, e.g. {\"actor_node\": 1}; {} lets Ray place "
              "it anywhere. None: the actor runs in the calling process.",
        Check(dict, optional=True, items=Check(float, ge=0),
              why="a dict of resource name -> amount >= 0, or None"),
        metavar="NAME=AMOUNT", multiple=True, parse=key_values("--ray-actor-resources", "NAME=AMOUNT"))
    ray_actor_cpus: float = option(1.0, "backend=\"ray\" with `ray_actor_resources`: CPUs the actor's Ray actor "
                                        "asks for.", Check(float, ge=0, what="a number of CPUs"), metavar="N")
    ray_chunk_rows: int | str = option(
        AUTO, "backend=\"ray\": the most transitions a chunk carries to a learner on another node, or from an actor "
              "on another node (a chunk takes what is there, up to this). \"auto\": as many rows as fit in "
              "AUTO_CHUNK_BYTES (4 MiB) of the learner's rows, at least 64 (backends/ray/chunks.py), so that "
              "Ray's cost per call is spread over thousands of small rows.",
        Check(int, ge=1, also=(AUTO,), why="an integer >= 1 or 'auto'"), metavar="N|auto")
    ray_actor_pool_cpus: float = option(
        1.0, "backend=\"ray\" with actors > 1: CPUs each of actors 1..M-1 asks for (each is a Ray actor).",
        Check(float, ge=0, what="a number of CPUs"), metavar="N")
    ray_actor_pool_resources: dict[str, float] = option(
        {}, "backend=\"ray\" with actors > 1: custom Ray resources each of actors 1..M-1 asks for, e.g. "
            "{\"actor_node\": 1} to place them on the nodes started with "
            "`ray start --resources='{\"actor_node\": 8}'`.",
        RESOURCES, metavar="NAME=AMOUNT", multiple=True,
        parse=key_values("--ray-actor-pool-resources", "NAME=AMOUNT"))
    ray_max_actor_restarts: int = option(
        0, "backend=\"ray\" with actors > 1: times each of actors 1..M-1 is restarted after it (or its node) dies, "
           "before the run stops with that actor's error.", Check(int, ge=0), metavar="N")
    ray_max_chunks_in_flight: int = option(
        8, "backend=\"ray\", learners on another node: chunks in flight per learner before the actor drops (and "
           "counts) new chunks instead of waiting.", COUNT, metavar="N")


#: The groups, in the order of the TOML file and of --help.
GROUPS: tuple[type[OptionGroup], ...] = (RunOptions, ActingOptions, LearningOptions, LeagueOptions,
                                         EvaluationOptions, ReliabilityOptions, RayOptions)
