"""What a server sends after every env step (docs/remote.md, "Semantics"): a snapshot of the env as PettingZoo
shows it, packed as one fixed-size record, and the dead agents' turns that follow, stepped with None. On the
parallel API (docs/remote.md, "The parallel API"), what a parallel env's `reset` or `step` returned, as one cycle
record per instance (`Cycles`).

A snapshot is read per step, so the reads are kept short: the env's state attributes are read where they
live, past PettingZoo's forwarding wrappers (`EnvState`), an env whose agents are all its possible agents in
order (the common case) takes its rewards, terminations and truncations in one pass each, and the whole
record is one `struct.pack` (`EnvLayout.snapshot_struct`).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from pzasync.errors import RemoteSpaceError
from pzasync.remote.json_values import plain
from pzasync.remote.protocol import (
    CYCLE_INFO,
    CYCLE_INFO_JSON,
    CYCLE_INFO_MASK,
    CYCLE_OBS,
    CYCLE_REWARD,
    CYCLE_TERMINATION,
    CYCLE_TRUNCATION,
    INFO_JSON,
    INFO_MASK,
    MASK_KEY,
    NO_AGENT,
    NO_OBS,
    EnvLayout,
    Kind,
    info_tail,
    packed_frame,
)

#: Dead turns stepped with None in a row before the server calls the env broken (an env that never moves on).
MAX_DEAD_TURNS = 100_000

_STATE = ("agents", "agent_selection", "rewards", "_cumulative_rewards", "terminations", "truncations", "infos")
_NAMES = frozenset(_STATE)


class UnfitValue(Exception):
    """A value the env showed that its spaces cannot carry (an observation, an info, a reward): the request is
    refused with a `space` error naming `instance` and `agent`."""

    def __init__(self, message: str, instance: int, agent: Any) -> None:
        super().__init__(message)
        self.instance, self.agent = instance, agent


class EnvState:
    """An AEC env's state attributes read where they live, past PettingZoo's forwarding wrappers (whose
    `__getattr__` costs about a microsecond per wrapper and name, several times per step). Each read first
    checks that no wrapper above the owner has set one of the names itself; if one has, it reads through the
    wrappers as before."""

    def __init__(self, env: Any) -> None:
        self.env, self.owner, self.skipped = env, env, []
        try:
            from pettingzoo.utils.wrappers import BaseWrapper
        except ImportError:  # pragma: no cover
            return
        obj = env
        while isinstance(obj, BaseWrapper) and "env" in vars(obj) and not any(n in vars(obj) for n in _STATE):
            if any(n in vars(k) for k in type(obj).__mro__ if k is not BaseWrapper and k.__module__.split(".")[0]
                   != "pettingzoo" for n in _STATE):
                break  # a wrapper class of the user's that defines one of the names: read through it
            self.skipped.append(vars(obj))
            obj = vars(obj)["env"]
        self.owner = obj

    def get(self) -> Any:
        """The object to read the state attributes from now."""
        for own in self.skipped:
            if not _NAMES.isdisjoint(own):
                return self.env
        return self.owner


class EnvStates:
    """Each served env's `EnvState`, made on first use."""

    def __init__(self) -> None:
        self._states: dict[int, EnvState] = {}

    def owner(self, env: Any) -> Any:
        """The object to read `env`'s state attributes from now."""
        state = self._states.get(id(env))
        if state is None or state.env is not env:
            state = self._states[id(env)] = EnvState(env)
        return state.get()


class Snapshots:
    """The STATE reply being built: one packed snapshot record per env step, and the infos' JSON tail."""

    def __init__(self, layout: EnvLayout, states: EnvStates) -> None:
        self.layout, self.states = layout, states
        self.records: list[bytes] = []
        self.infos: list[dict] = []

    def chain(self, env: Any, instance: int) -> None:
        """Snapshot the env, then step each dead agent whose turn it is with None, snapshotting each step."""
        owner = self.add(env, instance)
        for _ in range(MAX_DEAD_TURNS):
            agent = owner.agent_selection
            if not owner.agents or not (owner.terminations.get(agent) or owner.truncations.get(agent)):
                return
            env.step(None)
            owner = self.add(env, instance)
        raise RuntimeError(f"{MAX_DEAD_TURNS} dead agents' turns in a row: the env never selects a live agent")

    def add(self, env: Any, instance: int) -> Any:
        """Snapshot `env` as `instance`; returns the object its state was read from."""
        layout = self.layout
        owner = self.states.owner(env)
        agents = owner.agents
        rewards, cumulative = owner.rewards, owner._cumulative_rewards
        terms, truncs = owner.terminations, owner.truncations
        if agents == layout.agents:  # agent k at index k
            order: Any = layout.identity
            fields = ([rewards.get(a, 0.0) for a in agents] + [cumulative.get(a, 0.0) for a in agents]
                      + [terms.get(a, False) for a in agents] + [truncs.get(a, False) for a in agents])
        else:
            order, fields = self._by_index(agents, rewards, cumulative, terms, truncs)
        selected = owner.agent_selection
        flags, obs, mask = NO_OBS, b"", b""
        if selected in layout.index and selected in agents:
            observation = env.observe(selected)
            try:
                obs = layout.obs[selected].encode(observation)
                info = owner.infos.get(selected)
                flags, mask = info_parts(layout, selected, info, self.infos) if info else (0, b"")
            except RemoteSpaceError as exc:
                raise UnfitValue(str(exc), instance, selected) from None
        try:
            self.records.append(layout.snapshot_struct.pack(instance, flags, layout.index.get(selected, NO_AGENT),
                                                            len(agents), *order, *fields, obs, mask))
        except struct.error as exc:
            raise UnfitValue(f"a reward, cumulative reward, termination or truncation of {agents} is not a number "
                             f"({exc}): rewards {dict(rewards)!r}, cumulative {dict(cumulative)!r}",
                             instance, selected) from None
        return owner

    def _by_index(self, agents: list, rewards: dict, cumulative: dict, terms: dict, truncs: dict) -> tuple[list, list]:
        """(agent indices padded to P, the four fields by agent index) of an env with only some agents live,
        or in another order."""
        layout = self.layout
        p = len(layout.agents)
        try:
            order = [layout.index[a] for a in agents]
        except KeyError as exc:
            raise RemoteSpaceError(f"agent {exc.args[0]!r} is not among possible_agents {layout.agents}; the protocol "
                                   f"needs every agent declared up front") from None
        fields: list = [0.0] * (2 * p) + [False] * (2 * p)
        for agent, i in zip(agents, order):
            fields[i] = rewards.get(agent, 0.0)
            fields[p + i] = cumulative.get(agent, 0.0)
            fields[2 * p + i] = terms.get(agent, False)
            fields[3 * p + i] = truncs.get(agent, False)
        return order + [0] * (p - len(order)), fields

    def frame(self) -> bytes:
        """The STATE frame: the records, then the infos' tail."""
        return packed_frame(Kind.STATE, self.records, info_tail(self.infos) if self.infos else b"")


class Cycles:
    """The CYCLE reply being built: one cycle record per instance (what its parallel env's `reset` or `step`
    returned, by agent index, and the live agents after it), and the infos' JSON tail."""

    def __init__(self, layout: EnvLayout) -> None:
        self.layout = layout
        self.records: list[bytes] = []
        self.infos: list[dict] = []

    def add(self, instance: int, agents: list, observations: dict, infos: dict | None, rewards: dict | None = None,
            terminations: dict | None = None, truncations: dict | None = None) -> None:
        """Record what a reset (`observations`, `infos`) or a step (all five dicts) of `instance` returned, and
        `agents`, the env's live agents after it. UnfitValue for a value its space cannot carry."""
        layout = self.layout
        p, index = len(layout.agents), layout.index
        flags, rewards_at, terms_at, truncs_at = [0] * p, [0.0] * p, [False] * p, [False] * p
        obs_at, masks_at = [b""] * p, [b""] * p

        def at(agent: Any, bit: int) -> int:
            i = index.get(agent)
            if i is None:
                raise UnfitValue(f"agent {agent!r} is not among possible_agents {layout.agents}; the protocol needs "
                                 f"every agent declared up front", instance, agent)
            flags[i] |= bit
            return i

        for agent, observation in observations.items():
            try:
                obs_at[at(agent, CYCLE_OBS)] = layout.obs[agent].encode(observation)
            except RemoteSpaceError as exc:
                raise UnfitValue(str(exc), instance, agent) from None
        for values, bit, out in ((rewards, CYCLE_REWARD, rewards_at), (terminations, CYCLE_TERMINATION, terms_at),
                                 (truncations, CYCLE_TRUNCATION, truncs_at)):
            for agent, value in (values or {}).items():
                out[at(agent, bit)] = value
        tail: dict[int, dict] = {}
        for agent, info in (infos or {}).items():
            i = at(agent, CYCLE_INFO)
            extra: list[dict] = []
            try:
                parts, masks_at[i] = info_parts(layout, agent, info, extra)
            except RemoteSpaceError as exc:
                raise UnfitValue(str(exc), instance, agent) from None
            flags[i] |= (CYCLE_INFO_JSON if parts & INFO_JSON else 0) | (CYCLE_INFO_MASK if parts & INFO_MASK else 0)
            if extra:
                tail[i] = extra[0]
        try:
            order = [index[a] for a in agents]
        except KeyError as exc:
            raise UnfitValue(f"agent {exc.args[0]!r} is not among possible_agents {layout.agents}; the protocol needs "
                             f"every agent declared up front", instance, exc.args[0]) from None
        try:
            self.records.append(layout.cycle_struct.pack(instance, len(order), *order, *[0] * (p - len(order)), *flags,
                                                         *rewards_at, *terms_at, *truncs_at, *obs_at, *masks_at))
        except struct.error as exc:
            raise UnfitValue(f"a reward, termination or truncation is not a number ({exc}): rewards {rewards!r}, "
                             f"terminations {terminations!r}, truncations {truncations!r}", instance, None) from None
        self.infos.extend(tail[i] for i in sorted(tail))

    def frame(self) -> bytes:
        """The CYCLE frame: the records, then the infos' tail."""
        return packed_frame(Kind.CYCLE, self.records, info_tail(self.infos) if self.infos else b"")


def info_parts(layout: EnvLayout, agent: str, info: Any, infos: list[dict]) -> tuple[int, bytes]:
    """An agent's info as a record carries it: (flags, the action mask's bytes); the rest of the info, made plain,
    is appended to `infos` (the JSON tail)."""
    if not info:
        return 0, b""
    flags, rest, data = 0, info, b""
    mask = info.get(MASK_KEY) if isinstance(info, dict) else None
    size = layout.masks[agent]
    if mask is not None and size:
        array = np.asarray(mask).reshape(-1)
        if array.size != size:
            raise RemoteSpaceError(f"agent {agent!r}: info action mask of {array.size} entries, but its action space "
                                   f"{layout.action_spaces[agent]!r} needs {size}")
        data = array.astype(np.uint8).tobytes()
        flags |= INFO_MASK
        rest = {k: v for k, v in info.items() if k != MASK_KEY} if len(info) > 1 else None
    if rest:
        infos.append(plain(rest if isinstance(rest, dict) else {"info": rest}, f"agent {agent!r}: info"))
        flags |= INFO_JSON
    return flags, data
