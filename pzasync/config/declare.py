"""An option is declared once (`option`): its default, its doc, its check and its command-line form, kept in the
dataclass field's metadata. `OptionGroup.check_options` runs the checks, the command line
(pzasync/cli/options.py) builds its flags from them, and the TOML file (config/toml.py) and the docs read the
same declarations."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable, ClassVar, Iterator

import numpy as np

from pzasync.errors import ConfigError
from pzasync.specs import parse_key_value

#: The metadata key of a field declared with `option`.
KEY = "pzasync.option"
#: On the command line and in a TOML file, this word stands for None wherever an option may be None.
NONE = "none"

_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "True or False", dict: "a dict",
               list: "a list"}
_PLURALS = {"a number": "numbers", "an integer": "integers", "a string": "strings"}


def is_kind(value: Any, kind: Any) -> bool:
    """isinstance, except that bools are not numbers, ints pass as floats, tuples pass as lists, and numpy's
    scalars pass as the Python type they stand for."""
    is_bool = isinstance(value, (bool, np.bool_))
    if kind is bool:
        return is_bool
    if kind is int:
        return isinstance(value, (int, np.integer)) and not is_bool
    if kind is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not is_bool
    if kind is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, kind)


@dataclass(frozen=True)
class Check:
    """The rule of one option's value: the one validator of run options, bench settings and learner options.

    `kind`: int (bools are not), float (ints pass; NaN never does), bool, str, dict, list (tuples pass), or a
    class or tuple of classes for isinstance; numpy scalars pass as their Python kind. `ge`/`gt`/`le`/`lt`:
    bounds of a number; `finite`: no infinity. `choices`: the values allowed. `optional`: None passes. `also`:
    literal values that pass besides the kind (e.g. "auto"). `items`: the rule of a list's items or a dict's
    values (a dict's keys must be strings). `test`: one more predicate. The error says "must be" and then
    `why`, or else `what` (or the kind's noun) with the bounds, the items' rule, the `also` values and
    "or None".
    """

    kind: Any = object
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    finite: bool = False
    choices: tuple[Any, ...] | None = None
    optional: bool = False
    also: tuple[Any, ...] = ()
    items: Check | None = None
    test: Callable[[Any], bool] | None = None
    what: str | None = None
    why: str | None = None

    def type_ok(self, value: Any) -> bool:
        """Whether `value` is of the right kind, whatever its range (for "(got str)" in an error)."""
        return (value is None and self.optional) or any(type(value) is type(a) and value == a for a in self.also) \
            or is_kind(value, self.kind)

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if any(type(value) is type(a) and value == a for a in self.also):
            return True
        if not is_kind(value, self.kind):
            return False
        if self.choices is not None and not any(type(value) is type(c) and value == c for c in self.choices):
            return False
        if self.kind in (int, float):
            if math.isnan(value) or self.finite and not math.isfinite(value):
                return False
            if (self.ge is not None and value < self.ge or self.gt is not None and value <= self.gt
                    or self.le is not None and value > self.le or self.lt is not None and value >= self.lt):
                return False
        if self.items is not None:
            if isinstance(value, dict):
                if not all(isinstance(k, str) and self.items.accepts(v) for k, v in value.items()):
                    return False
            elif not all(self.items.accepts(v) for v in value):
                return False
        return self.test is None or bool(self.test(value))

    def typed(self, value: Any) -> Any:
        """An accepted value as its kind's Python type: ints of a float option as floats, numpy scalars as
        Python ones (anything else, lists included, unchanged)."""
        if value is None or self.kind not in (int, float, bool) or not is_kind(value, self.kind):
            return value
        return self.kind(value)

    def describe(self) -> str:
        """What the value must be, in words: "must be an integer >= 1 or 'auto'", "must be one of (...)",
        "must be a number in (0, 1]", "must be a list of integers >= 1"."""
        return "must be " + self.text()

    def text(self, plural: bool = False) -> str:
        """`describe` without "must be"; `plural` for a list's items ("integers >= 1")."""
        if self.why is not None:
            return self.why
        if self.choices is not None:
            text = self.what or f"one of {self.choices!r}"
        else:
            text = self.what or _KIND_NAMES.get(self.kind, getattr(self.kind, "__name__", str(self.kind)))
            if plural:
                text = _PLURALS.get(text, text)
            low = ("[", self.ge) if self.ge is not None else ("(", self.gt) if self.gt is not None else None
            high = ("]", self.le) if self.le is not None else (")", self.lt) if self.lt is not None else None
            if low and high:
                text += f" in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
            elif low:
                text += f" {'>=' if low[0] == '[' else '>'} {low[1]:g}"
            elif high:
                text += f" {'<=' if high[0] == ']' else '<'} {high[1]:g}"
            if self.items is not None and self.kind is list:
                text += " of " + self.items.text(plural=True)
        text += "".join(f" or {a!r}" for a in self.also)
        return text + (" or None" if self.optional else "")


@dataclass(frozen=True)
class OptionSpec:
    """One option's declaration (`option`'s arguments), in its field's metadata under `KEY`."""

    doc: str
    check: Check
    #: A second command-line name, e.g. "--vs" beside "--eval-vs".
    alias: str | None = None
    metavar: str | None = None
    #: The command line's text -> the value (one text, or every text of a repeatable option).
    parse: Callable[[Any], Any] | None = None
    #: Repeatable on the command line (`parse` then gets every text given).
    multiple: bool = False
    #: A positional argument of the command rather than a --flag.
    argument: bool = False
    #: A check beyond `check`: returns why the value is refused (or None), or raises ConfigError itself.
    validator: Callable[[Any], str | None] | None = None

    def refusal(self, value: Any) -> str | None:
        """Why `value` is refused ("must be ..."), or None if it passes."""
        if not self.check.accepts(value):
            return self.check.describe()
        if self.validator is not None and value is not None:
            return self.validator(value)
        return None


def option(default: Any, doc: str, check: Check, *, alias: str | None = None, metavar: str | None = None,
           parse: Callable[[Any], Any] | None = None, multiple: bool = False, argument: bool = False,
           validator: Callable[[Any], str | None] | None = None) -> Any:
    """Declare a dataclass field as an option: its default, its doc (the text of --help and of the docs), its
    check, and its command-line form (`alias`, `metavar`, `parse` for values that are not plain numbers or
    words, `multiple` for a repeatable flag, `argument` for a positional one). Mutable defaults are copied."""
    spec = OptionSpec(" ".join(doc.split()), check, alias, metavar, parse, multiple, argument, validator)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={KEY: spec})
    return field(default=default, metadata={KEY: spec})


def spec_of(f: Field) -> OptionSpec:
    """The declaration of field `f` (KeyError for a field not declared with `option`)."""
    return f.metadata[KEY]


def declared(cls: Any) -> Iterator[tuple[Field, OptionSpec]]:
    """Every field of dataclass `cls` declared with `option`, with its declaration, in field order."""
    for f in fields(cls):
        if KEY in f.metadata:
            yield f, f.metadata[KEY]


def default_of(f: Field) -> Any:
    """The default value of a declared field (a fresh copy for mutable defaults)."""
    return f.default_factory() if callable(f.default_factory) else f.default


def summary(doc: str) -> str:
    """A doc's first sentence (up to the first '. ' that does not end "e.g." or "i.e."), for comments."""
    parts = re.split(r"(?<!\be\.g)(?<!\bi\.e)\.\s", doc, maxsplit=1)
    return parts[0] + "." if len(parts) > 1 else doc


class OptionGroup:
    """A dataclass whose fields are declared with `option`; its checks run in `check_options`.

    `TABLE` is the group's table in a TOML file; `TITLE` heads its options in --help; `PREFIX` starts its
    error messages ("option seed='x': must be an integer")."""

    TABLE: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""
    PREFIX: ClassVar[str] = "option"

    def check_options(self) -> None:
        """Raise ConfigError naming the first option (in field order) whose value its declaration refuses."""
        for f, spec in declared(self):
            check_value(self.PREFIX, f.name, getattr(self, f.name), spec)


def check_value(prefix: str, name: str, value: Any, spec: OptionSpec) -> None:
    """ConfigError "`prefix` `name`=`value`: must be ..." if the declaration `spec` refuses `value`."""
    why = spec.refusal(value)
    if why is not None:
        raise ConfigError(f"{prefix} {name}={value!r}: {why}")


# ------------------------------------------------------------------------------------- text forms (`parse`)
def key_values(option: str, metavar: str = "KEY=VALUE") -> Callable[[tuple[str, ...]], dict[str, Any] | None]:
    """Repeated KEY=VALUE texts -> a dict, values read as Python literals (else kept as text). The single text
    `none` gives None; `{}` gives an empty dict."""

    def parse(items: tuple[str, ...]) -> dict[str, Any] | None:
        if tuple(items) == (NONE,):
            return None
        return dict(parse_key_value(item, f"{option} {item!r}: expected {metavar}")
                    for item in items if item.strip() != "{}")
    return parse


def comma_list(option: str, item: Callable[[str], Any] = str, what: str = "names") -> Callable[[str], tuple]:
    """'a,b,c' -> a tuple of `item(part)`; ConfigError naming `option` if a part does not convert."""
    def parse(text: str) -> tuple:
        try:
            return tuple(item(part.strip()) for part in text.split(",") if part.strip())
        except ValueError:
            raise ConfigError(f"{option} {text!r}: expected a comma-separated list of {what}") from None
    return parse
