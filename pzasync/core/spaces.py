"""Per-agent storage layouts derived from gymnasium spaces.

A layout says how one agent's observations and actions are stored: every observation is split into leaves
(Box, Discrete, MultiDiscrete, MultiBinary, nested in Dict/Tuple), each kept in its own dtype and shape so an
image stays uint8. The action mask, whether the env puts it in the observation dict or in `info`, is split
out of the stored observation (docs/transitions.md, rule 7) and kept beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

from pzasync.errors import UnsupportedSpaceError

MASK_KEY = "action_mask"


@dataclass(frozen=True)
class Leaf:
    """One array-valued piece of an observation or action: where it sits, its shape and dtype."""

    path: tuple[str | int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path)


def _leaf_for(space: spaces.Space, path: tuple, agent: str, role: str) -> list[Leaf]:
    if isinstance(space, spaces.Box):
        return [Leaf(path, tuple(int(d) for d in space.shape), np.dtype(space.dtype))]
    if isinstance(space, spaces.Discrete):
        return [Leaf(path, (), np.dtype(np.int64))]
    if isinstance(space, spaces.MultiDiscrete):
        return [Leaf(path, tuple(space.nvec.shape), np.dtype(np.int64))]
    if isinstance(space, spaces.MultiBinary):
        return [Leaf(path, tuple(int(d) for d in np.atleast_1d(space.n)), np.dtype(np.int8))]
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaf_for(sub, (*path, key), agent, role)]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _leaf_for(sub, (*path, i), agent, role)]
    where = "/".join(str(p) for p in path) or role
    raise UnsupportedSpaceError(
        f"agent {agent!r}: {role} space {space!r} (at {where!r}) is not supported; pzasync stores Box, Discrete, "
        f"MultiDiscrete and MultiBinary spaces, nested in Dict or Tuple. Flatten or wrap the env (e.g. with "
        f"SuperSuit) so its spaces are among these."
    )


def leaf_value(value: Any, path: tuple) -> Any:
    """The leaf at `path` of a (nested) observation: the one walker every module uses."""
    for key in path:
        value = value[key]
    return value


def _set(container: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        container = container.setdefault(key, {})
    container[path[-1]] = value


@dataclass(frozen=True)
class AgentLayout:
    """How one agent's observations, masks and actions are stored.

    `obs_space` is the observation space with the action mask removed; `mask_shape` is None when the env gives
    this agent no mask.
    """

    agent: str
    obs_space: spaces.Space
    action_space: spaces.Space
    obs_leaves: tuple[Leaf, ...]
    action_leaf: Leaf
    mask_shape: tuple[int, ...] | None
    mask_in_obs: bool

    @property
    def has_mask(self) -> bool:
        return self.mask_shape is not None

    @cached_property
    def nested_obs(self) -> bool:
        """Whether the stored observation has more than one leaf, or one below the top (read at every step)."""
        return len(self.obs_leaves) != 1 or self.obs_leaves[0].path != ()

    def split(self, observation: Any, info: dict | None) -> tuple[Any, np.ndarray | None]:
        """Separate what the env returned into the stored observation and the action mask (or None)."""
        if self.mask_in_obs:
            mask = observation[MASK_KEY]
            if "observation" in observation and len(observation) == 2:
                observation = observation["observation"]
            else:
                observation = {k: v for k, v in observation.items() if k != MASK_KEY}
        elif self.mask_shape is not None:
            mask = info.get(MASK_KEY) if info else None
            if mask is None:
                mask = np.ones(self.mask_shape, dtype=bool)
        else:
            return self.copy_obs(observation), None
        # ndarray.astype copies, at about two thirds of np.array's cost (this runs at every turn)
        return self.copy_obs(observation), mask.astype(bool) if type(mask) is np.ndarray else np.array(mask, bool)

    def copy_obs(self, observation: Any) -> Any:
        """A private copy in storage dtypes, so an env that reuses its arrays cannot change a pending record."""
        if not self.nested_obs:
            dtype = self.obs_leaves[0].dtype
            if type(observation) is np.ndarray and observation.dtype == dtype:
                return observation.copy()  # about half np.array's cost
            return np.array(observation, dtype=dtype)
        return self.nest({leaf.name: np.array(leaf_value(observation, leaf.path), dtype=leaf.dtype)
                          for leaf in self.obs_leaves})

    def leaves_of(self, observation: Any) -> list[np.ndarray]:
        """The stored observation as one array per leaf, in layout order."""
        if not self.nested_obs:
            return [np.asarray(observation, dtype=self.obs_leaves[0].dtype)]
        return [np.asarray(leaf_value(observation, leaf.path), dtype=leaf.dtype) for leaf in self.obs_leaves]

    def batch(self, observations: list[Any]) -> dict[str, np.ndarray]:
        """Stored observations stacked into the batch a `Policy.act` takes, keyed like the buffer's columns
        ("obs", or "obs/<leaf>" for each leaf of a nested observation)."""
        if not self.nested_obs:  # np.array over equal-shaped arrays stacks them, without np.stack's checks
            return {"obs": np.array(observations) if len(observations) > 1 else np.asarray(observations[0])[None]}
        return {f"obs/{leaf.name}": np.stack([np.asarray(leaf_value(o, leaf.path), dtype=leaf.dtype)
                                              for o in observations])
                for leaf in self.obs_leaves}

    def nest(self, leaf_values: dict[str, np.ndarray]) -> Any:
        """Rebuild an observation (or a batch of them) from arrays keyed by leaf name."""
        if not self.nested_obs:
            return leaf_values[self.obs_leaves[0].name]
        out: dict = {}
        for leaf in self.obs_leaves:
            _set(out, leaf.path, leaf_values[leaf.name])
        return out


def action_mask_shape(action_space: spaces.Space) -> tuple[int, ...] | None:
    """Shape of a mask over `action_space`, or None when masks make no sense for it."""
    if isinstance(action_space, spaces.Discrete):
        return (int(action_space.n),)
    if isinstance(action_space, spaces.MultiDiscrete):
        return (int(np.sum(action_space.nvec)),)
    return None


def stored_obs_space(observation_space: spaces.Space) -> spaces.Space:
    """The observation space without its action mask: what pzasync stores (docs/transitions.md, rule 7)."""
    if isinstance(observation_space, spaces.Dict) and MASK_KEY in observation_space.spaces:
        rest = {k: v for k, v in observation_space.spaces.items() if k != MASK_KEY}
        return rest["observation"] if list(rest) == ["observation"] else spaces.Dict(rest)
    return observation_space


def agent_layout(
    agent: str, observation_space: spaces.Space, action_space: spaces.Space, info_mask: bool = False
) -> AgentLayout:
    """Build the storage layout of one agent; `info_mask` says the env passes masks in `info`."""
    mask_in_obs = False
    mask_shape: tuple[int, ...] | None = None
    obs_space = stored_obs_space(observation_space)
    if isinstance(observation_space, spaces.Dict) and MASK_KEY in observation_space.spaces:
        mask_in_obs = True
        mask_space = observation_space.spaces[MASK_KEY]
        if mask_space.shape is None:
            raise UnsupportedSpaceError(f"agent {agent!r}: its action mask's space {mask_space!r} has no shape")
        mask_shape = tuple(int(d) for d in mask_space.shape)
    elif info_mask:
        mask_shape = action_mask_shape(action_space)
        if mask_shape is None:
            raise UnsupportedSpaceError(
                f"agent {agent!r}: the env gives an action mask in info, but action space {action_space!r} "
                f"cannot be masked (only Discrete and MultiDiscrete can)"
            )
    obs_leaves = tuple(_leaf_for(obs_space, (), agent, "observation"))
    action_leaves = _leaf_for(action_space, (), agent, "action")
    if len(action_leaves) != 1:
        raise UnsupportedSpaceError(
            f"agent {agent!r}: action space {action_space!r} is nested; pzasync needs a single Box, Discrete, "
            f"MultiDiscrete or MultiBinary action space"
        )
    return AgentLayout(agent, obs_space, action_space, obs_leaves, action_leaves[0], mask_shape, mask_in_obs)


def env_layouts(env: Any, info_mask_agents: set[str] | frozenset[str] = frozenset()) -> dict[str, AgentLayout]:
    """Layouts of every possible agent of an AEC env."""
    return {
        agent: agent_layout(agent, env.observation_space(agent), env.action_space(agent), agent in info_mask_agents)
        for agent in env.possible_agents
    }


def probe_info_masks(env: Any, seed: int | None = None) -> set[str]:
    """Agents whose action mask arrives in `info`, found by resetting the env once and reading the infos."""
    env.reset(seed=seed)
    return {agent for agent, info in env.infos.items() if isinstance(info, dict) and MASK_KEY in info}


def uniform_legal(rng: np.random.Generator, mask: np.ndarray) -> int:
    """The index of a uniformly drawn nonzero entry of `mask` (which must have one): the same draw, from the same
    generator state, as `rng.choice(np.flatnonzero(mask))`, at a sixth of its cost (a random player's every move)."""
    legal = np.flatnonzero(mask)
    return int(legal[rng.integers(legal.size)])


def _clipper(low: np.ndarray, high: np.ndarray, dtype: Any) -> Callable[[Any], np.ndarray]:
    """A Box action clipped to its bounds, in the space's dtype."""
    return lambda a: np.clip(a, low, high).astype(dtype)


def stack_masks(masks: list[np.ndarray | None]) -> np.ndarray:
    """The action masks of rows of one layout that has masks, stacked (every row has one)."""
    present = [m for m in masks if m is not None]
    if len(present) != len(masks):
        raise ValueError(f"{len(masks) - len(present)} of {len(masks)} rows have no action mask: rows of one "
                         f"layout have a mask each or none")
    return np.stack(present)


def env_action_converter(layouts: dict[str, AgentLayout]) -> Callable[[str, Any], Any]:
    """Stored action -> what env.step gets: ints for Discrete, Box actions clipped to their bounds."""
    converters: dict[str, Callable[[Any], Any]] = {}
    for agent, layout in layouts.items():
        space = layout.action_space
        if isinstance(space, spaces.Discrete):
            converters[agent] = int
        elif isinstance(space, spaces.Box):
            converters[agent] = _clipper(space.low, space.high, space.dtype)
        else:
            converters[agent] = lambda a: a
    return lambda agent, action: converters[agent](action)
