"""Command-line options generated from declarations (pzasync/config/declare.py): each field declared with
`option` becomes `--field-name` (and its alias, e.g. `--vs`), with the type, choices, help text and default of
its declaration; `given` reads back, parsed, the values the user actually gave. Help lists them by group."""

from __future__ import annotations

from typing import Any, Iterable

import click
from click.core import ParameterSource

from pzasync.config.declare import NONE, OptionGroup, OptionSpec, declared, default_of
from pzasync.config.groups import AUTO


class IntOrAuto(click.ParamType):
    """A count, or "auto" (RunConfig's `AUTO`: the plan picks it from the core count)."""

    name = "N|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) or value == AUTO:
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is neither an integer nor 'auto'", param, ctx)


class NoneOr(click.ParamType):
    """`inner`'s values, or the word `none` for None (an option that may be None)."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        self.name = f"{inner.name}|{NONE}"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return None if value is None or value == NONE else self.inner.convert(value, param, ctx)


def flag(name: str) -> str:
    """A field's name as a flag: `eval_every_s` -> `--eval-every-s`."""
    return "--" + name.replace("_", "-")


def click_type(spec: OptionSpec) -> click.ParamType:
    """The click type of a declared option: text for options with a `parse`, else from its check."""
    check = spec.check
    if spec.parse is not None or spec.multiple:
        kind: click.ParamType = click.STRING
    elif check.kind is int and AUTO in check.also:
        kind = IntOrAuto()
    elif check.choices is not None:
        kind = click.Choice(list(check.choices))
    else:
        numbers: dict[type, click.ParamType] = {int: click.INT, float: click.FLOAT}
        kind = numbers.get(check.kind, click.STRING)
    return NoneOr(kind) if check.optional and spec.parse is None else kind


def _shown(value: Any) -> str | None:
    """A default as --help shows it; None for an empty one (nothing shown)."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return None
    return str(value)


def declared_params(groups: Iterable[type[OptionGroup]], *, defaults: dict[str, str] | None = None,
                    notes: dict[str, str] | None = None) -> list[click.Parameter]:
    """One click parameter per option of `groups`, in order, each listed in --help under its group's `TITLE`.
    `defaults`: the default to show where the command's differs from the declaration's (e.g. "the env's
    recipe's"); `notes`: text the command adds to an option's help. Every parameter defaults to "not given"
    (`given` leaves it out), so that a command can tell a default from a choice."""
    defaults, notes = defaults or {}, notes or {}
    params: list[click.Parameter] = []
    for group in groups:
        for f, spec in declared(group):
            if spec.argument:
                param: click.Parameter = click.Argument([f.name], required=False, default=default_of(f))
                param.doc = spec.doc  # type: ignore[attr-defined]
            else:
                names = [f"{flag(f.name)}/--no-{flag(f.name)[2:]}"] if spec.check.kind is bool else [flag(f.name)]
                shown = defaults.get(f.name, _shown(default_of(f)))
                param = click.Option(
                    [*names, *([spec.alias] if spec.alias else []), f.name], type=None if spec.check.kind is bool
                    else click_type(spec), multiple=spec.multiple, default=None, metavar=spec.metavar,
                    help=spec.doc + (" " + notes[f.name] if f.name in notes else "")
                    + (" (repeatable)" if spec.multiple else "") + (f"  [default: {shown}]" if shown else ""))
            param.section = group.TITLE  # type: ignore[attr-defined]
            params.append(param)
    return params


def given(ctx: click.Context, groups: Iterable[type[OptionGroup]]) -> dict[str, Any]:
    """The options of `groups` given on the command line, parsed to their values: {field name: value}."""
    found: dict[str, Any] = {}
    for group in groups:
        for f, spec in declared(group):
            source = ctx.get_parameter_source(f.name)
            if f.name not in ctx.params or source in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
                continue
            value = ctx.params[f.name]
            found[f.name] = spec.parse(value) if spec.parse is not None else value
    return found


class SectionedCommand(click.Command):
    """A command whose --help lists its options in sections: the command's own, then each group's."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if isinstance(param, click.Argument) and hasattr(param, "doc"):
                record = (param.make_metavar(ctx), param.doc)
            if record is not None:
                sections.setdefault(getattr(param, "section", "Options"), []).append(record)
        for title, records in sections.items():
            with formatter.section(title):
                formatter.write_dl(records)
