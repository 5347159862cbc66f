"""Env sets (docs/running.md, "Env sets"): one spec names several envs (ids plus args) and their structure apart
from the envs: a `train` split (weighted), a `test` split (what `pzasync eval` scores), a `prior` (env args drawn
per episode) and a `curriculum` (steps of env args or league opponents, each held until the evaluator's figure
passes its threshold).

This module is the spec alone: reading it from TOML or a dict, with one-line errors naming the file and the key
(`EnvSet.load`, `EnvSet.from_dict`), the per-episode draws (`Member.draw`), the check that every env of a set has
the same agents and spaces (`check_spaces`), and when a curriculum moves on (`Curriculum`). The env that plays a
set is in envset_env.py.
"""

from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from pzasync.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

#: How an env argument may be drawn per episode: `{choice = [2, 3, 4]}`, `{int_uniform = [25, 50]}` (both ends
#: included), `{uniform = [0.1, 0.3]}`; `{value = X}` passes X as it is (a table argument, say).
DISTRIBUTIONS = ("choice", "int_uniform", "uniform")
SPLITS = ("train", "test")
#: The evaluator's figures a curriculum step can be held to (`until`): the win rate where evaluation games have
#: results (1/0/-1), else the mean return; "auto" takes whichever the rows have.
FIGURES = ("auto", "win_rate", "mean_return")
_MEMBER_KEYS = {"env", "args", "weight", "wrappers", "name"}
_STEP_KEYS = _MEMBER_KEYS | {"opponent", "until", "figure"}
_SET_KEYS = {"name", "train", "test", "prior", "curriculum"}
#: At most this many argument combinations of one member are made to check its spaces (every `choice` value, the
#: ends of a range).
MAX_CHECKED = 32


@dataclass(frozen=True)
class Draw:
    """One env argument drawn per episode: `kind` (one of DISTRIBUTIONS) over `values`."""

    kind: str
    values: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        if self.kind == "choice":
            return self.values[int(rng.integers(len(self.values)))]
        low, high = self.values
        if self.kind == "int_uniform":
            return int(rng.integers(low, high + 1))
        return float(rng.uniform(low, high))

    def corners(self) -> tuple[Any, ...]:
        """The values checked before a run: every choice, or both ends of a range."""
        return self.values if self.kind == "choice" else tuple(dict.fromkeys(self.values))

    def text(self) -> str:
        return f"{self.kind}{list(self.values)}"

    def as_dict(self) -> dict[str, Any]:
        return {self.kind: list(self.values)}


@dataclass(frozen=True)
class Member:
    """One env of a set: its id, its arguments (fixed, or `Draw`s drawn per episode), its weight in its split, its
    wrappers (EnvSpec.wrappers) and the label the live table and episodes.jsonl give it."""

    env: str
    args: dict[str, Any]
    weight: float = 1.0
    wrappers: tuple[str, ...] = ()
    label: str = ""

    @property
    def drawn(self) -> bool:
        """Whether an argument is drawn per episode (a prior)."""
        return any(isinstance(v, Draw) for v in self.args.values())

    def draw(self, rng: np.random.Generator) -> dict[str, Any]:
        """This episode's arguments: fixed ones as given, the others drawn from `rng` (in key order)."""
        return {k: v.sample(rng) if isinstance(v, Draw) else v for k, v in self.args.items()}

    def checked_args(self) -> list[dict[str, Any]]:
        """The argument combinations `check_spaces` makes: every corner of every draw (at most MAX_CHECKED)."""
        keys = list(self.args)
        options = [v.corners() if isinstance(v, Draw) else (v,) for v in self.args.values()]
        return [dict(zip(keys, combo)) for combo in itertools.islice(itertools.product(*options), MAX_CHECKED)]

    def as_dict(self) -> dict[str, Any]:
        return {"env": self.env, "args": {k: v.as_dict() if isinstance(v, Draw) else _literal(v)
                                          for k, v in self.args.items()},
                "weight": self.weight, "wrappers": list(self.wrappers), "name": self.label}


@dataclass(frozen=True)
class Step:
    """One step of a curriculum: the env it plays (`member`; None: the set's train split and prior), the league
    opponent every learning unit faces in it (`opponent`; None: the run's own league, if any), and the
    evaluator's figure that moves the run on to the next step (`until`; None for the last step: it stays)."""

    member: Member | None
    opponent: str | None
    until: float | None
    figure: str = "auto"
    label: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.member.as_dict() if self.member is not None else {"name": self.label}
        if self.opponent is not None:
            out["opponent"] = self.opponent
        if self.until is not None:
            out["until"] = self.until
        return {**out, "figure": self.figure}


@dataclass(frozen=True)
class EnvSet:
    """A checked env-set spec (module docstring). `source`: where it was read from, for messages."""

    name: str
    train: tuple[Member, ...]
    test: tuple[Member, ...] = ()
    curriculum: tuple[Step, ...] = ()
    source: str = field(default="env set", compare=False)

    @classmethod
    def load(cls, path: str | Path) -> EnvSet:
        """Read an env set from a TOML file (its `[envset]` table); ConfigError naming the file at fault."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"env set {str(path)!r}: cannot read it: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"env set {str(path)!r}: not valid TOML: {exc}") from None
        if set(data) != {"envset"}:
            extra = sorted(set(data) - {"envset"})
            raise ConfigError(f"env set {str(path)!r}: " + (f"unknown top-level key(s) {extra}; everything goes in "
                                                            f"the [envset] table" if extra else
                                                            "has no [envset] table"))
        return cls.from_dict(data["envset"], str(path))

    @classmethod
    def of(cls, value: Any) -> EnvSet:
        """An EnvSet from what RunConfig.env_set holds: a TOML file's path, or the [envset] table as a dict."""
        if isinstance(value, EnvSet):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value.get("envset", value), "option env_set")
        return cls.load(value)

    @classmethod
    def from_dict(cls, data: Any, source: str = "env set") -> EnvSet:
        """Check and read the `[envset]` table; ConfigError naming `source` and the key at fault."""
        where = f"env set {source!r}"
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
        _no_unknown(data, _SET_KEYS, where)
        name = data.get("name", Path(source).stem if source.endswith(".toml") else "envset")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
            raise ConfigError(f"{where}: name={name!r} must be a non-empty word (letters, digits, '-', '_', '.'): it "
                              f"names the run directory")
        train = [_member(m, f"{where}: train[{i}]", f"train[{i}]") for i, m in enumerate(_tables(data, "train", where))]
        if "prior" in data:
            prior = data["prior"]
            if not isinstance(prior, dict):
                raise ConfigError(f"{where}: prior must be one table ([envset.prior]), got {type(prior).__name__}")
            train.append(_member(prior, f"{where}: prior", "prior"))
        test = [_member(m, f"{where}: test[{i}]", f"test[{i}]") for i, m in enumerate(_tables(data, "test", where))]
        steps = [_step(s, f"{where}: curriculum[{i}]", f"step {i}")
                 for i, s in enumerate(_tables(data, "curriculum", where))]
        if not train and not any(s.member is not None for s in steps):
            raise ConfigError(f"{where}: no env to train on: give [[envset.train]] tables, an [envset.prior] or "
                              f"[[envset.curriculum]] steps with an env")
        if not train and any(s.member is None for s in steps):
            i = next(i for i, s in enumerate(steps) if s.member is None)
            raise ConfigError(f"{where}: curriculum[{i}] names no env, and there is no train split or prior to "
                              f"play it on: give it env = \"ID\", or give [[envset.train]]")
        for i, step in enumerate(steps[:-1]):
            if step.until is None:
                raise ConfigError(f"{where}: curriculum[{i}] needs until = SCORE (the evaluator's figure that moves "
                                  f"the run on); only the last step may go without")
        return cls(name, tuple(_unique_labels(train)), tuple(_unique_labels(test)), tuple(steps), source)

    # ------------------------------------------------------------------------------------------ reading it
    @property
    def first(self) -> Member:
        """The env a run's probe and recipe go by: the first of the train split, else of the first step."""
        if self.train:
            return self.train[0]
        member = next(s.member for s in self.curriculum if s.member is not None)
        assert member is not None
        return member

    @property
    def members(self) -> list[Member]:
        """Every env of the set: the splits' and the steps'."""
        return [m for _, m in self.positions()]

    def positions(self) -> list[tuple[str, Member]]:
        """Every env of the set with where the spec puts it ("train[1]", "test[0]", "curriculum[2]")."""
        return [*((f"train[{i}]", m) for i, m in enumerate(self.train)),
                *((f"test[{i}]", m) for i, m in enumerate(self.test)),
                *((f"curriculum[{i}]", s.member) for i, s in enumerate(self.curriculum) if s.member is not None)]

    def split(self, name: str) -> tuple[Member, ...]:
        """The members of split `name` ("train" or "test"); ConfigError where the set has none."""
        if name not in SPLITS:
            raise ConfigError(f"split {name!r}: must be one of {', '.join(SPLITS)}")
        members = self.train if name == "train" else self.test
        if not members:
            raise ConfigError(f"env set {self.name!r} ({self.source}) has no {name} split"
                              + (" ([[envset.test]] tables)" if name == "test" else ""))
        return members

    def members_at(self, split: str, stage: int) -> tuple[Member, ...]:
        """The members an episode is drawn from: a test split's, else the curriculum step's env, else the train
        split (with its prior)."""
        if split == "test":
            return self.split("test")
        if self.curriculum:
            step = self.curriculum[min(max(stage, 0), len(self.curriculum) - 1)]
            if step.member is not None:
                return (step.member,)
        return self.train

    @property
    def opponents(self) -> list[str | None]:
        """Per curriculum step, the league opponent it sets (None: the run's league as configured)."""
        return [s.opponent for s in self.curriculum]

    def stage_label(self, stage: int) -> str:
        if not self.curriculum:
            return ""
        step = self.curriculum[min(stage, len(self.curriculum) - 1)]
        return f"step {min(stage, len(self.curriculum) - 1) + 1}/{len(self.curriculum)}: {step.label}"

    def as_dict(self) -> dict[str, Any]:
        """The spec as a table `from_dict` reads back (run.json's `env_set`)."""
        out: dict[str, Any] = {"name": self.name, "train": [m.as_dict() for m in self.train]}
        if self.test:
            out["test"] = [m.as_dict() for m in self.test]
        if self.curriculum:
            out["curriculum"] = [s.as_dict() for s in self.curriculum]
        return out


def check_spaces(envset: EnvSet, make: Any) -> None:
    """Every env of the set (each `Draw` at its corners) has the first env's agents and spaces: the learners'
    networks are built once. `make(member, args)` builds one AEC env. ConfigError naming the env, agent and space."""
    reference: tuple[str, list[str], dict[str, Any]] | None = None
    for position, member in envset.positions():
        for args in member.checked_args():
            env = make(member, args)
            try:
                agents = list(env.possible_agents)
                spaces = {a: (env.observation_space(a), env.action_space(a)) for a in agents}
            finally:
                env.close()
            what = f"{position} ({_args_text(member.env, args)})"
            if reference is None:
                reference = (what, agents, spaces)
                continue
            first, first_agents, first_spaces = reference
            if agents != first_agents:
                raise ConfigError(f"env set {envset.name!r} ({envset.source}): {what} has agents {agents}, {first} "
                                  f"has {first_agents}: every env of a set must have the same agents (the learners' "
                                  f"networks are built once, one per agent or group)")
            for agent in agents:
                for i, kind in enumerate(("observation", "action")):
                    if spaces[agent][i] != first_spaces[agent][i]:
                        raise ConfigError(
                            f"env set {envset.name!r} ({envset.source}): agent {agent!r} has {kind} space "
                            f"{spaces[agent][i]} in {what} but {first_spaces[agent][i]} in {first}: every env of a "
                            f"set must have the same spaces (choose arguments that keep them, e.g. an episode length)")


def figure_name(row: dict[str, Any], figure: str = "auto") -> str:
    """The figure of an evaluation row a step is held to: `figure`, or for "auto" the win rate where its games
    have results, else the mean return."""
    if figure == "auto":
        return "win_rate" if row.get("outcomes", True) and "win_rate" in row else "mean_return"
    return figure


def figure_of(row: dict[str, Any], figure: str = "auto") -> float:
    """An evaluation row's value of `figure_name(row, figure)`."""
    return float(row[figure_name(row, figure)])


class Curriculum:
    """When a curriculum moves on (one object, in the runner's process): `observe` the evaluator's rows; once
    every row of a round played at the current stage passes the step's `until` (the lowest of them: every scored
    seat or team must), the next step begins. Returns the stage change for curriculum.jsonl."""

    def __init__(self, envset: EnvSet, stage: int = 0) -> None:
        self.envset = envset
        self.stage = stage
        self._rounds: dict[int, list[dict[str, Any]]] = {}

    @property
    def last(self) -> bool:
        return self.stage >= len(self.envset.curriculum) - 1

    def observe(self, rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
        """Take evaluation rows (each with `round`, `round_rows` and `stage`); the stage change they cause, if any."""
        change = None
        for row in rows:
            if row.get("kind") != "eval" or row.get("stage") != self.stage or self.last:
                continue
            mine = self._rounds.setdefault(int(row["round"]), [])
            mine.append(row)
            if len(mine) < int(row.get("round_rows", 1)):
                continue
            step = self.envset.curriculum[self.stage]
            assert step.until is not None  # every step but the last has one (from_dict)
            value = min(figure_of(r, step.figure) for r in mine)
            self._rounds.clear()
            if value >= step.until:
                change = {"from": self.stage, "to": self.stage + 1, "value": round(value, 4), "until": step.until,
                          "figure": figure_name(row, step.figure), "round": row["round"],
                          "agent_steps": row.get("agent_steps"),
                          "step": self.envset.curriculum[self.stage + 1].label}
                self.stage += 1
        return change


# ---------------------------------------------------------------------------------------------- reading tables
def _no_unknown(data: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")


def _tables(data: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of tables ([[envset.{key}]]), got {value!r}")
    return value


def _member(data: dict[str, Any], where: str, default_label: str, keys: set[str] = _MEMBER_KEYS) -> Member:
    _no_unknown(data, keys, where)
    env = data.get("env")
    if not isinstance(env, str) or not env:
        raise ConfigError(f"{where}: env must be an env id (a string such as \"pzasync.envs.forage\"), got {env!r}")
    args = data.get("args", {})
    if not isinstance(args, dict):
        raise ConfigError(f"{where}: args must be a table of env arguments, got {args!r}")
    parsed = {str(k): _argument(v, f"{where}: args.{k}") for k, v in args.items()}
    weight = data.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise ConfigError(f"{where}: weight={weight!r} must be a number > 0")
    wrappers = data.get("wrappers", [])
    if not isinstance(wrappers, list) or not all(isinstance(w, str) for w in wrappers):
        raise ConfigError(f"{where}: wrappers must be a list of wrapper specs (strings), got {wrappers!r}")
    label = data.get("name") or _args_text(env, parsed)
    if not isinstance(label, str):
        raise ConfigError(f"{where}: name={label!r} must be a string")
    return Member(env, parsed, float(weight), tuple(wrappers), label)


def _argument(value: Any, where: str) -> Any:
    """A fixed argument, or a `Draw` for a table naming a distribution."""
    if not isinstance(value, dict):
        return value
    if set(value) == {"value"}:
        return value["value"]
    if len(value) != 1 or next(iter(value)) not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: a table must name one distribution ({', '.join(DISTRIBUTIONS)}), e.g. "
                          f"{{choice = [2, 3]}}, or be {{value = ...}} for a table passed as it is; got {value!r}")
    kind, values = next(iter(value.items()))
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where}: {kind} needs a non-empty list, got {values!r}")
    if kind != "choice":
        integer = kind == "int_uniform"
        ok = len(values) == 2 and all(isinstance(v, int if integer else (int, float)) and not isinstance(v, bool)
                                      for v in values) and values[0] <= values[1]
        if not ok:
            raise ConfigError(f"{where}: {kind} needs [LOW, HIGH] with LOW <= HIGH"
                              + (" (integers, both included)" if integer else "") + f", got {values!r}")
    return Draw(kind, tuple(values))


def _step(data: dict[str, Any], where: str, default_label: str) -> Step:
    _no_unknown(data, _STEP_KEYS, where)
    member = _member(data, where, default_label, _STEP_KEYS) if "env" in data else None
    if member is None and set(data) & {"args", "weight", "wrappers"}:
        raise ConfigError(f"{where}: args, weight and wrappers need env = \"ID\" in the same step")
    opponent = data.get("opponent")
    if opponent is not None and (not isinstance(opponent, str) or not opponent):
        raise ConfigError(f"{where}: opponent must be a player spec (\"random\", \"one_ply\", \"negamax,depth=2\", "
                          f"\"snapshot\", \"module:callable\"), got {opponent!r}")
    until = data.get("until")
    if until is not None and (isinstance(until, bool) or not isinstance(until, (int, float))
                              or not math.isfinite(until)):
        raise ConfigError(f"{where}: until={until!r} must be a number (the evaluator's figure to reach)")
    figure = data.get("figure", "auto")
    if figure not in FIGURES:
        raise ConfigError(f"{where}: figure={figure!r} must be one of {', '.join(FIGURES)}")
    parts = [member.label] if member is not None else []
    if opponent is not None:
        parts.append(f"vs {opponent}")
    label = data.get("name") or " ".join(parts) or "the train split"
    return Step(member, opponent, None if until is None else float(until), figure, label)


def _unique_labels(members: list[Member]) -> list[Member]:
    """Members whose labels repeat get their split position added, so the live table tells them apart."""
    seen: dict[str, int] = {}
    for m in members:
        seen[m.label] = seen.get(m.label, 0) + 1
    return [m if seen[m.label] == 1 else Member(m.env, m.args, m.weight, m.wrappers, f"{m.label} #{i}")
            for i, m in enumerate(members)]


def _args_text(env: str, args: dict[str, Any]) -> str:
    short = env.rsplit(".", 1)[-1].rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    shown = ",".join(f"{k}={v.text() if isinstance(v, Draw) else v}" for k, v in args.items())
    return f"{short} {shown}" if shown else short


def _literal(value: Any) -> Any:
    """A fixed argument as from_dict reads it back: a table is wrapped as {value = ...}."""
    return {"value": value} if isinstance(value, dict) else value
