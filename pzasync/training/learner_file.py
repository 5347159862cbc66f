"""Learners and their options in a TOML file, beside the run options (config/toml.py): one `[learners."NAME"]`
table per learner spec ("*" for every agent, or an agent or agent group), with the learner's name and every
option, each under its doc's first sentence (`pzasync train --print-config`; `--config` reads them back, through
`read_config`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Iterable

from pzasync.config import GROUPS
from pzasync.config.declare import summary
from pzasync.config.toml import NONE, key_text, load, value_text, values
from pzasync.errors import ConfigError
from pzasync.learners import resolve_learner

#: The TOML table that holds the learners.
TABLE = "learners"


def learner_name(spec: Any) -> str:
    """A learner spec's name as `--learner` and the file take it: "dqn", or "module:Class"."""
    name = spec[0] if isinstance(spec, tuple) else spec
    return name if isinstance(name, str) else f"{name.__module__}:{name.__qualname__}"


def dumps(learners: Any) -> str:
    """`learners` (one spec, or a dict of them by agent, agent group or "*") as TOML tables, every option resolved
    (the learner's default where the spec gives none)."""
    per_name = learners if isinstance(learners, dict) else {"*": learners}
    lines: list[str] = []
    for name, spec in per_name.items():
        cls, options = resolve_learner(spec, name)
        checked = cls.validate_config(name, options)
        docs = cls.Options.docs()
        lines += ["", f"[{TABLE}.{key_text(name)}]", f"learner = {value_text(learner_name(spec))}"]
        for key, value in checked.items():
            if docs.get(key):
                lines += ["# " + line for line in textwrap.wrap(summary(docs[key]), 108)]
            lines.append(f"{key} = {value_text(value)}")
    return "\n".join(lines) + "\n" if lines else ""


def learners_of(text: str, source: str = "config file") -> dict[str, tuple[str, dict[str, Any]]] | None:
    """The learners a TOML text names (`[learners.NAME]` tables), as learner specs by name; None where it names
    none. Option names and values are checked when the run is planned, naming the agent."""
    tables = load(text, source).get(TABLE)
    if tables is None:
        return None
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise ConfigError(f"{source}: [{TABLE}] must hold one table per learner: [{TABLE}.\"*\"] learner = \"dqn\"")
    found = {}
    for name, table in tables.items():
        options = dict(table)
        learner = options.pop("learner", None)
        if not isinstance(learner, str) or not learner:
            raise ConfigError(f"{source}: [{TABLE}.{key_text(name)}] needs learner = \"NAME\" (a built-in learner "
                              f"or \"module:Class\")")
        cls, _ = resolve_learner(learner, name)
        checks = cls.option_rules()
        found[name] = (learner, {key: None if value == NONE and key in checks and checks[key].optional else value
                                 for key, value in options.items()})
    return found


def read_config(path: str | Path, others: Iterable[str] = ()) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A `pzasync train --config` file: its run options (checked one by one) and its learners (`learners_of`), as
    `Trainer`'s `file_options` and `file_learners` take them. The tables named in `others` belong to someone else
    (a sweep file's [sweep] and [space]). ConfigError, naming the file and the option, for anything refused."""
    text = Path(path).read_text()
    options = values(text, GROUPS, str(path), others=(TABLE, *others))
    return options, learners_of(text, str(path))
