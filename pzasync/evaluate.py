"""Evaluating trained agents: each agent's greedy policy against opponents, with confidence intervals.

Used by `pzasync eval`, at the end of `pzasync train`, and by the learning tests. Evaluation runs in-process
on its own seed, never during training, so it costs the training runs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .collect import run_episodes
from .environments import EnvSpec
from .errors import ConfigError
from .spaces import AgentLayout, env_layouts, probe_info_masks
from .transitions import EpisodeSummary, LayoutBook

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
    def win_rate_ci95(self) -> tuple[float, float]:
        """Wilson score interval of the win rate."""
        n, p, z = self.episodes, self.win_rate, 1.96
        if n == 0:
            return (0.0, 1.0)
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))


def policy_actor(policy: Any, layout: AgentLayout, explore: bool = False) -> ActFn:
    """Wrap a `pzasync.Policy` as a single-observation act function."""
    keys = ["obs"] if not layout.nested_obs else [f"obs/{leaf.name}" for leaf in layout.obs_leaves]

    def act(agent: str, obs: Any, mask: np.ndarray | None) -> Any:
        if len(keys) == 1:
            batch = {"obs": np.asarray(obs)[None]}
        else:
            batch = {}
            for key, leaf in zip(keys, layout.obs_leaves):
                value = obs
                for part in leaf.path:
                    value = value[part]
                batch[key] = np.asarray(value)[None]
        actions, _ = policy.act(batch, None if mask is None else mask[None], explore)
        return actions[0]

    return act


def random_actor(env: Any, seed: int) -> ActFn:
    """Uniform over legal actions (or the action space)."""
    rng = np.random.default_rng(seed)

    def act(agent: str, obs: Any, mask: np.ndarray | None) -> Any:
        if mask is not None and mask.any():
            return int(rng.choice(np.flatnonzero(mask)))
        space = env.action_space(agent)
        space.seed(int(rng.integers(2**31)))
        return space.sample()

    return act


def play(env_spec: Any, actors: dict[str, ActFn], episodes: int, seed: int,
         max_episode_steps: int | None = None) -> list[EpisodeSummary]:
    """Play `episodes` full episodes with one act function per agent; return their summaries."""
    from .actor import env_action_converter

    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    env = spec.make()
    try:
        layouts = env_layouts(env, probe_info_masks(env, seed=seed))
        done: list[EpisodeSummary] = []
        run_episodes(env, lambda a, o, m: (actors[a](a, o, m), {}), lambda t: None, agent_steps=None, seed=seed,
                     layouts=LayoutBook(env, layouts, fixed=True), on_episode=done.append,
                     keep_going=lambda: len(done) < episodes, max_episode_steps=max_episode_steps,
                     to_env=env_action_converter(layouts))
        return done
    finally:
        env.close()


def load_run_policies(run_dir: str | Path) -> dict[str, tuple[Any, AgentLayout]]:
    """Greedy policies of every agent with a checkpoint (its own, or its agent group's) in a run directory."""
    from .environments import EnvSpec
    from .learners.players import load_checkpoint_policy
    from .rundir import RunDirectory

    rd = RunDirectory(run_dir, create=False)
    info = rd.read_json("run.json")
    if info.get("env") is None:
        raise ConfigError(f"{run_dir}: the env was given as a factory; evaluate it from Python with `play`")
    env = EnvSpec.of(info["env"], **info.get("env_kwargs", {})).make()
    try:
        layouts = env_layouts(env, probe_info_masks(env))
    finally:
        env.close()
    from .plan import resolve_groups

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


def evaluate_against(env_spec: Any, trained: dict[str, tuple[Any, AgentLayout]], opponents: str | dict,
                     episodes: int, seed: int = 12345, max_episode_steps: int | None = None) -> list[EvalResult]:
    """Each trained agent plays `episodes` episodes; every other agent is `opponents` ("random" or policies)."""
    spec = EnvSpec.of(env_spec) if not isinstance(env_spec, EnvSpec) else env_spec
    probe = spec.make()
    agents = list(probe.possible_agents)
    probe.close()
    results = []
    for i, (agent, (policy, layout)) in enumerate(sorted(trained.items())):
        actors: dict[str, ActFn] = {}
        for j, other in enumerate(agents):
            if other == agent:
                actors[other] = policy_actor(policy, layout)
            elif opponents == "random":
                actors[other] = random_actor(spec.make(), seed + 7 * j)
            else:
                if other not in opponents:
                    raise ConfigError(f"the opponent run has no checkpoint for agent {other!r}")
                actors[other] = policy_actor(*opponents[other])
        summaries = play(spec, actors, episodes, seed + 1000 * i, max_episode_steps)
        name = "random" if opponents == "random" else "opponent run"
        results.append(EvalResult(agent, name, [s.returns.get(agent, 0.0) for s in summaries]))
    return results
