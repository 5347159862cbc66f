"""Options as a TOML file: one table per option group (`[acting] envs_per_actor = 8`), a flat top-level key
accepted too. `dumps` writes the values RunConfig holds (bools, numbers, strings, lists, dicts of them; None
as the word "none", since TOML has no null); `values` reads a file back into checked option values."""

from __future__ import annotations

import re
import sys
import textwrap
from typing import Any, Iterable, Mapping

from pzasync.config.declare import NONE, OptionGroup, check_value, declared, summary
from pzasync.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _string(text: str) -> str:
    escaped = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return '"' + "".join(escaped.get(c, c if c >= " " and c != "\x7f" else f"\\u{ord(c):04x}") for c in text) + '"'


def key_text(key: str) -> str:
    """A TOML key: bare where it can be, else quoted."""
    return key if _BARE_KEY.match(key) else _string(key)


def value_text(value: Any) -> str:
    """A value as TOML: true/false, numbers, "strings", [lists], { inline = tables }; None as "none"."""
    if value is None:
        return _string(NONE)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key_text(str(k))} = {value_text(v)}" for k, v in value.items()) + " }" if value \
            else "{}"
    return _string(str(value))  # a path


def dumps(obj: Any, groups: Iterable[type[OptionGroup]], header: str = "",
          unset: Mapping[str, str] | None = None) -> str:
    """Every option of `obj` in its group's table, each under its doc's first sentence as a comment; those
    named in `unset` commented out, followed by the reason."""
    unset = unset or {}
    lines = [f"# {line}" for line in header.splitlines()]
    for group in groups:
        lines += ["", f"[{group.TABLE}]"]
        for f, spec in declared(group):
            lines += ["# " + line for line in textwrap.wrap(summary(spec.doc), 108)]
            line = f"{f.name} = {value_text(getattr(obj, f.name))}"
            lines.append(f"# {line}  ({unset[f.name]})" if f.name in unset else line)
    return "\n".join(lines).lstrip("\n") + "\n"


def load(text: str, source: str = "config file") -> dict[str, Any]:
    """A TOML text parsed, or ConfigError (starting with `source`) if it does not parse."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None


def values(text: str, groups: Iterable[type[OptionGroup]], source: str = "config file",
           others: Iterable[str] = ()) -> dict[str, Any]:
    """The options a TOML text sets, checked one by one: {option name: value}. Tables are the groups' (`TABLE`);
    a top-level key may be any option; the tables named in `others` are someone else's to read (the learners').
    ConfigError, starting with `source`, for a file that does not parse, a table or key that names no option,
    or a value the option's declaration refuses."""
    groups = tuple(groups)
    data = {key: value for key, value in load(text, source).items() if key not in set(others)}
    specs = {f.name: (group, spec) for group in groups for f, spec in declared(group)}
    tables = {group.TABLE: group for group in groups}
    found: dict[str, Any] = {}

    def take(name: str, value: Any, table: str | None) -> None:
        if name not in specs:
            where = f" in [{table}]" if table else ""
            hint = f" ([{table}] is a table of options: write {table} = ... inside it)" if table in specs else ""
            raise ConfigError(f"{source}: unknown option {name!r}{where}{hint}; known options: {sorted(specs)}")
        group, spec = specs[name]
        if table is not None and group.TABLE != table:
            raise ConfigError(f"{source}: option {name!r} belongs in [{group.TABLE}], not [{table}]")
        if name in found:
            raise ConfigError(f"{source}: option {name!r} is given twice")
        if spec.check.optional and value == NONE:
            value = None
        check_value(f"{source}: option", name, value, spec)
        found[name] = value

    for key, value in data.items():
        if key in tables:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: [{key}] must be a table of {tables[key].TITLE.lower()}")
            for name, item in value.items():
                take(name, item, key)
        else:
            take(key, value, None)
    return found
