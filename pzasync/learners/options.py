"""A learner's options, declared once each (`option`: default, doc, `Check`) as the fields of a dataclass.

A built-in learner names its options class (`DQNLearner.Options = DQNOptions`); a plug-in may do the same, or
keep the older form of a `defaults` dict with an optional `schema` of `Option` rules, from which the class is
made (`options_from_defaults`). Either way one validator checks every value (`Check`, config/declare.py, the
run options' too) and `parse` refuses unknown names, so an error names the agent, the option, the value and
what is accepted before any process starts. The learner reads its options as typed attributes
(`self.config.lr`) or, as plug-ins written against the dict form do, by key (`self.config["lr"]`): an options
object is a read-only mapping that compares equal to the dict of its values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pzasync.config.declare import KEY, Check, OptionSpec, declared, default_of, option
from pzasync.errors import ConfigError


def Option(type: Any = object, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, choices: tuple[Any, ...] | None = None, optional: bool = False,
           item: Check | None = None, what: str | None = None) -> Check:
    """The rule for one option of a plug-in's `schema`, as a `Check`: `type` is `float` (a finite number; ints
    pass), `int` (bools do not), `bool`, `str`, `list` (or a tuple; `item` is each element's rule), or a class or
    tuple of classes; `ge`/`gt`/`le`/`lt` bound numbers; `choices` lists the values allowed; `optional` lets
    None pass; `what` names the accepted values in the error instead of the type's noun."""
    if choices is not None and what is None:
        what = "one of " + ", ".join(repr(c) for c in choices)
    return Check(type, ge=ge, gt=gt, le=le, lt=lt, finite=type in (int, float), choices=choices,
                 optional=optional, items=item, what=what)


@dataclass(kw_only=True, eq=False)
class LearnerOptions(Mapping[str, Any]):
    """Base of every learner's options class: fields declared with `option`, read as attributes or by key."""

    #: The learner class whose options these are, where the class was made from its `defaults` dict (pickles
    #: then rebuild it through that learner).
    made_for: ClassVar[type | None] = None

    # ------------------------------------------------------------------------------------ the declarations
    @classmethod
    def names(cls) -> list[str]:
        """The option names, in declaration order."""
        return [f.name for f in fields(cls)]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every option with its default (fresh copies of mutable ones)."""
        return {f.name: default_of(f) for f in fields(cls)}

    @classmethod
    def checks(cls) -> dict[str, Check]:
        """Every option's rule."""
        return {f.name: spec.check for f, spec in declared(cls)}

    @classmethod
    def docs(cls) -> dict[str, str]:
        """Every option's doc (empty for options made from a `defaults` dict)."""
        return {f.name: spec.doc for f, spec in declared(cls)}

    @classmethod
    def parse(cls, agent: str, learner: str, values: Mapping[str, Any]) -> LearnerOptions:
        """`values` over the defaults, checked: ConfigError naming the agent, the learner, the option, the value
        and what is accepted (one line) for an unknown name or a refused value; then the rules between options
        (`check_together`). Numbers come out as their option's Python type (`Check.typed`)."""
        names = cls.names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ConfigError(f"agent {agent!r}: learner {learner} has no option(s) {unknown}; known options: "
                              f"{sorted(names)}")
        merged = {**cls.defaults(), **values}
        for f, spec in declared(cls):
            why = spec.refusal(value := merged[f.name])
            if why is not None:
                got = "" if spec.check.type_ok(value) else f" (got {type(value).__name__})"
                raise ConfigError(f"agent {agent!r}: {learner} option {f.name}={value!r}: {why}{got}")
            merged[f.name] = spec.check.typed(value)
        options = cls(**merged)
        options.check_together(agent, learner)
        return options

    @classmethod
    def saved(cls, values: Mapping[str, Any]) -> LearnerOptions:
        """Options as a checkpoint saved them (checked when they were given): names this version no longer has
        are left out, names it added take their defaults."""
        return cls(**{key: value for key, value in values.items() if key in cls.names()})

    def check_together(self, agent: str, learner: str) -> None:
        """Rules between options (e.g. one that needs another's value), raising ConfigError naming the agent.
        Each option's own rule is its `Check`."""

    # ------------------------------------------------------------------------------------ mapping access
    def __getitem__(self, key: str) -> Any:
        if key not in self.names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    def as_dict(self) -> dict[str, Any]:
        """The values by name: what run.json and checkpoints keep."""
        return {name: getattr(self, name) for name in self.names()}

    def replace(self, **changes: Any) -> LearnerOptions:
        """A copy with some values changed (unchecked: the caller's values are its own)."""
        return dataclasses.replace(self, **changes)

    def __reduce__(self) -> tuple:
        # A class made from a learner's `defaults` is found again through that learner, which pickles by name.
        if self.made_for is not None:
            return _made_for, (self.made_for, self.as_dict())
        return type(self), (), self.as_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _made_for(learner: Any, values: dict[str, Any]) -> LearnerOptions:
    return learner.Options(**values)


def redeclare(options: type[LearnerOptions], name: str, default: Any) -> Any:
    """Field `name` of `options` with another default (its doc and check kept): a subclass's own default."""
    f = next(f for f in fields(options) if f.name == name)
    spec: OptionSpec = f.metadata[KEY]
    return option(default, spec.doc, spec.check)


def options_from_defaults(learner: type, defaults: Mapping[str, Any],
                          rules: Mapping[str, Check]) -> type[LearnerOptions]:
    """The options class of a learner declared with a `defaults` dict (its own or its bases'): one field per
    default, checked by its rule in `rules` (the learner's `schema` and its bases'), any value where it has none."""
    made: type[LearnerOptions] = dataclasses.make_dataclass(
        f"{learner.__name__}Options",
        [(name, Any, option(default, "", rules.get(name, Check(optional=True))))
         for name, default in defaults.items()],
        bases=(LearnerOptions,), kw_only=True, eq=False)
    made.made_for = learner
    made.__module__ = learner.__module__
    return made
