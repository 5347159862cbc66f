"""A sweep file, read and checked as a whole before any trial starts (`SweepFile.read`, then `check`).

It is a `pzasync train --config` file (its tables are the run options and learners every trial keeps) with two
more tables: `[sweep]` (`SweepSettings`: the env, each trial's budget, trials, how many side by side, the metric,
the pruner) and `[space]` (`space.Param`: the options searched). Every value is checked by the declaration that
checks it everywhere else (config/declare.py `Check`, learners' `Options`), so an error names the file, the key
and what is accepted, as `pzasync train --config` would.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from pzasync.config import RunConfig, declared
from pzasync.config.toml import load, values
from pzasync.errors import ConfigError, UserInputError
from pzasync.learners import resolve_learner
from pzasync.sweep.settings import SweepSettings
from pzasync.sweep.space import RUN, Param, parse_space
from pzasync.training import Trainer
from pzasync.training.learner_file import learner_name, read_config

#: The tables a sweep file has beyond a `pzasync train --config` file's.
SWEEP_TABLES = (SweepSettings.TABLE, "space")
#: Run options a sweep sets for every trial itself, refused in the file.
OWNED = {"out_dir": "each trial's run directory is under the sweep's folder (`pzasync sweep --out DIR`)",
         "progress": "the sweep shows its own table of trials"}


@dataclass
class SweepFile:
    """A sweep file's parts: `settings` ([sweep]), `space` ([space]), and what every trial keeps: `options` (run
    options by name) and `learners` ([learners.UNIT] tables, None where the file names none)."""

    path: str
    settings: SweepSettings
    space: list[Param]
    options: dict[str, Any] = field(default_factory=dict)
    learners: dict[str, Any] | None = None
    #: The notes of the env's recipe said while checking (what `pzasync train` would print at its start).
    notes: list[str] = field(default_factory=list)
    _base: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def read(cls, path: str | Path) -> SweepFile:
        """Read and check the file's form: TOML, [sweep] settings, [space] entries, the fixed run options and
        learners (ConfigError naming the file and the key). `check` then checks the space against the run."""
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UserInputError(f"sweep file {source}: {exc.strerror or exc}") from None
        data = load(text, source)
        if SweepSettings.TABLE not in data:
            raise ConfigError(f"{source}: needs a [sweep] table (env, minutes or steps, trials, ...)")
        try:
            settings = SweepSettings(**values(text, (SweepSettings,), source,
                                              others=[k for k in data if k != SweepSettings.TABLE]))
        except ConfigError as exc:  # "FILE: option trials=0: ..." -> "FILE: [sweep] trials=0: ..."
            raise ConfigError(str(exc).replace(f"{source}: option ", f"{source}: [sweep] ", 1)) from None
        space = parse_space(data.get("space"), source)
        options, learners = read_config(path, others=SWEEP_TABLES)
        for name, why in OWNED.items():
            if name in options:
                raise ConfigError(f"{source}: option {name!r} is the sweep's to set: {why}")
        return cls(source, settings, space, options, learners)

    # ------------------------------------------------------------------------------------------ trials
    def trainer(self, params: Mapping[str, Any], out_dir: str | None,
                say: Callable[[str], None] | None = None) -> Trainer:
        """The `Trainer` of a trial with `params` (key -> value) over the fixed options and learners: what
        `pzasync train ENV --config` would build from the trial's file. Checked as it would be (the run options
        together, and every learner's options, naming the key); nothing runs or is written."""
        run, learners = self._split(params)
        minutes, steps = self.settings.budget()
        trainer = Trainer(self.settings.env, minutes=minutes, steps=steps, final_episodes=0,
                          file_options={**self.options, **run}, file_learners=learners,
                          options={"out_dir": out_dir, "progress": False},
                          run_defaults=self.run_defaults(), say=say or (lambda note: None))
        for unit, spec in learners.items():
            cls, options = resolve_learner(spec, unit)
            cls.validate_config(unit, options)
        return trainer

    def run_defaults(self) -> dict[str, Any]:
        """Run options a trial takes where the file gives none: evaluation rounds every tenth of a minutes budget
        (at least 5 s), so that the pruner sees several rounds."""
        minutes, _ = self.settings.budget()
        return {"eval_every_s": max(5.0, minutes * 6.0)} if minutes is not None else {}

    def base_learners(self) -> dict[str, Any]:
        """The learners every trial starts from, by unit ("*", an agent or a group): the file's, else the env's
        recipe's fitted to its spaces (what `pzasync train ENV` trains with)."""
        if self._base is None:
            minutes, steps = self.settings.budget()
            base = Trainer(self.settings.env, minutes=minutes, steps=steps, file_options=self.options,
                           file_learners=self.learners, options={"out_dir": None}, say=self.notes.append)
            self._base = dict(base.learners) if isinstance(base.learners, dict) else {"*": base.learners}
        return self._base

    def baseline_params(self) -> tuple[dict[str, Any] | None, str]:
        """Each searched option at the value a trial would have without the search (the fixed options', else the
        recipe's, else the default): the params of the baseline trial, or None and why not (a value the space
        cannot draw)."""
        trainer = self.trainer({}, None)
        learners = {unit: (learner_name(spec), dict(resolve_learner(spec, unit)[1]))
                    for unit, spec in self.base_learners().items()}
        params: dict[str, Any] = {}
        for param in self.space:
            kind, _, name = param.target
            if kind == RUN:
                value = getattr(trainer.config, name)
            else:
                unit = self._units(param, learners)[0]
                cls, options = resolve_learner(learners[unit], unit)
                value = cls.validate_config(unit, options)[name]
            if not param.can_draw(value):
                return None, f"{param.key} = {value!r} is outside its {param.describe()}"
            params[param.key] = value
        return params, ""

    def _split(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Sampled values -> (run options, learners with the learner options set over each unit's)."""
        run: dict[str, Any] = {}
        learners = {unit: (learner_name(spec), dict(resolve_learner(spec, unit)[1]))
                    for unit, spec in self.base_learners().items()}
        for param in self.space:
            kind, unit, name = param.target
            if param.key not in params:
                continue
            if kind == RUN:
                run[name] = params[param.key]
                continue
            for target in self._units(param, learners):
                learners[target][1][name] = params[param.key]
        return run, learners

    def _units(self, param: Param, learners: Mapping[str, tuple[str, dict[str, Any]]]) -> list[str]:
        """The learner units a `learners.UNIT.OPTION` key sets: UNIT itself, or every unit whose learner is
        named UNIT."""
        _, unit, _ = param.target
        if unit in learners:
            return [str(unit)]
        return [u for u, (name, _) in learners.items() if name == unit]

    # ------------------------------------------------------------------------------------------ the check
    def check(self) -> SweepFile:
        """Check the whole file against the run before any trial starts: every key names an option the run has,
        every value the space can draw is one the option accepts (a range's ends, every choice) with the fixed
        options, and a trial's plan is built (the env made, its spaces checked). ConfigError naming the file and
        the key."""
        where = f"{self.path}: [space]"
        learners = {unit: (learner_name(spec), dict(resolve_learner(spec, unit)[1]))
                    for unit, spec in self.base_learners().items()}
        run_specs = {f.name: spec for f, spec in declared(RunConfig)}
        seen: dict[tuple[str, str], str] = {}
        for param in self.space:
            kind, unit, name = param.target
            if kind == RUN:
                if name not in run_specs:
                    raise ConfigError(f"{where} {param.key!r}: no run option {name!r}; known options: "
                                      f"{sorted(run_specs)}")
                if name in OWNED:
                    raise ConfigError(f"{where} {param.key!r}: {name} is the sweep's to set: {OWNED[name]}")
                self._check_kind(param, run_specs[name].check.kind)
                targets: list[tuple[str, str]] = [("run", name)]
            else:
                units = self._units(param, learners)
                if not units:
                    raise ConfigError(f"{where} {param.key!r}: {unit!r} is neither a learner unit of this run "
                                      f"({', '.join(repr(u) for u in learners)}) nor the name of its learners "
                                      f"({', '.join(sorted({n for n, _ in learners.values()}))})")
                for target in units:
                    checks = resolve_learner(learners[target], target)[0].Options.checks()
                    if name not in checks:
                        raise ConfigError(f"{where} {param.key!r}: learner {learners[target][0]} has no option "
                                          f"{name!r}; known options: {sorted(checks)}")
                    self._check_kind(param, checks[name].kind)
                targets = [(t, name) for t in units]
            for option in targets:
                if option in seen:
                    raise ConfigError(f"{where} {param.key!r} and {seen[option]!r} both set {'.'.join(option)}")
                seen[option] = param.key
            for value in param.candidates():
                try:
                    self.trainer({param.key: value}, None)
                except (ConfigError, UserInputError) as exc:
                    raise ConfigError(f"{where} {param.key!r} can draw {value!r}: {exc}") from None
        first = {p.key: p.candidates()[0] for p in self.space}
        try:
            self.trainer(first, None).build()
        except (ConfigError, UserInputError) as exc:
            raise ConfigError(f"{self.path}: a trial with {first} is refused: {exc}") from None
        return self

    def _check_kind(self, param: Param, kind: Any) -> None:
        """A float range refused for an integer option (it would draw 1.7), with the distributions that fit."""
        if kind is int and param.distribution in ("uniform", "log_uniform"):
            raise ConfigError(f"{self.path}: [space] {param.key!r}: {param.distribution} draws numbers with "
                              f"fractions, the option takes integers: use int_uniform or choice")


def setting_names() -> list[str]:
    """The [sweep] table's settings, in order (for docs and errors)."""
    return [f.name for f in fields(SweepSettings)]
