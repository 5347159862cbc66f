"""Learners: the plug-in base classes, the built-in ones, and resolution of user learner specs.

A learner spec is a built-in name (`"dqn"`, `"ppo"`, `"mappo"`, `"bc"`, `"random"`, `"fixed"`, and the scripted players
`"one_ply"`, `"negamax"`, `"perfect"`), a `"module:Class"` path, a name registered under the `pzasync.learners`
entry-point group, or a Learner subclass; optionally paired with an options dict: `("ppo", {"lr": 3e-4})`.
A `"module:callable"` (or object) that is a plain function `fn(obs, mask) -> action` or a `Policy` subclass is a
user's scripted player: it is wrapped in a never-learning `ScriptedPlayer`.
"""

from __future__ import annotations

import difflib
from importlib.metadata import entry_points
from typing import Any

from pzasync.config.declare import Check, option
from pzasync.core.global_state import StateRequest, check_source
from pzasync.errors import ConfigError
from pzasync.learners.base import (
    Batch,
    Learner,
    LearnerContext,
    Policy,
    policy_size,
    policy_to_vector,
    trajectory_ids,
    vector_to_policy,
)
from pzasync.learners.options import LearnerOptions, Option
from pzasync.specs import import_object

BUILTIN: dict[str, str] = {
    "dqn": "pzasync.learners.dqn:DQNLearner",
    "ppo": "pzasync.learners.ppo:PPOLearner",
    "mappo": "pzasync.learners.mappo:MAPPOLearner",
    "bc": "pzasync.learners.bc:BCLearner",
    "random": "pzasync.learners.players:RandomPlayer",
    "fixed": "pzasync.learners.players:FixedPlayer",
    "one_ply": "pzasync.learners.scripted:OnePlyPlayer",
    "negamax": "pzasync.learners.scripted:NegamaxPlayer",
    "perfect": "pzasync.learners.scripted:PerfectPlayer",
}
#: The built-in scripted (never-learning, board-game) players.
SCRIPTED: tuple[str, ...] = ("one_ply", "negamax", "perfect")
ENTRY_POINT_GROUP = "pzasync.learners"

LearnerSpec = Any  # str | type[Learner] | tuple[str | type[Learner], dict]


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_learner_names() -> list[str]:
    """Built-in names plus those registered by installed packages."""
    return sorted(set(BUILTIN) | set(_entry_points()))


def _import_path(path: str, agent: str) -> type:
    return import_object(path, agent, "learner", "learner class")


def resolve_learner(spec: LearnerSpec, agent: str = "?") -> tuple[type[Learner], dict[str, Any]]:
    """Turn a learner spec into (Learner subclass, options), with errors that name the agent."""
    options: dict[str, Any] = {}
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[1], dict):
            raise ConfigError(f"agent {agent!r}: a learner spec tuple must be (name, options dict), got {spec!r}")
        spec, options = spec
    if isinstance(spec, str):
        if spec in BUILTIN:
            cls = _import_path(BUILTIN[spec], agent)
        elif spec in (eps := _entry_points()):
            cls = eps[spec].load()
        elif ":" in spec or "." in spec:
            cls = _import_path(spec, agent)
        else:
            close = difflib.get_close_matches(spec, known_learner_names(), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(
                f"agent {agent!r}: unknown learner {spec!r}; known learners: {', '.join(known_learner_names())}, "
                f"or 'package.module:Class'.{hint}"
            )
    else:
        cls = spec
    if not (isinstance(cls, type) and issubclass(cls, Learner)):
        from pzasync.learners.scripted import ScriptedPlayer, is_player_object, player_reference

        if not is_player_object(cls):
            raise ConfigError(f"agent {agent!r}: {cls!r} is neither a subclass of pzasync.Learner nor a player "
                              f"(a function fn(obs, mask) -> action, or a pzasync.Policy subclass)")
        player = spec if isinstance(spec, str) and (":" in spec or "." in spec) else player_reference(cls)
        return ScriptedPlayer, {"player": player, **options}
    return cls, dict(options)


def state_request(resolved: dict[str, tuple[type[Learner], dict[str, Any]]], env_name: str) -> StateRequest | None:
    """The agents whose learner reads the env's global state (`Learner.state_source`), which must all name the
    same source (one env wrapper serves them); None when no learner reads it."""
    asked = {agent: cls.state_source(options) for agent, (cls, options) in resolved.items()}
    sources = {agent: check_source(source, agent) for agent, source in asked.items() if source is not None}
    if not sources:
        return None
    if len(set(sources.values())) > 1:
        raise ConfigError(f"env {env_name!r}: learners ask for the global state from different sources {sources}; "
                          f"give every learner the same state option")
    return StateRequest(tuple(sources), next(iter(sources.values())))


def is_scripted(spec: LearnerSpec) -> bool:
    """Whether `spec` names a player that never learns (scripted, random, fixed, or a user's function/Policy)."""
    try:
        cls, _ = resolve_learner(spec)
    except ConfigError:
        return False
    return not cls.learns


__all__ = [
    "BUILTIN",
    "SCRIPTED",
    "Batch",
    "Check",
    "Learner",
    "LearnerContext",
    "LearnerOptions",
    "Option",
    "Policy",
    "is_scripted",
    "known_learner_names",
    "option",
    "policy_size",
    "policy_to_vector",
    "resolve_learner",
    "state_request",
    "trajectory_ids",
    "vector_to_policy",
]
