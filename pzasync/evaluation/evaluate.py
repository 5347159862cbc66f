"""Evaluating trained agents: greedy policies against opponents, with confidence intervals.

`score_units` scores units of agents (a seat alone, a side, or the whole team: evaluation/scoring.py) by their
summed return; `evaluate_against` is its per-seat form. Opponents are yardsticks: random players, a
never-learning player spec (`"one_ply"`, `"negamax,depth=2"`, `"perfect"`, `"mypkg.mod:func"`), or another
run's policies; an env's own yardstick is its recipe's (`pzasync.recipes.default_yardstick`).
`untrained_baseline` scores freshly initialised networks (`fresh_policies`) the same way, so a trained result
can be read against where learning started. Episodes run over env copies with batched forwards, seeded per
episode (evaluation/episodes.py); `play` is the one-env loop of act functions that tests and benchmarks use.

Used by `pzasync.evaluate` (evaluation/report.py: `pzasync eval`, the end of `pzasync train`), the evaluator
process and the learning tests. Evaluation runs in-process on its own seed, never during training, so it costs
the training runs nothing.
"""

from __future__ import annotations

import copy
import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
from gymnasium import spaces

from pzasync.core.collect import run_episodes
from pzasync.core.environments import EnvSpec
from pzasync.core.envset_env import run_env_spec
from pzasync.core.global_state import carries_state, narrowed
from pzasync.core.groups import resolve_groups
from pzasync.core.spaces import AgentLayout, env_action_converter, env_layouts, probe_info_masks, uniform_legal
from pzasync.core.transitions import EpisodeSummary, LayoutBook
from pzasync.errors import ConfigError
from pzasync.evaluation.episodes import PerCopyPlayer, Player, PolicyPlayer, RandomPlayer, play_parallel
from pzasync.learners import Learner, policy_size, resolve_learner, state_request, vector_to_policy
from pzasync.learners.players import load_checkpoint_policy
from pzasync.runtime.rundir import RunDirectory
from pzasync.specs import parse_learner_spec

ActFn = Callable[[str, Any, "np.ndarray | None"], Any]

#: `EvalResult.opponent` of a unit that played every seat itself (a team with a policy in each).
NO_OPPONENT = "none"


@dataclass
class EvalResult:
    """One unit's evaluation (a seat, a side or the team: `agent`, its member agents `members`): its returns
    over episodes (the members' summed return in each), and wins/draws/losses where returns have a sign."""

    agent: str
    opponent: str
    returns: list[float]
    #: The agents whose returns are summed; empty: `agent` alone.
    members: tuple[str, ...] = ()
    #: Who played the unit's seats: "trained", "untrained" (fresh networks) or "random".
    policy: str = "trained"
    #: On an env set: episodes per env of the set played (its label: core/envset_spec.py); else empty.
    envs: dict[str, int] = field(default_factory=dict)

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def mean_ci95(self) -> float:
        """Half-width of a normal-approximation 95% interval of the mean return."""
        if len(self.returns) < 2:
            return float("nan")
        return 1.96 * float(np.std(self.returns, ddof=1)) / math.sqrt(len(self.returns))

    @property
    def wins(self) -> int:
        return int(sum(r > 0 for r in self.returns))

    @property
    def draws(self) -> int:
        return int(sum(r == 0 for r in self.returns))

    @property
    def win_rate(self) -> float:
        return self.wins / max(1, self.episodes)

    @property
    def outcomes(self) -> bool:
        """Whether every return is a game's result (1, 0 or -1), so wins, draws and losses are the score; a
        return of another size (simple_spread's distances, a food count) is scored by its mean instead."""
        return all(r in (-1.0, 0.0, 1.0) for r in self.returns)

    def summary(self) -> dict[str, Any]:
        """The unit's figures as an evaluation row carries them (metrics.jsonl's `"kind": "eval"` rows, the
        suite's curve): episodes, wins as a rate with its interval, draws, losses, the mean return with its
        interval, and whether the returns are game results."""
        return {"episodes": self.episodes, "win_rate": self.win_rate, "win_rate_ci95": list(self.win_rate_ci95),
                "draws": self.draws, "losses": self.episodes - self.wins - self.draws, "mean_return": self.mean,
                "mean_return_ci95": self.mean_ci95, "outcomes": self.outcomes}

    @property
    def win_rate_ci95(self) -> tuple[float, float]:
        """Wilson score interval of the win rate."""
        n, p, z = self.episodes, self.win_rate, 1.96
        if n == 0:
            return (0.0, 1.0)
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))


def policy_actor(policy: Any, layout: AgentLayout, explore: bool = False) -> ActFn:
    """Wrap a `pzasync.Policy` as a single-observation act function. A recurrent policy's memory is kept per
    agent and forgotten by the function's `new_episode()`, which `play` calls at every episode start."""
    memory: dict[str, np.ndarray] = {}

    def act(agent: str, obs: Any, mask: np.ndarray | None) -> Any:
        masks = None if mask is None else mask[None]
        if policy.memory_size:
            carried = memory.get(agent)
            if carried is None:
                carried = np.zeros(policy.memory_size, np.float32)
            actions, _, after = policy.act_with_memory(layout.batch([obs]), masks, explore, carried[None])
            memory[agent] = after[0]
            return actions[0]
        actions, _ = policy.act(layout.batch([obs]), masks, explore)
        return actions[0]

    act.new_episode = memory.clear  # type: ignore[attr-defined]
    return act


class ActionSpaces:
    """An env's action spaces, kept after the env is closed: all a random player needs (without an env of its
    own to close, which for a remote env id would hold a connection, or a launched server)."""

    def __init__(self, env: Any) -> None:
        self.spaces = {agent: env.action_space(agent) for agent in env.possible_agents}

    def action_space(self, agent: str) -> Any:
        return self.spaces[agent]

    def copy(self) -> ActionSpaces:
        """Independent copies of the spaces (a random player seeds its spaces)."""
        out = ActionSpaces.__new__(ActionSpaces)
        out.spaces = copy.deepcopy(self.spaces)
        return out


def random_actor(env: Any, seed: int) -> ActFn:
    """Uniform over legal actions (or the action space). Mask entry i is action `start + i` of a Discrete space."""
    rng = np.random.default_rng(seed)
    starts: dict[str, int] = {}  # per agent, looked up once: this is the bench's env-alone reference loop

    def act(agent: str, obs: Any, mask: np.ndarray | None) -> Any:
        if mask is not None and mask.any():
            start = starts.get(agent)
            if start is None:
                space = env.action_space(agent)
                start = starts[agent] = int(space.start) if isinstance(space, spaces.Discrete) else 0
            return uniform_legal(rng, mask) + start
        space = env.action_space(agent)
        space.seed(int(rng.integers(2**31)))
        return space.sample()

    return act


def play(env_spec: Any, actors: dict[str, ActFn], episodes: int, seed: int,
         max_episode_steps: int | None = None) -> list[EpisodeSummary]:
    """Play `episodes` full episodes with one act function per agent; return their summaries."""

    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    env = spec.make()
    try:
        layouts = env_layouts(env, probe_info_masks(env, seed=seed))
        done: list[EpisodeSummary] = []
        starts = [f.new_episode for f in actors.values() if hasattr(f, "new_episode")]  # recurrent players' memory

        def start_episode() -> None:
            for start in starts:
                start()

        run_episodes(env, lambda a, o, m: (actors[a](a, o, m), {}), lambda t: None, agent_steps=None, seed=seed,
                     layouts=LayoutBook(env, layouts, fixed=True), on_episode=done.append,
                     keep_going=lambda: len(done) < episodes, max_episode_steps=max_episode_steps,
                     to_env=env_action_converter(layouts),
                     on_episode_start=start_episode if starts else None)
        return done
    finally:
        env.close()


def acting_env(spec: EnvSpec, learners: Mapping[str, Any]) -> EnvSpec:
    """The env the policies of `learners` act in: `spec` with the global state beside the observations of only
    those agents whose policy reads it. An agent whose learner's policy acts on its own observation
    (`Learner.acts_on_observation`: mappo's) observes no state, so acting with it never calls `env.state()`.
    `learners`: agent (or "*") -> a learner class, spec, or run.json entry; an agent without one keeps the state."""
    if spec.state is None:
        return spec

    def reads_state(agent: str) -> bool:
        learner = learners.get(agent, learners.get("*"))
        if learner is None:
            return True
        cls: type[Learner] = learner if isinstance(learner, type) else resolve_learner(_learner_spec(learner),
                                                                                      agent)[0]
        return not cls.acts_on_observation

    return spec.with_state(narrowed(spec.state, [a for a in spec.state.agents if reads_state(a)]))


def run_env(run_dir: str | Path, split: str | None = None, stage: int | None = None) -> EnvSpec:
    """The env a run directory's policies act in (`acting_env` of its run.json's env and learners); for a run on
    an env set, its `split` at curriculum `stage` (`run_env_spec`)."""
    info = RunDirectory(run_dir, create=False).read_json("run.json")
    if info.get("env") is None and info.get("env_set") is None:
        raise ConfigError(f"{run_dir}: the env was given as a factory; evaluate it from Python with `play`")
    return acting_env(run_env_spec(info, split, stage), info.get("learners") or {})


def load_run_policies(run_dir: str | Path, snapshot: int | None = None) -> dict[str, tuple[Any, AgentLayout]]:
    """Greedy policies of every agent with a checkpoint (its own, or its agent group's) in a run directory, built
    for the env they act in (`run_env`: a mappo policy for the agent's observation alone); the members of a group
    with the same spaces share one policy object. `snapshot`: the agent steps of one of the run's policy snapshots
    (RunConfig.snapshot_every_steps; the run directory's snapshots.jsonl lists them), whose parameters replace the
    checkpoint's."""

    rd = RunDirectory(run_dir, create=False)
    info = rd.read_json("run.json")
    snapshot_files = _snapshot_files(rd, snapshot) if snapshot is not None else {}
    env = run_env(run_dir).make()
    try:
        layouts = env_layouts(env, probe_info_masks(env))
    finally:
        env.close()

    groups = resolve_groups(info.get("config", {}).get("agent_groups", {}), list(layouts))
    group_of = {a: g for g, members in groups.items() for a in members}
    policies = {}
    loaded: dict[Path, tuple[Any, AgentLayout]] = {}
    for agent, layout in layouts.items():
        path = Path(rd.checkpoint_path(group_of.get(agent, agent)))  # a group's members share its checkpoint
        if not path.exists():
            continue
        first = loaded.get(path)
        if first is not None and replace(first[1], agent=agent) == layout:
            policies[agent] = (first[0], layout)  # one policy object: its members' decisions share forwards
        else:
            policy = load_checkpoint_policy(str(path), layout)
            unit = group_of.get(agent, agent)
            if snapshot is not None:
                if unit not in snapshot_files:
                    raise ConfigError(f"{run_dir}: the snapshot at {snapshot} agent steps holds no policy of "
                                      f"{unit!r} (it has {', '.join(map(repr, snapshot_files)) or 'none'})")
                _load_vector(policy, np.load(rd.path / snapshot_files[unit]), f"{unit!r} at {snapshot}")
            policies[agent] = loaded[path] = (policy, layout)
    if not policies:
        raise ConfigError(f"{run_dir} holds no checkpoints to evaluate")
    return policies


def _snapshot_files(rd: RunDirectory, snapshot: int) -> dict[str, str]:
    """Unit -> its vector's file (relative to the run directory) in the run's snapshot at `snapshot` agent steps;
    a ConfigError naming the snapshots there are if there is none at that count."""
    rows = {int(row["agent_steps"]): row for row in rd.read_jsonl("snapshots.jsonl")}
    if snapshot not in rows:
        kept = ", ".join(map(str, sorted(rows))) or "none (train with --snapshot-every-steps N to keep them)"
        raise ConfigError(f"{rd.path}: no policy snapshot at {snapshot} agent steps; snapshots kept: {kept}")
    return {unit: entry["file"] for unit, entry in rows[snapshot]["units"].items()}


def _load_vector(policy: Any, vector: np.ndarray, what: str) -> None:
    """A snapshot's parameter vector into a policy built from the same checkpoint, refused if the sizes differ."""
    if vector.size != policy_size(policy):
        raise ConfigError(f"snapshot of {what}: {vector.size} parameters, but the run's policy has "
                          f"{policy_size(policy)}")
    vector_to_policy(vector.astype(np.float32, copy=False), policy)


def player_name(spec: Any) -> str:
    """A player spec as text: 'one_ply', ('negamax', {'depth': 2}) -> 'negamax,depth=2'."""
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict):
        name = spec[0] if isinstance(spec[0], str) else getattr(spec[0], "__name__", repr(spec[0]))
        return ",".join([name, *(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in spec[1].items())])
    return spec if isinstance(spec, str) else getattr(spec, "__name__", repr(spec))


def resolve_player(spec: Any, agent: str, layout: AgentLayout) -> tuple[type[Learner], dict[str, Any]]:
    """A never-learning player spec (text as on the command line, or a learner spec) -> (class, options),
    checked against the agent's spaces; a learner that trains is refused."""

    if isinstance(spec, str):

        spec = parse_learner_spec(spec)
    cls, options = resolve_learner(spec, agent)
    if cls.learns:
        raise ConfigError(f"{player_name(spec)!r} is a learner that trains; an opponent must be a player that never "
                          f"learns (random, one_ply, negamax, perfect, fixed, or 'module:callable')")
    cls.check_spaces(layout)
    return cls, cls.validate_config(agent, options)


def player_actor(cls: type[Learner], options: dict[str, Any], layout: AgentLayout, seed: int) -> ActFn:
    """A never-learning player built for one agent, seeded (its construction and its own RNG) from `seed`."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = cls.build_policy(layout, options)
    policy.eval()
    policy.seed(seed)
    return policy_actor(policy, layout)


def opponent_players(spec: EnvSpec, agents: list[str], needed: list[str], opponents: Any,
                     seed: int) -> dict[str, Player]:
    """The players of the agents in `needed` (in env order): "random", a never-learning player spec (one per
    agent, built per env copy and seeded per episode) or another run's policies (a dict agent -> (policy,
    layout), one batched player per policy)."""
    if not needed:
        return {}
    index = {a: i for i, a in enumerate(agents)}
    if isinstance(opponents, dict):
        missing = [a for a in needed if a not in opponents]
        if missing:
            raise ConfigError(f"the opponent run has no checkpoint for agent {missing[0]!r}")
        return policy_players({a: opponents[a] for a in needed})
    probe = spec.make()
    try:
        if opponents == "random":
            shared = RandomPlayer(ActionSpaces(probe).copy().spaces, index)
            return dict.fromkeys(needed, shared)
        layouts = env_layouts(probe, probe_info_masks(probe, seed=seed))
    finally:
        probe.close()
    players: dict[str, Player] = {}
    for agent in needed:
        cls, options = resolve_player(opponents, agent, layouts[agent])
        players[agent] = PerCopyPlayer(_player_builder(cls, options, layouts[agent], seed + 7 * index[agent]),
                                       layouts[agent], index[agent])
    return players


def _player_builder(cls: type[Learner], options: dict[str, Any], layout: AgentLayout, seed: int) -> Callable[[], Any]:
    def build() -> Any:
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            policy = cls.build_policy(layout, options)
        policy.eval()
        return policy
    return build


def policy_players(policies: dict[str, tuple[Any, AgentLayout]], explore: bool = False) -> dict[str, Player]:
    """One `PolicyPlayer` per policy object (agents that share a policy share its forwards): greedy, or
    sampling its own distribution with `explore`."""
    shared: dict[int, PolicyPlayer] = {}
    players: dict[str, Player] = {}
    for agent, (policy, layout) in policies.items():
        if id(policy) not in shared:
            shared[id(policy)] = PolicyPlayer(policy, layout, explore)
        players[agent] = shared[id(policy)]
    return players


def score_units(env_spec: Any, seated: dict[str, tuple[Any, AgentLayout]] | str, units: dict[str, list[str]],
                opponents: Any, episodes: int, seed: int = 12345, max_episode_steps: int | None = None,
                opponent_name: str | None = None, policy: str = "trained",
                copies: int | None = None, explore: bool = False, env_api: str = "auto",
                seconds: float | None = None) -> list[EvalResult]:
    """Score each unit (a name -> its member agents): its members play `seated` (a dict agent -> (policy,
    layout), greedy, or sampling their own distributions with `explore`; or "random"), every other agent, and
    members without a policy, play `opponents` (as in `evaluate_against`; the result's opponent is `NO_OPPONENT`
    where none played); the unit's score in an episode is its members' summed return. `episodes` episodes per
    unit over `copies` env copies (evaluation/episodes.py: batched, seeded per episode; None: `eval_copies`),
    stepped through `env_api` ("auto": the parallel API where the env has one). `seconds`: a time budget shared
    equally by the units, each playing its games until its share is spent (at least one round: fewer than
    `episodes` where games are long). `policy` labels the results ("trained", "untrained", "random")."""
    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    given = [p for p in (seated, opponents) if isinstance(p, dict)]
    reading = sorted({a for policies in given for a, (_p, layout) in policies.items() if carries_state(layout)})
    if reading and (spec.state is None or not set(reading) <= set(spec.state.agents)):
        raise ConfigError(f"the policies of {reading} read the env's global state beside their observation; "
                          f"evaluate them on the run's env (EnvSpec.of_run(run.json), or "
                          f"spec.with_state(StateRequest(...)))")
    spec = spec.with_state(narrowed(spec.state, reading))  # the others act on what they observe, without it
    probe = spec.make()
    try:
        agents = list(probe.possible_agents)
        index = {a: i for i, a in enumerate(agents)}
        own: dict[str, Player]
        if isinstance(seated, dict):
            own = policy_players(seated, explore)
        else:
            shared = RandomPlayer(ActionSpaces(probe).copy().spaces, index)
            own = dict.fromkeys(agents, shared)
    finally:
        probe.close()
    needed = [a for a in agents if any(a not in members or a not in own for members in units.values())]
    others = opponent_players(spec, agents, needed, opponents, seed)
    if opponent_name is None:
        opponent_name = "opponent run" if isinstance(opponents, dict) else player_name(opponents)
    results = []
    started = time.monotonic()
    for number, (unit, members) in enumerate(units.items(), 1):
        players = {a: own[a] if a in members and a in own else others[a] for a in agents}
        deadline = None if seconds is None else started + seconds * number / len(units)
        summaries = play_parallel(spec, players, episodes, seed, copies, max_episode_steps, env_api, deadline)
        against = opponent_name if any(a not in members or a not in own for a in agents) else NO_OPPONENT
        played = Counter(s.env for s in summaries if s.env is not None)
        results.append(EvalResult(unit, against, [sum(s.returns.get(a, 0.0) for a in members)
                                                  for s in summaries], tuple(members), policy, dict(played)))
    return results


def evaluate_against(env_spec: Any, trained: dict[str, tuple[Any, AgentLayout]], opponents: Any,
                     episodes: int, seed: int = 12345, max_episode_steps: int | None = None,
                     opponent_name: str | None = None, copies: int | None = None) -> list[EvalResult]:
    """Each trained agent plays `episodes` episodes greedily; every other agent is `opponents` ("seats"
    scoring; `score_units` scores teams and sides).

    `opponents` is "random", a never-learning player spec ("one_ply", "negamax,depth=2", "perfect",
    "mypkg.mod:func", or a learner-spec tuple), built per opponent agent with its layout and seeded per
    episode from `seed`, or a dict agent -> (policy, layout) of another run (`load_run_policies`).
    `opponent_name` names the yardstick in the results (default: the spec, or "opponent run"). Episodes run
    over `copies` env copies with batched forwards; the same seed gives the same results.
    """
    units = {agent: [agent] for agent in sorted(trained)}
    return score_units(env_spec, trained, units, opponents, episodes, seed, max_episode_steps, opponent_name,
                       copies=copies)


def fresh_policies(env_spec: Any, learners: Any, seed: int = 12345,
                   groups: dict[str, list[str]] | None = None) -> tuple[EnvSpec, dict[str, tuple[Any, AgentLayout]]]:
    """Freshly initialised (seeded, untrained) greedy policies of every agent whose learner learns, and the env
    spec to score them on (with the global state beside the observation where a learner's critic reads it).

    `learners` is one learner spec for every agent or a dict agent -> spec (`"*"` for the rest), as the runners
    take them (a run.json entry `{"learner": path, "options": {...}}` also works). `groups` (group -> members, as
    `resolve_groups` gives them): the members of a group share one network, as in training (its first member's),
    so that their decisions share forwards."""
    import torch

    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    per_agent = learners if isinstance(learners, dict) else {"*": learners}
    if spec.state is None:  # policies that read the global state see it beside their observation
        probe = spec.make()
        resolved = {}
        for agent in probe.possible_agents:
            learner = per_agent.get(agent, per_agent.get("*"))
            if learner is not None:
                cls, options = resolve_learner(_learner_spec(learner), agent)
                if not cls.acts_on_observation:
                    resolved[agent] = (cls, cls.validate_config(agent, options))
        probe.close()
        spec = spec.with_state(state_request(resolved, spec.name))
    else:
        spec = acting_env(spec, per_agent)
    probe = spec.make()
    try:
        layouts = env_layouts(probe, probe_info_masks(probe, seed=seed))
    finally:
        probe.close()
    fresh: dict[str, tuple[Any, AgentLayout]] = {}
    first_of = {member: members[0] for members in (groups or {}).values() for member in members}
    for index, (agent, layout) in enumerate(layouts.items()):
        learner = per_agent.get(agent, per_agent.get("*"))
        if learner is None:
            continue
        leader = fresh.get(first_of.get(agent, agent))
        if leader is not None and replace(leader[1], agent=agent) == layout:
            fresh[agent] = (leader[0], layout)
            continue
        cls, options = resolve_learner(_learner_spec(learner), agent)
        if not cls.learns:
            continue
        if carries_state(layout) or not cls.acts_on_observation:  # else only its policy is built, for this layout
            cls.check_spaces(layout)
        options = cls.validate_config(agent, options)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1009 * (index + 1))
            policy = cls.build_policy(layout, options)
        policy.eval()
        policy.requires_grad_(False)
        policy.seed(seed + 1009 * (index + 1) + 1)
        fresh[agent] = (policy, layout)
    if not fresh:
        raise ConfigError("untrained_baseline: no agent has a learner that learns")
    return spec, fresh


def _learner_spec(learner: Any) -> Any:
    """A learner spec (its text form too: "dqn,torso=mlp"), or a run.json entry {"learner": path, "options": {...}}
    as one."""
    if isinstance(learner, dict):
        return learner["learner"], dict(learner.get("options", {}))
    return parse_learner_spec(learner) if isinstance(learner, str) else learner


def untrained_baseline(env_spec: Any, learners: Any, opponents: Any, episodes: int, seed: int = 12345,
                       max_episode_steps: int | None = None, opponent_name: str | None = None,
                       copies: int | None = None) -> list[EvalResult]:
    """Where learning starts: each learning agent's policy with fresh (seeded, untrained) weights
    (`fresh_policies`), evaluated greedily exactly as `evaluate_against` evaluates a trained one (same
    opponents, same seeds). Agents whose learner never learns are left out, as they have no checkpoint to
    compare with."""
    spec, fresh = fresh_policies(env_spec, learners, seed)
    results = evaluate_against(spec, fresh, opponents, episodes, seed, max_episode_steps, opponent_name, copies)
    for r in results:
        r.policy = "untrained"
    return results
