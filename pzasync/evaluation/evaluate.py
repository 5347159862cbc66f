"""Evaluating trained agents: each agent's greedy policy against opponents, with confidence intervals.

Opponents are yardsticks: random players, a never-learning player spec (`"one_ply"`, `"negamax,depth=2"`,
`"perfect"`, `"mypkg.mod:func"`), or another run's policies; an env's own yardstick is its recipe's
(`pzasync.recipes.default_yardstick`). `untrained_baseline` scores freshly initialised
networks the same way, so a trained result can be read against where learning started.

Used by `pzasync eval`, at the end of `pzasync train`, and by the learning tests. Evaluation runs in-process
on its own seed, never during training, so it costs the training runs nothing.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

from pzasync.core.collect import run_episodes
from pzasync.core.environments import EnvSpec
from pzasync.errors import ConfigError
from pzasync.core.groups import resolve_groups
from pzasync.core.spaces import env_action_converter, AgentLayout, env_layouts, probe_info_masks
from pzasync.specs import parse_learner_spec
from pzasync.core.transitions import EpisodeSummary, LayoutBook
from pzasync.core.global_state import OBSERVATION_KEY, STATE_KEY
from pzasync.learners import resolve_learner, state_request
from pzasync.learners.players import load_checkpoint_policy
from pzasync.runtime.rundir import RunDirectory

ActFn = Callable[[str, Any, "np.ndarray | None"], Any]


@dataclass
class EvalResult:
    """One agent's evaluation: returns over episodes, and wins/draws/losses where returns have a sign."""

    agent: str
    opponent: str
    returns: list[float]

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
            return int(rng.choice(np.flatnonzero(mask))) + start
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
        run_episodes(env, lambda a, o, m: (actors[a](a, o, m), {}), lambda t: None, agent_steps=None, seed=seed,
                     layouts=LayoutBook(env, layouts, fixed=True), on_episode=done.append,
                     keep_going=lambda: len(done) < episodes, max_episode_steps=max_episode_steps,
                     to_env=env_action_converter(layouts),
                     on_episode_start=(lambda: [start() for start in starts]) if starts else None)
        return done
    finally:
        env.close()


def load_run_policies(run_dir: str | Path) -> dict[str, tuple[Any, AgentLayout]]:
    """Greedy policies of every agent with a checkpoint (its own, or its agent group's) in a run directory."""

    rd = RunDirectory(run_dir, create=False)
    info = rd.read_json("run.json")
    if info.get("env") is None:
        raise ConfigError(f"{run_dir}: the env was given as a factory; evaluate it from Python with `play`")
    env = EnvSpec.of_run(info).make()
    try:
        layouts = env_layouts(env, probe_info_masks(env))
    finally:
        env.close()

    groups = resolve_groups(info.get("config", {}).get("agent_groups", {}), list(layouts))
    group_of = {a: g for g, members in groups.items() for a in members}
    policies = {}
    for agent, layout in layouts.items():
        path = Path(rd.checkpoint_path(group_of.get(agent, agent)))  # a group's members share its checkpoint
        if path.exists():
            policies[agent] = (load_checkpoint_policy(str(path), layout), layout)
    if not policies:
        raise ConfigError(f"{run_dir} holds no checkpoints to evaluate")
    return policies


def reads_state(layout: AgentLayout) -> bool:
    """Whether observations of this layout carry the global state beside the agent's own (core/global_state.py)."""
    return any(leaf.path[:1] == (STATE_KEY,) for leaf in layout.obs_leaves) and any(
        leaf.path[:1] == (OBSERVATION_KEY,) for leaf in layout.obs_leaves)


def player_name(spec: Any) -> str:
    """A player spec as text: 'one_ply', ('negamax', {'depth': 2}) -> 'negamax,depth=2'."""
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict):
        name = spec[0] if isinstance(spec[0], str) else getattr(spec[0], "__name__", repr(spec[0]))
        return ",".join([name, *(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in spec[1].items())])
    return spec if isinstance(spec, str) else getattr(spec, "__name__", repr(spec))


def resolve_player(spec: Any, agent: str, layout: AgentLayout) -> tuple[type, dict[str, Any]]:
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


def player_actor(cls: type, options: dict[str, Any], layout: AgentLayout, seed: int) -> ActFn:
    """A never-learning player built for one agent, seeded (its construction and its own RNG) from `seed`."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = cls.build_policy(layout, options)
    policy.eval()
    policy.seed(seed)
    return policy_actor(policy, layout)


def evaluate_against(env_spec: Any, trained: dict[str, tuple[Any, AgentLayout]], opponents: Any,
                     episodes: int, seed: int = 12345, max_episode_steps: int | None = None,
                     opponent_name: str | None = None) -> list[EvalResult]:
    """Each trained agent plays `episodes` episodes greedily; every other agent is `opponents`.

    `opponents` is "random", a never-learning player spec ("one_ply", "negamax,depth=2", "perfect",
    "mypkg.mod:func", or a learner-spec tuple), built per opponent agent with its layout and seeded from
    `seed`, or a dict agent -> (policy, layout) of another run (`load_run_policies`). `opponent_name` names
    the yardstick in the results (default: the spec, or "opponent run").
    """
    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    reading = sorted(a for a, (_p, layout) in trained.items() if reads_state(layout))
    if reading and (spec.state is None or not set(reading) <= set(spec.state.agents)):
        raise ConfigError(f"the policies of {reading} read the env's global state beside their observation; evaluate "
                          f"them on the run's env (EnvSpec.of_run(run.json), or spec.with_state(StateRequest(...)))")
    probe = spec.make()
    try:
        agents = list(probe.possible_agents)
        action_spaces = ActionSpaces(probe)
        players: dict[str, tuple[type, dict[str, Any], AgentLayout]] = {}
        if not isinstance(opponents, dict) and opponents != "random":
            layouts = env_layouts(probe, probe_info_masks(probe, seed=seed))
            for other in dict.fromkeys(o for a in trained for o in agents if o != a):
                players[other] = (*resolve_player(opponents, other, layouts[other]), layouts[other])
    finally:
        probe.close()
    if opponent_name is None:
        opponent_name = "opponent run" if isinstance(opponents, dict) else player_name(opponents)
    results = []
    for i, (agent, (policy, layout)) in enumerate(sorted(trained.items())):
        actors: dict[str, ActFn] = {}
        for j, other in enumerate(agents):
            if other == agent:
                actors[other] = policy_actor(policy, layout)
            elif isinstance(opponents, dict):
                if other not in opponents:
                    raise ConfigError(f"the opponent run has no checkpoint for agent {other!r}")
                actors[other] = policy_actor(*opponents[other])
            elif opponents == "random":
                actors[other] = random_actor(action_spaces.copy(), seed + 7 * j)
            else:
                actors[other] = player_actor(*players[other], seed + 7 * j)
        summaries = play(spec, actors, episodes, seed + 1000 * i, max_episode_steps)
        results.append(EvalResult(agent, opponent_name, [s.returns.get(agent, 0.0) for s in summaries]))
    return results


def _learner_spec(learner: Any) -> Any:
    """A learner spec, or a run.json entry {"learner": path, "options": {...}} as one."""
    return (learner["learner"], dict(learner.get("options", {}))) if isinstance(learner, dict) else learner


def untrained_baseline(env_spec: Any, learners: Any, opponents: Any, episodes: int, seed: int = 12345,
                       max_episode_steps: int | None = None, opponent_name: str | None = None) -> list[EvalResult]:
    """Where learning starts: each learning agent's policy with fresh (seeded, untrained) weights, evaluated
    greedily exactly as `evaluate_against` evaluates a trained one (same opponents, same seeds).

    `learners` is one learner spec for every agent or a dict agent -> spec (`"*"` for the rest), as the runners
    take them (a run.json entry `{"learner": path, "options": {...}}` also works). Agents whose learner never
    learns are left out, as they have no checkpoint to compare with.
    """
    import torch

    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    per_agent = learners if isinstance(learners, dict) else {"*": learners}
    if spec.state is None:  # learners whose critic reads the global state see it beside their observation
        probe = spec.make()
        resolved = {}
        for agent in probe.possible_agents:
            learner = per_agent.get(agent, per_agent.get("*"))
            if learner is not None:
                cls, options = resolve_learner(_learner_spec(learner), agent)
                resolved[agent] = (cls, cls.validate_config(agent, options))
        probe.close()
        spec = spec.with_state(state_request(resolved, spec.name))
    probe = spec.make()
    try:
        layouts = env_layouts(probe, probe_info_masks(probe, seed=seed))
    finally:
        probe.close()
    fresh: dict[str, tuple[Any, AgentLayout]] = {}
    for index, (agent, layout) in enumerate(layouts.items()):
        learner = per_agent.get(agent, per_agent.get("*"))
        if learner is None:
            continue
        cls, options = resolve_learner(_learner_spec(learner), agent)
        if not cls.learns:
            continue
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
    return evaluate_against(spec, fresh, opponents, episodes, seed, max_episode_steps, opponent_name)
