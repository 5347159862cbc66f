"""`rollout`: episodes played in-process, their transitions returned as arrays.

`run_episodes` drives one copy stepper (core/stepper.py: `EpisodeStepper`, the AEC loop every actor uses, or
`ParallelStepper`, the parallel path's) with a policy callback; completed transitions go to a sink. A budget takes
effect at the next decisions that do not fit in it (the next live decision; on the parallel path, the next cycle),
so an episode is never cut between an action and the turns that reveal its outcome.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import numpy as np

from pzasync.core.environments import ENV_APIS, make_env, make_parallel_env
from pzasync.core.parallel_stepper import ParallelStepper
from pzasync.core.spaces import AgentLayout, leaf_value, stack_masks
from pzasync.core.stepper import EpisodeStepper
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition
from pzasync.errors import ConfigError, EnvSpecError, UnsupportedSpaceError

#: policy(agent, obs, mask) -> (action, extras stored with the transition)
ActFn = Callable[[str, Any, "np.ndarray | None"], "tuple[Any, dict]"]


def run_episodes(
    env: Any,
    act: ActFn,
    emit: Callable[[Transition], None],
    *,
    agent_steps: int | None,
    seed: int | None = None,
    layouts: LayoutBook | None = None,
    check_rewards: bool = True,
    max_episode_steps: int | None = None,
    on_episode: Callable[[EpisodeSummary], None] | None = None,
    keep_going: Callable[[], bool] | None = None,
    to_env: Callable[[str, Any], Any] | None = None,
    on_episode_start: Callable[[], None] | None = None,
    parallel: bool = False,
) -> int:
    """Play episodes until `agent_steps` decisions were taken (None: until `keep_going` says stop); with
    `parallel`, `env` is a parallel env stepped a cycle at a time (docs/transitions.md, "The parallel path").

    The first reset gets `seed`, later ones none (docs/transitions.md, rule 8). `to_env(agent, action)` converts
    the stored action into what `env.step` gets (e.g. clipped to a Box). `on_episode_start()` runs after each
    reset, before the episode's first decision. Returns the number of agent steps taken.
    """
    if agent_steps is None and keep_going is None:
        raise ConfigError("run_episodes needs agent_steps or keep_going, or it would never stop")
    if agent_steps is not None and agent_steps < 1:
        raise ConfigError(f"agent_steps must be >= 1, got {agent_steps}")
    stepper_type: type[EpisodeStepper] | type[ParallelStepper] = ParallelStepper if parallel else EpisodeStepper
    stepper = stepper_type(env, emit, seed=seed, layouts=layouts, check_rewards=check_rewards,
                           max_episode_steps=max_episode_steps, to_env=to_env, on_episode=on_episode)

    def fits(decisions: int) -> bool:
        return (agent_steps is None or stepper.steps + decisions <= agent_steps) and (keep_going is None
                                                                                     or keep_going())

    while fits(1):
        stepper.reset()
        if on_episode_start is not None:
            on_episode_start()
        while decisions := stepper.next_decisions():
            if not fits(len(decisions)):
                stepper.cut()
                return stepper.steps
            stepper.answer([(d, *act(d.agent, d.obs, d.mask)) for d in decisions])
    return stepper.steps


def _stack(values: list, layout: AgentLayout | None) -> Any:
    if layout is not None and layout.nested_obs:
        return {
            leaf.name: np.stack([leaf_value(v, leaf.path) for v in values]).astype(leaf.dtype, copy=False)
            for leaf in layout.obs_leaves
        }
    return np.stack([np.asarray(v) for v in values])


def transitions_to_arrays(
    transitions: list[Transition], layouts: dict[str, AgentLayout]
) -> dict[str, dict[str, Any]]:
    """Group transitions per agent into arrays in decision order (the format `rollout` returns)."""
    per_agent: dict[str, list[Transition]] = defaultdict(list)
    for t in transitions:
        per_agent[t.agent].append(t)
    result: dict[str, dict[str, Any]] = {}
    for agent, items in per_agent.items():
        layout = layouts[agent]
        shapes = {np.shape(t.obs) for t in items} if not layout.nested_obs else set()
        if len(shapes) > 1:
            raise UnsupportedSpaceError(
                f"agent {agent!r}: its observation shape changed between episodes ({sorted(shapes)}), so its "
                f"transitions cannot be stacked; roll out one episode at a time"
            )
        arrays: dict[str, Any] = {
            "obs": _stack([t.obs for t in items], layout),
            "action": np.stack([np.asarray(t.action, dtype=layout.action_leaf.dtype) for t in items]),
            "reward": np.array([t.reward for t in items], dtype=np.float32),
            "next_obs": _stack([t.next_obs for t in items], layout),
            "terminated": np.array([t.terminated for t in items], dtype=bool),
            "truncated": np.array([t.truncated for t in items], dtype=bool),
        }
        if layout.has_mask:
            arrays["action_mask"] = stack_masks([t.action_mask for t in items])
            arrays["next_action_mask"] = stack_masks([t.next_action_mask for t in items])
        for key in items[0].extras:
            arrays[key] = np.array([t.extras[key] for t in items], dtype=np.float32)
        result[agent] = arrays
    return result


def rollout(
    env: Any,
    policy: Callable[[str, Any, np.ndarray | None], Any],
    *,
    agent_steps: int,
    seed: int | None = None,
    max_episode_steps: int | None = None,
    check_rewards: bool = True,
    episodes: list[EpisodeSummary] | None = None,
    env_api: str = "aec",
) -> dict[str, dict[str, Any]]:
    """Play `agent_steps` decisions in-process and return each agent's transitions as arrays (docs/transitions.md).

    `policy(agent, obs, mask) -> action`. Keys per agent: obs, action, reward, next_obs, terminated, truncated,
    and action_mask / next_action_mask where the env has masks. Nested observations come back as a dict of
    arrays keyed by leaf name. Pass a list as `episodes` to receive each episode's summary. `env_api`: "aec"
    steps the env turn by turn; "parallel" through its parallel API, a cycle at a time (docs/transitions.md, "The
    parallel path"), as the runners do with `RunConfig(env_api=...)`; "auto" the parallel API where the env has one.
    """
    if env_api not in ENV_APIS:
        raise ConfigError(f"env_api {env_api!r}: must be one of {ENV_APIS}")
    parallel = env_api == "parallel"
    if env_api == "auto":
        try:
            env, parallel = make_parallel_env(env), True
        except EnvSpecError:
            pass
    env = make_parallel_env(env) if env_api == "parallel" else env if parallel else make_env(env)
    book = LayoutBook(env)
    collected: list[Transition] = []
    run_episodes(
        env,
        lambda agent, obs, mask: (policy(agent, obs, mask), {}),
        collected.append,
        agent_steps=agent_steps,
        seed=seed,
        layouts=book,
        check_rewards=check_rewards,
        max_episode_steps=max_episode_steps,
        on_episode=episodes.append if episodes is not None else None,
        parallel=parallel,
    )
    return transitions_to_arrays(collected, book.layouts)
