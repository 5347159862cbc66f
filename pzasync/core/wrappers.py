"""Env wrappers named by text, applied when an env is made: the preprocessing a recipe or a user asks for
(docs/running.md, "Env wrappers"), carried by `EnvSpec.wrappers` into every process and recorded in run.json.

A wrapper spec is `NAME[,KEY=VALUE...]`, as learner specs are written: a bare NAME is a SuperSuit wrapper
("color_reduction_v0,mode=B", "resize_v1,x_size=84,y_size=84", "frame_stack_v1,stack_size=3"), and
"module:callable" any function that takes the env as its first argument and returns the wrapped env.
"""

from __future__ import annotations

from typing import Any, Sequence

from pzasync.core.observed_once import observed_once
from pzasync.errors import EnvSpecError, UserInputError
from pzasync.specs import parse_learner_spec


def parse_wrapper(text: str) -> tuple[str, dict[str, Any]]:
    """'resize_v1,x_size=84,y_size=84' -> ('resize_v1', {'x_size': 84, 'y_size': 84}); EnvSpecError if empty
    or malformed."""
    try:
        spec = parse_learner_spec(text)
    except UserInputError as exc:
        raise EnvSpecError(f"env wrapper {text!r}: {exc}") from None
    name, options = (spec, {}) if isinstance(spec, str) else spec
    if not name:
        raise EnvSpecError(f"env wrapper {text!r}: no wrapper name")
    return name, options


def resolve_wrapper(name: str) -> Any:
    """The wrapper function `name` names: a SuperSuit wrapper, or "module:callable"."""
    import importlib

    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EnvSpecError(f"env wrapper {name!r}: cannot import {module_name!r} ({exc})") from None
    else:
        try:
            module = importlib.import_module("supersuit")
        except ImportError:
            raise EnvSpecError(f"env wrapper {name!r} is a SuperSuit wrapper, and supersuit is not installed "
                               f"(pip install 'pzasync[envs]')") from None
        attr = name
    wrapper = getattr(module, attr, None)
    if not callable(wrapper):
        raise EnvSpecError(f"env wrapper {name!r}: {module.__name__} has no wrapper {attr!r}")
    return wrapper


def apply_wrappers(env: Any, wrappers: Sequence[str]) -> Any:
    """`env` wrapped by each spec of `wrappers` in order (the first innermost). A wrapper that takes a parallel env
    by converting it to AEC and back (SuperSuit's observation lambdas) comes back observing each agent once a
    cycle (`observed_once`)."""
    for text in wrappers:
        name, options = parse_wrapper(text)
        try:
            env = observed_once(resolve_wrapper(name)(env, **options))
        except EnvSpecError:
            raise
        except Exception as exc:  # noqa: BLE001 - a wrapper refusing the env or its options, reported by name
            raise EnvSpecError(f"env wrapper {text!r} failed: {type(exc).__name__}: {exc}") from exc
    return env
