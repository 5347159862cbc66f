"""The parallel API over the remote env protocol (docs/remote.md, "The parallel API"): which envs have one
(`as_parallel`), and `RemoteParallelEnv`, a PettingZoo `ParallelEnv` that mirrors one instance served through it.

A server whose env is simultaneous-move underneath says `"parallel": true` in its WELCOME and steps an instance a
whole cycle at a time: a PARALLEL_STEP record carries every live agent's action, and the CYCLE record that answers
it carries what the served parallel env's `step` returned (each agent's observation, reward, termination,
truncation and info) and its live agents after the step. `RemoteParallelEnv.step` returns exactly those dicts, so
anything that steps a parallel env in process steps it unchanged. With `deferred`, `reset` and `step` only queue
their request and return None: env copies (runtime/copies/remote.py) send a round's cycles of many instances in one
frame, and read each one's `result` once the reply is in.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec_wrapper

from pzasync.errors import EnvSpecError
from pzasync.remote.client import Connection, open_connection
from pzasync.remote.protocol import (
    ACTS,
    CYCLE_INFO,
    CYCLE_INFO_JSON,
    CYCLE_INFO_MASK,
    CYCLE_OBS,
    CYCLE_REWARD,
    CYCLE_TERMINATION,
    CYCLE_TRUNCATION,
    MASK_KEY,
)


def as_parallel(env: Any) -> ParallelEnv | None:
    """The parallel API of an env that is simultaneous-move underneath: a `ParallelEnv` itself, or the parallel
    env inside an AEC env made by `parallel_to_aec` (under any wrappers); None for any other env."""
    if isinstance(env, ParallelEnv):
        return env
    seen = 0
    while env is not None and seen < 64:
        if isinstance(env, parallel_to_aec_wrapper):
            return env.env
        env, seen = getattr(env, "env", None), seen + 1
    return None


def served_parallel(env: Any) -> bool | None:
    """Whether the server behind a remote env (a `RemoteEnv` or `RemoteParallelEnv`, under any wrappers) offers
    the parallel API; None for an env that is not served by another process."""
    seen = 0
    while env is not None and seen < 64:
        connection = getattr(env, "connection", None)
        if isinstance(connection, Connection):
            return connection.parallel
        env, seen = getattr(env, "env", None), seen + 1
    return None


def refusal(connection: Connection, source: str) -> EnvSpecError:
    """The error for a parallel API asked of a server that does not offer it."""
    return EnvSpecError(f"env {source!r}: its server ({connection.label}, env {connection.name!r}) does not offer the "
                        f"parallel API (its WELCOME has no \"parallel\": true: a turn-based env, or a server that "
                        f"speaks only the AEC protocol; docs/remote.md, \"The parallel API\"): use env_api='aec' "
                        f"(--env-api aec)")


class RemoteParallelEnv(ParallelEnv):
    """A parallel env mirroring one instance served by another process (module docstring)."""

    def __init__(self, connection: Connection, instance: int = 0, *, deferred: bool = False,
                 owns: Callable[[], None] | None = None) -> None:
        if not connection.parallel:
            raise refusal(connection, str(connection.address))
        self.connection, self.instance, self.deferred = connection, instance, deferred
        self._owns = owns
        layout = self.layout = connection.layout
        self.metadata = {"name": connection.name, "render_modes": [], "is_parallelizable": True}
        self.render_mode = None
        self.possible_agents = list(layout.agents)
        self.observation_spaces = dict(layout.observation_spaces)
        self.action_spaces = dict(layout.action_spaces)
        self.agents: list[str] = []
        #: What the last reply carried: (observations, infos) after a reset, (observations, rewards, terminations,
        #: truncations, infos) after a step; None while a request is unanswered.
        self.result: tuple | None = None
        self._resetting = False
        self._p = len(self.possible_agents)
        connection.attach(self)

    def observation_space(self, agent: str) -> Any:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self.action_spaces[agent]

    def forget(self) -> None:
        """Show nothing until the next reset (the instance is served afresh)."""
        self.agents, self.result = [], None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict] | None:
        self.agents, self.result, self._resetting = [], None, True
        connection = self.connection
        connection.queue_parallel_reset(self.instance, seed, options)
        if self.deferred:
            return None
        ticket = connection.flush_resets()
        assert ticket is not None, "a reset was just queued"
        connection.collect(ticket)
        return self.result

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict] | None:
        layout, p = self.layout, self._p
        acts, data = [0] * p, [b""] * p
        for agent, action in actions.items():
            i = layout.index.get(agent)
            if i is None:
                raise ValueError(f"{self}: an action for {agent!r}, which is not among possible_agents "
                                 f"{self.possible_agents}")
            acts[i], data[i] = ACTS, layout.actions[agent].encode(action)
        self.result, self._resetting = None, False
        connection = self.connection
        connection.queue_cycle(self.instance, layout.parallel_step_struct.pack(self.instance, *acts, *data))
        if self.deferred:
            return None
        ticket = connection.flush()
        assert ticket is not None, "a step was just queued"
        connection.collect(ticket)
        return self.result

    def apply_cycle(self, row: tuple, infos: list[dict]) -> None:
        """Show a cycle record (`EnvLayout.cycle_struct`: instance, n_agents, then by agent index P agents, P flags,
        P rewards, P terminations, P truncations, P observations, P masks) with its infos' JSON parts, in order."""
        p, names, layout = self._p, self.possible_agents, self.layout
        self.agents = [names[i] for i in row[2:2 + row[1]]]
        observations: dict[str, Any] = {}
        rewards: dict[str, float] = {}
        terminations: dict[str, bool] = {}
        truncations: dict[str, bool] = {}
        out_infos: dict[str, dict] = {}
        json_at = 0
        for i, flags in enumerate(row[2 + p:2 + 2 * p]):
            if not flags:
                continue
            agent = names[i]
            if flags & CYCLE_OBS:
                observations[agent] = layout.obs[agent].decode(row[2 + 5 * p + i])
            if flags & CYCLE_REWARD:
                rewards[agent] = row[2 + 2 * p + i]
            if flags & CYCLE_TERMINATION:
                terminations[agent] = row[2 + 3 * p + i]
            if flags & CYCLE_TRUNCATION:
                truncations[agent] = row[2 + 4 * p + i]
            if flags & CYCLE_INFO:
                info: dict = {}
                if flags & CYCLE_INFO_JSON:
                    info.update(infos[json_at])
                    json_at += 1
                if flags & CYCLE_INFO_MASK:
                    info[MASK_KEY] = np.frombuffer(row[2 + 6 * p + i], np.int8, layout.masks[agent]).copy()
                out_infos[agent] = info
        self.result = ((observations, out_infos) if self._resetting else
                       (observations, rewards, terminations, truncations, out_infos))

    def state(self) -> np.ndarray:
        raise NotImplementedError(f"{self.connection.label}: state() is not part of the remote env protocol")

    def render(self) -> None:
        return None

    def close(self) -> None:
        if self._owns is not None:
            owns, self._owns = self._owns, None
            owns()

    def __str__(self) -> str:
        return f"RemoteParallelEnv({self.connection.name!r} at {self.connection.address}, instance {self.instance})"


def connect_parallel(address: str, *, timeout_s: float = 60.0, instance: int = 0,
                     instances: int | None = None) -> RemoteParallelEnv:
    """A parallel env served at `address` (as `connect`, through the parallel API); EnvSpecError, naming the env,
    where its server does not offer that API. Its `close` also closes the connection (and stops the server a cmd:
    template launched)."""
    connection, owns = open_connection(address, timeout_s=timeout_s, instances=instances)
    try:
        if not connection.parallel:
            raise refusal(connection, address)
        return RemoteParallelEnv(connection, instance, owns=owns)
    except BaseException:
        owns()
        raise
