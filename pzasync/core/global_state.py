"""The env's global state beside an agent's own observation, for learners whose critic reads it (MAPPO).

A learner that asks for the state (`Learner.state_source`) gets, for each of its agents, observations of the
form `{"observation": <what the env gives>, "state": <the global state now>}` (the action mask, where the env
puts one in the observation, stays beside them and is split out as usual). The env is wrapped once, in
`EnvSpec.make`, so every kind of env copies, the evaluator and `rollout` see the same thing, and the state
follows the observation's AEC rules exactly (docs/transitions.md, "The global state"): it is read when the agent's
observation is read, at its turn, so a transition holds the state at its decision and, in `next_obs`, the
state at the agent's next turn (or when the episode ended or was cut). It is stored like any observation leaf:
once per frame where observations are stored once.

Where the state comes from (`StateRequest.source`):
  - "env": the env's `state()`, checked against its `state_space`;
  - "concat": every possible agent's current observation (its action mask left out), flattened with
    gymnasium's `flatten` and concatenated in `possible_agents` order; zeros for an agent no longer in
    `env.agents`. This is what users build by hand for envs without `state()`;
  - "auto": "env" where the env has a `state_space`, else "concat";
  - "module:callable": a user function `fn(env) -> array` (e.g. a downscaled frame where `state()` is a full
    image); its shape and dtype are fixed by its first value after a reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseWrapper

from pzasync.core.spaces import MASK_KEY, AgentLayout, stored_obs_space
from pzasync.errors import EnvSpecError
from pzasync.specs import import_object

#: Keys of an observation with the state beside it.
OBSERVATION_KEY, STATE_KEY = "observation", "state"
STATE_SOURCES = ("auto", "env", "concat")


@dataclass(frozen=True)
class StateRequest:
    """Which agents observe the global state beside their own observation, and where it comes from."""

    agents: tuple[str, ...]
    source: str = "auto"

    def as_dict(self) -> dict[str, Any]:
        """The run.json form (`from_dict` reads it back)."""
        return {"agents": list(self.agents), "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> StateRequest | None:
        return None if not data else cls(tuple(data["agents"]), str(data.get("source", "auto")))


def carries_state(layout: AgentLayout) -> bool:
    """Whether observations of this layout carry the global state beside the agent's own (the form above)."""
    heads = {leaf.path[:1] for leaf in layout.obs_leaves}
    return (STATE_KEY,) in heads and (OBSERVATION_KEY,) in heads


def narrowed(request: StateRequest | None, agents: Any) -> StateRequest | None:
    """`request` kept for those of its agents in `agents` only (None where none is left)."""
    if request is None:
        return None
    keep = tuple(a for a in request.agents if a in set(agents))
    return StateRequest(keep, request.source) if keep else None


def check_source(source: Any, agent: str) -> str:
    """A state source as a learner option gives it: one of STATE_SOURCES or an importable 'module:callable'."""
    if not isinstance(source, str) or not (source in STATE_SOURCES or ":" in source):
        raise EnvSpecError(f"agent {agent!r}: state source {source!r} must be one of {STATE_SOURCES} or "
                           f"'module:callable'")
    if ":" in source and not callable(import_object(source, agent, what="state function")):
        raise EnvSpecError(f"agent {agent!r}: state function {source!r} is not callable")
    return source


def _has_env_state(env: Any) -> bool:
    try:
        return getattr(env, "state_space", None) is not None
    except Exception:  # noqa: BLE001 - a wrapper that refuses the name has no state either
        return False


def _concat_reader(env: Any, env_name: str) -> tuple[Callable[[], np.ndarray], spaces.Box]:
    """The 'concat' source: every possible agent's observation (mask left out), flattened, in agent order."""
    parts = []
    for agent in env.possible_agents:
        full = env.observation_space(agent)
        stored = stored_obs_space(full)
        try:
            flat = spaces.flatten_space(stored)
        except NotImplementedError:
            flat = None
        if not isinstance(flat, spaces.Box):  # a Sequence or Graph space (or one inside) flattens to no Box
            raise EnvSpecError(f"env {env_name!r}: agent {agent!r}'s observation space {stored!r} cannot be flattened "
                               f"into a global state; give the learner option state='module:callable'")
        has_mask = isinstance(full, spaces.Dict) and MASK_KEY in full.spaces
        parts.append((agent, stored, has_mask, flat))
    low = np.concatenate([np.asarray(f.low, np.float32).ravel() for *_, f in parts])
    high = np.concatenate([np.asarray(f.high, np.float32).ravel() for *_, f in parts])
    space = spaces.Box(low, high, dtype=np.float32)

    def read() -> np.ndarray:
        alive = set(env.agents)
        out = []
        for agent, stored, has_mask, flat in parts:
            if agent not in alive:
                out.append(np.zeros(flat.shape, np.float32))
                continue
            obs = env.observe(agent)
            if has_mask:
                rest = {k: v for k, v in obs.items() if k != MASK_KEY}
                obs = rest[OBSERVATION_KEY] if list(rest) == [OBSERVATION_KEY] else rest
            out.append(np.asarray(spaces.flatten(stored, obs), np.float32))
        return np.concatenate(out)

    return read, space


def state_reader(env: Any, source: str, env_name: str) -> tuple[Callable[[], np.ndarray], spaces.Box]:
    """A function reading the global state of `env` (an AEC env that was reset), and its space."""
    if source == "auto":
        source = "env" if _has_env_state(env) else "concat"
    if source == "concat":
        return _concat_reader(env, env_name)
    if source == "env":
        if not _has_env_state(env):
            raise EnvSpecError(f"env {env_name!r} has no state_space (and no state()): use state='concat' (every "
                               f"agent's observation concatenated) or a state function 'module:callable'")
        space = env.state_space
        if not isinstance(space, spaces.Box):
            raise EnvSpecError(f"env {env_name!r}: its state_space {space!r} is not a Box; give a state function")
        return env.state, space
    fn = import_object(source, "*", what="state function")
    first = np.asarray(fn(env))
    if first.dtype.kind not in "fiub" or first.ndim == 0:
        raise EnvSpecError(f"env {env_name!r}: state function {source!r} returned {first.dtype} of shape "
                           f"{first.shape}; it must return a numeric array")
    dtype: np.dtype = first.dtype if first.dtype.kind in "fu" else np.dtype(np.float32)
    return (lambda: fn(env)), spaces.Box(-np.inf if dtype.kind == "f" else 0,
                                         np.inf if dtype.kind == "f" else np.iinfo(dtype).max,
                                         shape=first.shape, dtype=dtype)


def with_state_space(observation_space: spaces.Space, state_space: spaces.Box) -> spaces.Dict:
    """An agent's observation space with the state beside it (a mask in the observation stays a key)."""
    if isinstance(observation_space, spaces.Dict) and MASK_KEY in observation_space.spaces:
        return spaces.Dict({OBSERVATION_KEY: stored_obs_space(observation_space),
                            MASK_KEY: observation_space.spaces[MASK_KEY], STATE_KEY: state_space})
    return spaces.Dict({OBSERVATION_KEY: observation_space, STATE_KEY: state_space})


def _declared_state_space(env: Any, source: str, env_name: str) -> spaces.Box | None:
    """The state's space before the first reset: the env's declared one, or the concatenation's (both known without
    a reset); None for a state function's, known only after one."""
    if source == "concat" or (source == "auto" and not _has_env_state(env)):
        return _concat_reader(env, env_name)[1]
    if source in ("env", "auto"):
        return env.state_space
    return None


def beside(obs: Any, state: np.ndarray) -> dict[str, Any]:
    """An agent's observation with the state beside it (a mask in the observation stays a key)."""
    if isinstance(obs, dict) and MASK_KEY in obs:
        rest = {k: v for k, v in obs.items() if k != MASK_KEY}
        inner = rest[OBSERVATION_KEY] if list(rest) == [OBSERVATION_KEY] else rest
        return {OBSERVATION_KEY: inner, MASK_KEY: obs[MASK_KEY], STATE_KEY: state}
    return {OBSERVATION_KEY: obs, STATE_KEY: state}


def checked_state(read: Callable[[], np.ndarray], space: spaces.Box, source: str, env_name: str) -> np.ndarray:
    """The state `read` returns, refused (naming the env and the source) when its shape is not its space's."""
    state = np.asarray(read())
    if state.shape != space.shape:
        raise EnvSpecError(f"env {env_name!r}: the global state ({source}) has shape {state.shape}, but its space "
                           f"{space} says {space.shape}")
    return state


class GlobalStateObservations(BaseWrapper):
    """An AEC env whose `request.agents` observe `{"observation": ..., "state": ...}` (module docstring).

    The reader is made at the first reset (some envs' `state()` needs one); every state it returns is checked
    against the state space's shape, so a state function that changes shape fails at once, naming it."""

    def __init__(self, env: Any, request: StateRequest, env_name: str) -> None:
        super().__init__(env)
        self.request = request
        self.env_name = env_name
        self.state_agents = frozenset(request.agents)
        unknown = sorted(self.state_agents - set(env.possible_agents))
        if unknown:
            raise EnvSpecError(f"env {env_name!r}: the global state was asked for unknown agent(s) {unknown}")
        self.read_state: Callable[[], np.ndarray] | None = None
        self.state_space: spaces.Box | None = None
        self._spaces: dict[str, spaces.Space] = {}

    def _ensure_reader(self) -> tuple[Callable[[], np.ndarray], spaces.Box]:
        """The state's reader and space, made at the first call after a reset."""
        read, space = self.read_state, self.state_space
        if read is None or space is None:
            read, space = self.read_state, self.state_space = state_reader(self.env, self.request.source,
                                                                           self.env_name)
            self._spaces.clear()
        return read, space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.env.reset(seed=seed, options=options)
        self._ensure_reader()

    def observation_space(self, agent: str) -> spaces.Space:
        inner = self.env.observation_space(agent)
        if agent not in self.state_agents:
            return inner
        space = self._spaces.get(agent)
        if space is None:
            state_space = self.state_space or _declared_state_space(self.env, self.request.source, self.env_name)
            if state_space is None:
                self.env.reset()
                state_space = self._ensure_reader()[1]
            self.state_space = state_space
            space = self._spaces[agent] = with_state_space(inner, state_space)
        return space

    def observe(self, agent: str) -> Any:
        obs = self.env.observe(agent)
        if agent not in self.state_agents:
            return obs
        read, state_space = self.read_state, self.state_space
        if read is None or state_space is None:
            raise RuntimeError(f"env {self.env_name!r}: observe() called before reset()")
        return beside(obs, checked_state(read, state_space, self.request.source, self.env_name))

    def state(self) -> np.ndarray:
        read, _ = self._ensure_reader()
        return np.asarray(read())


class _ParallelView:
    """A parallel env seen as `state_reader` reads an AEC env: its agents, spaces, `state()`, and `observe(agent)`
    from the observations its last reset or step returned."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.observations: dict[str, Any] = {}

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    @property
    def possible_agents(self) -> list[str]:
        return list(self.env.possible_agents)

    @property
    def state_space(self) -> Any:
        return getattr(self.env, "state_space", None)

    def observation_space(self, agent: str) -> spaces.Space:
        return self.env.observation_space(agent)

    def observe(self, agent: str) -> Any:
        return self.observations[agent]

    def state(self) -> np.ndarray:
        return self.env.state()


class ParallelGlobalState(ParallelEnv):
    """A parallel env whose `request.agents` observe `{"observation": ..., "state": ...}`: the parallel path's
    counterpart of `GlobalStateObservations`, the state read once per cycle (after each reset and step), when
    every agent observes."""

    def __init__(self, env: Any, request: StateRequest, env_name: str) -> None:
        self.env = env
        self.request = request
        self.env_name = env_name
        self.state_agents = frozenset(request.agents)
        unknown = sorted(self.state_agents - set(env.possible_agents))
        if unknown:
            raise EnvSpecError(f"env {env_name!r}: the global state was asked for unknown agent(s) {unknown}")
        self.view = _ParallelView(env)
        self.read_state: Callable[[], np.ndarray] | None = None
        self.state_space: spaces.Box | None = None
        self._spaces: dict[str, spaces.Space] = {}
        self.metadata = getattr(env, "metadata", {})
        self.possible_agents = list(env.possible_agents)

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    def action_space(self, agent: str) -> spaces.Space:
        return self.env.action_space(agent)

    def observation_space(self, agent: str) -> spaces.Space:
        inner = self.env.observation_space(agent)
        if agent not in self.state_agents:
            return inner
        space = self._spaces.get(agent)
        if space is None:
            state_space = self.state_space or _declared_state_space(self.view, self.request.source, self.env_name)
            if state_space is None:
                self.reset()
                state_space = self._ensure_reader()[1]
            self.state_space = state_space
            space = self._spaces[agent] = with_state_space(inner, state_space)
        return space

    def _ensure_reader(self) -> tuple[Callable[[], np.ndarray], spaces.Box]:
        """The state's reader and space, made at the first call after a reset."""
        read, space = self.read_state, self.state_space
        if read is None or space is None:
            read, space = self.read_state, self.state_space = state_reader(self.view, self.request.source,
                                                                           self.env_name)
            self._spaces.clear()
        return read, space

    def _with_state(self, observations: dict[str, Any]) -> dict[str, Any]:
        self.view.observations = dict(observations)
        read, space = self._ensure_reader()
        state = checked_state(read, space, self.request.source, self.env_name)
        return {agent: beside(obs, state) if agent in self.state_agents else obs
                for agent, obs in observations.items()}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._with_state(observations), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._with_state(observations), rewards, terminations, truncations, infos

    def state(self) -> np.ndarray:
        return np.asarray(self._ensure_reader()[0]())

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
