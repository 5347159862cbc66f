"""The `[space]` table of a sweep file: each key an option to search, each value the distribution it is drawn
from.

    [space]
    "learners.players.lr" = { log_uniform = [1e-4, 3e-3] }
    "learners.players.n_step" = { int_uniform = [1, 5] }
    "run.envs_per_actor" = { choice = [4, 8, 16] }

A key is `run.OPTION` (any `RunConfig` option, `pzasync train --help`) or `learners.UNIT.OPTION`, where UNIT is
a learner table of the run (`"*"`, an agent or an agent group: what `pzasync train ENV --print-config` writes as
`[learners.UNIT]`) or a learner's name (`dqn`: every unit that trains with it), and OPTION one of that learner's
options (`pzasync learners NAME`). Distributions: `uniform = [LOW, HIGH]`, `log_uniform = [LOW, HIGH]` (LOW > 0),
`int_uniform = [LOW, HIGH]` (integers, both ends included), `choice = [VALUE, ...]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pzasync.errors import ConfigError

DISTRIBUTIONS = ("uniform", "log_uniform", "int_uniform", "choice")
#: The prefixes of a key: a run option, or a learner option.
RUN, LEARNERS = "run", "learners"


@dataclass(frozen=True)
class Param:
    """One searched option: its key (`run.lr`, `learners.players.lr`), its distribution and that's arguments
    (`[LOW, HIGH]`, or the choices)."""

    key: str
    distribution: str
    values: tuple[Any, ...]

    @property
    def target(self) -> tuple[str, str | None, str]:
        """(RUN or LEARNERS, the learner unit or name (None for a run option), the option's name)."""
        head, _, rest = self.key.partition(".")
        if head == RUN:
            return RUN, None, rest
        unit, _, name = rest.rpartition(".")
        return LEARNERS, unit, name

    def candidates(self) -> list[Any]:
        """Values that stand for the whole distribution in checks: both ends of a range (and a midpoint of a
        uniform one, which is a float whatever the ends are), or every choice."""
        if self.distribution == "choice":
            return list(self.values)
        low, high = self.values
        if self.distribution == "int_uniform":
            return [low, high]
        if self.distribution == "log_uniform":
            return [float(low), float(high)]
        return [float(low), (low + high) / 2.0, float(high)]

    def suggest(self, trial: Any) -> Any:
        """A value drawn for an Optuna trial (`trial.suggest_*`, named by the key)."""
        if self.distribution == "choice":
            return trial.suggest_categorical(self.key, list(self.values))
        low, high = self.values
        if self.distribution == "int_uniform":
            return trial.suggest_int(self.key, low, high)
        return trial.suggest_float(self.key, float(low), float(high), log=self.distribution == "log_uniform")

    def can_draw(self, value: Any) -> bool:
        """Whether the distribution can give `value` (a choice listed, a number within the range)."""
        if self.distribution == "choice":
            return any(type(value) is type(v) and value == v for v in self.values)
        if not _number(value):
            return False
        low, high = self.values
        return low <= value <= high and (self.distribution != "int_uniform" or isinstance(value, int))

    def describe(self) -> str:
        """The distribution in words, as the file writes it: `log_uniform [0.0001, 0.003]`."""
        return f"{self.distribution} {list(self.values)!r}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_param(key: Any, spec: Any, source: str) -> Param:
    """One `[space]` entry checked for its form (a known prefix, one distribution, a valid range or choices);
    ConfigError naming the file and the key. Whether the option exists and takes the values is `SweepFile`'s
    check, against the run's declarations."""
    where = f"{source}: [space] {key!r}"
    head, _, rest = str(key).partition(".")
    if head not in (RUN, LEARNERS) or not rest or (head == LEARNERS and "." not in rest.strip(".")):
        raise ConfigError(f"{where}: a key is 'run.OPTION' (a run option) or 'learners.UNIT.OPTION' (UNIT: a learner "
                          f"table such as \"*\" or a group, or a learner's name such as dqn)")
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: must be a table with one of {', '.join(DISTRIBUTIONS)}, e.g. "
                          f"{{ log_uniform = [1e-4, 3e-3] }} or {{ choice = [4, 8, 16] }}")
    (distribution, values), = spec.items()
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where}: {distribution} needs a non-empty list, got {values!r}")
    if distribution == "choice":
        if any(isinstance(v, (dict, list)) for v in values):
            raise ConfigError(f"{where}: choice takes numbers, strings or booleans, got {values!r}")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(f"{where}: choice lists a value twice: {values!r}")
        return Param(key, distribution, tuple(values))
    if len(values) != 2 or not all(_number(v) for v in values):
        raise ConfigError(f"{where}: {distribution} needs [LOW, HIGH], two numbers, got {values!r}")
    low, high = values
    if not low < high:
        raise ConfigError(f"{where}: {distribution} [{low!r}, {high!r}]: LOW must be below HIGH")
    if distribution == "int_uniform" and not all(isinstance(v, int) for v in values):
        raise ConfigError(f"{where}: int_uniform needs two integers, got {values!r}")
    if distribution == "log_uniform" and not low > 0:
        raise ConfigError(f"{where}: log_uniform [{low!r}, {high!r}]: LOW must be > 0")
    return Param(key, distribution, (low, high))


def parse_space(table: Any, source: str) -> list[Param]:
    """The `[space]` table as Params, in the file's order; ConfigError if it is missing or empty."""
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{source}: needs a [space] table naming the options to search, e.g. "
                          f"\"learners.*.lr\" = {{ log_uniform = [1e-4, 3e-3] }}")
    return [parse_param(key, spec, source) for key, spec in table.items()]
