"""Recording play as a dataset (`pzasync rollout ENV --record PATH`, `pzasync.record`): episodes played in-process
by the players given per agent (random by default; scripted players; a trained run's greedy policies), their
transitions written in the format of core/dataset.py, which `RunConfig.dataset` (`pzasync train --dataset`) loads.

It sits beside evaluation because it plays the same players the same way (`resolve_player`, `player_actor`,
`load_run_policies`), one env, one decision at a time, through the AEC loop every actor uses (core/stepper.py).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Callable, Mapping

import numpy as np

from pzasync.core.collect import run_episodes, transitions_to_arrays
from pzasync.core.dataset import EPISODE, Dataset, write_dataset
from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import AgentLayout, env_action_converter, env_layouts, probe_info_masks
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition
from pzasync.errors import ConfigError
from pzasync.evaluation.evaluate import (
    ActFn,
    load_run_policies,
    player_actor,
    player_name,
    policy_actor,
    resolve_player,
)

#: The player of an agent no `players` entry names.
DEFAULT_PLAYER = "random"


def players_for(agents: list[str], players: Mapping[str, Any] | Any | None) -> dict[str, Any]:
    """The player spec of every agent: `players` is one spec for all, or a dict agent -> spec with an optional
    default under "*"; agents left out play `DEFAULT_PLAYER`. An agent the env does not have is refused by name."""
    if players is None:
        return dict.fromkeys(agents, DEFAULT_PLAYER)
    if not isinstance(players, Mapping):
        return dict.fromkeys(agents, players)
    unknown = sorted(set(players) - set(agents) - {"*"})
    if unknown:
        raise ConfigError(f"--player given for unknown agent(s) {unknown}; the env's agents are {agents}")
    default = players.get("*", DEFAULT_PLAYER)
    return {agent: players.get(agent, default) for agent in agents}


def player_actors(layouts: dict[str, AgentLayout], specs: dict[str, Any], seed: int) -> dict[str, ActFn]:
    """One act function per agent: a path to a run directory plays that run's greedy policy of the agent (or of its
    agent group); anything else is a never-learning player spec (random, one_ply, negamax,depth=N, perfect,
    fixed,checkpoint=..., module:callable), built for the agent and seeded from `seed` and its index."""
    runs: dict[str, dict[str, tuple[Any, AgentLayout]]] = {}
    actors: dict[str, ActFn] = {}
    for index, (agent, spec) in enumerate(specs.items()):
        if isinstance(spec, (str, os.PathLike)) and os.path.isdir(spec):
            policies = runs.setdefault(str(spec), load_run_policies(str(spec)))
            if agent not in policies:
                raise ConfigError(f"--player {agent}={spec}: that run has no checkpoint for agent {agent!r}")
            policy, layout = policies[agent]
            actors[agent] = policy_actor(policy, layout)
            continue
        try:
            cls, options = resolve_player(spec, agent, layouts[agent])
        except ConfigError as exc:
            raise ConfigError(f"--player {agent}={player_name(spec)}: {exc}") from None
        actors[agent] = player_actor(cls, options, layouts[agent], seed + 7 * (index + 1))
    return actors


def record(env: Any, path: str | os.PathLike, players: Mapping[str, Any] | Any | None = None, *,
           agent_steps: int, seed: int = 0, max_episode_steps: int | None = None,
           on_steps: Callable[[int], None] | None = None) -> Dataset:
    """Play `agent_steps` decisions of `env` (an env id, `EnvSpec` or factory) with `players` (`players_for`) and
    write every agent's transitions as a dataset at `path`, a new directory (core/dataset.py). The first reset
    gets `seed` (later ones none, as in `rollout`), each player a seed of its own from it; rewards are checked for
    conservation on every episode. `on_steps(n)` is told the decisions taken so far every 100. Returns the dataset
    as written (its header's `summary` has each agent's player, rows, terminal and truncated rows and mean
    episode return)."""
    if agent_steps < 1:
        raise ConfigError(f"agent_steps must be >= 1, got {agent_steps}")
    spec = env if isinstance(env, EnvSpec) else EnvSpec.of(env)
    game = spec.make()
    try:
        layouts = env_layouts(game, probe_info_masks(game, seed=seed))
        specs = players_for(list(layouts), players)
        actors = player_actors(layouts, specs, seed)
        collected: list[Transition] = []
        episode_of: list[int] = []
        episodes: list[EpisodeSummary] = []
        started = [-1]

        def emit(transition: Transition) -> None:
            collected.append(transition)
            episode_of.append(started[0])
            if on_steps is not None and len(collected) % 100 == 0:
                on_steps(len(collected))

        def start_episode() -> None:
            started[0] += 1
            for actor in actors.values():
                new_episode = getattr(actor, "new_episode", None)
                if new_episode is not None:
                    new_episode()

        steps = run_episodes(game, lambda agent, obs, mask: (actors[agent](agent, obs, mask), {}), emit,
                             agent_steps=agent_steps, seed=seed, layouts=LayoutBook(game, layouts, fixed=True),
                             max_episode_steps=max_episode_steps, on_episode=episodes.append,
                             on_episode_start=start_episode, to_env=env_action_converter(layouts))
    finally:
        game.close()
    if on_steps is not None:
        on_steps(steps)
    arrays = transitions_to_arrays(collected, layouts)
    per_agent: dict[str, list[int]] = defaultdict(list)
    for transition, episode in zip(collected, episode_of):
        per_agent[transition.agent].append(episode)
    for agent, columns in arrays.items():
        columns[EPISODE] = np.asarray(per_agent[agent], np.int32)
    summary = {
        agent: {"player": player_name(specs[agent]) if not os.path.isdir(str(specs[agent])) else str(specs[agent]),
                "rows": int(len(arrays[agent]["reward"])) if agent in arrays else 0,
                "terminated": int(arrays[agent]["terminated"].sum()) if agent in arrays else 0,
                "truncated": int(arrays[agent]["truncated"].sum()) if agent in arrays else 0,
                "mean_return": float(np.mean([e.returns[agent] for e in episodes if agent in e.returns]))
                if any(agent in e.returns for e in episodes) else None}
        for agent in layouts
    }
    return write_dataset(path, arrays, layouts, env=spec.name if isinstance(spec.source, str) else None,
                         env_kwargs=dict(spec.kwargs), env_wrappers=tuple(spec.wrappers), seed=seed,
                         agent_steps=steps, episodes=len(episodes), max_episode_steps=max_episode_steps,
                         summary=summary)
