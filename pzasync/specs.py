"""Text specs shared by the command line, the run options, the league and the evaluation: learner specs
('dqn', 'ppo,lr=3e-4', 'pkg.mod:Class,opt=1'), KEY=VALUE options, league opponent mixes, and user objects
named by import path. Parsing only: nothing here knows what a learner or a run is."""

from __future__ import annotations

import importlib
import math
from typing import Any

from pzasync.errors import ConfigError, UserInputError

#: League opponent kinds that are the unit's own policies (anything else in a mix names a player).
LATEST, SNAPSHOT = "latest", "snapshot"


def parse_key_value(item: str, error: str) -> tuple[str, Any]:
    """'KEY=VALUE' -> (key, value read as a Python literal, else kept as text); UserInputError(error) if malformed."""
    import ast

    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise UserInputError(error)
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, raw


def parse_learner_spec(text: str) -> Any:
    """'dqn' or 'ppo,lr=3e-4,batch_size=256' or 'pkg.mod:Class,opt=1' -> a learner spec."""
    name, *pairs = [part.strip() for part in text.split(",")]
    options = dict(parse_key_value(pair, f"learner option {pair!r} in {text!r} is not KEY=VALUE") for pair in pairs)
    return (name, options) if options else name


def learner_spec_text(spec: Any) -> Any:
    """The inverse of `parse_learner_spec` where the text form can say it: ('ppo', {'lr': 3e-4}) ->
    'ppo,lr=0.0003'. Options whose values hold a comma (lists) keep the (name, options) form; a dict of specs
    (per agent, "*" the default) maps each; anything else (a class) is returned as it is."""
    if isinstance(spec, dict):
        return {agent: learner_spec_text(one) for agent, one in spec.items()}
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], dict):
        pairs = [f"{key}={value!r}" for key, value in spec[1].items()]
        return spec if any("," in pair for pair in pairs) else ",".join([spec[0], *pairs])
    return spec


def learner_spec_of(value: Any) -> Any:
    """A learner spec as a TOML file or the Python API may give it: a 'NAME[,KEY=VALUE...]' text (parsed), a
    [name, options] pair (a tuple), a dict of such per agent (each read), or a parsed spec (returned as it is)."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], dict):
        return (value[0], value[1])
    if isinstance(value, str):
        return parse_learner_spec(value)
    if isinstance(value, dict):
        return {agent: learner_spec_of(one) for agent, one in value.items()}
    return value


def import_object(path: str, agent: str, what: str = "learner", attr_what: str | None = None) -> Any:
    """Import `module:attr` (or `module.attr`) of user code, with errors that name the agent and `what` it is
    (`attr_what` in the message for a missing attribute, e.g. "learner class")."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure of user code is reported the same way
        raise ConfigError(
            f"agent {agent!r}: {what} {path!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    if not hasattr(module, attr):
        raise ConfigError(f"agent {agent!r}: module {module_name!r} has no {attr_what or what} {attr!r}")
    return getattr(module, attr)


def parse_mix(unit: str, mix: Any) -> dict[str, float]:
    """Validate one unit's opponent mix: kind -> non-negative weight, normalised to sum to 1."""
    if isinstance(mix, str):  # "latest=0.5,snapshot=0.5" (CLI form); a scripted spec with options uses ';'
        pairs = {}
        for part in mix.split(";" if ";" in mix else ","):
            kind, sep, weight = part.strip().rpartition("=")
            if not sep or not kind:
                raise ConfigError(f"option league for {unit!r}: {part!r} is not KIND=WEIGHT")
            try:
                pairs[kind.strip()] = float(weight)
            except ValueError:
                raise ConfigError(f"option league for {unit!r}: weight {weight!r} of {kind!r} is not a "
                                  f"number") from None
        mix = pairs
    if not isinstance(mix, dict) or not mix:
        raise ConfigError(f"option league for {unit!r}: expected a dict of opponent kind -> weight, got {mix!r}")
    weights: dict[str, float] = {}
    for kind, weight in mix.items():
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"option league for {unit!r}: opponent kind {kind!r} must be a non-empty string")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ConfigError(f"option league for {unit!r}: weight of {kind!r} must be a number >= 0, got {weight!r}")
        weights[kind] = float(weight)
    total = sum(weights.values())
    if total <= 0:
        raise ConfigError(f"option league for {unit!r}: the weights {weights} sum to 0")
    return {k: w / total for k, w in weights.items() if w > 0}


def scripted_spec(kind: str) -> Any:
    """A mix kind naming a player ('negamax,depth=2') -> a learner spec ('negamax', {'depth': 2})."""
    return parse_learner_spec(kind)
