"""`run_sweep`: an Optuna study over a sweep file's space, its trials trained side by side and pruned on their
evaluation rounds (docs/sweeps.md).

The study lives in this process (Optuna's ask-and-tell interface); each trial is a `pzasync train` run in a
process of its own (bench/side_by_side.py, `trial.run_trial`), N at a time, each pinned to cores // N cores so
that its learner hosts and torch threads are sized to its share. While a trial runs, each complete evaluation
round of its run directory is reported to the pruner (the round's index is the step: rounds come every
eval_every_s seconds, so round k is the same point of the budget in every trial); a pruned trial gets one SIGINT
and stops as a run stops on Ctrl-C (final checkpoints written, shared memory released, its processes gone).
"""

from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pzasync.bench.side_by_side import SideBySide, core_slices, usable_core_ids
from pzasync.errors import ConfigError, UserInputError
from pzasync.extras import require
from pzasync.runtime.stop_signals import StopSignals
from pzasync.sweep.file import SweepFile
from pzasync.sweep.settings import SweepSettings
from pzasync.sweep.trial import CONFIG, rounds, run_trial

#: A trial's states, as the table and sweep.json give them.
STATES = ("waiting", "running", "pruning", "complete", "pruned", "failed", "interrupted")


@dataclass
class TrialRecord:
    """One trial: its number, sampled params, state, score (the final evaluation's; None unless complete), the
    evaluation rounds seen while it ran (each with its score), its folder and run directory, and its error."""

    number: int
    params: dict[str, Any]
    folder: str
    state: str = "waiting"
    score: float | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    run_dir: str | None = None
    seconds: float | None = None
    final: dict[str, Any] | None = None
    error: str | None = None
    #: The baseline trial: the options as the file and the recipe give them, unsearched.
    baseline: bool = False

    @property
    def last_round_score(self) -> float | None:
        """The score of the latest evaluation round seen (None before the first)."""
        return self.rounds[-1]["score"] if self.rounds else None


@dataclass
class SweepReport:
    """What a sweep did: its file, folder, trials and how they ran side by side; `best` among the complete ones."""

    file: SweepFile
    out: str
    parallel: int
    cores_per_trial: int
    trials: list[TrialRecord] = field(default_factory=list)
    interrupted: bool = False
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    seconds: float = 0.0
    #: The files written at the end: sweep.json, best.toml (None without a complete trial), the plot (None
    #: without matplotlib).
    files: dict[str, str | None] = field(default_factory=dict)
    #: Why there is no baseline trial, where `settings.baseline` asked for one.
    baseline_skipped: str = ""

    @property
    def settings(self) -> SweepSettings:
        return self.file.settings

    @property
    def baseline(self) -> TrialRecord | None:
        """The baseline trial (the unsearched options), if there is one."""
        return next((t for t in self.trials if t.baseline), None)

    @property
    def best(self) -> TrialRecord | None:
        """The complete trial with the best score in the sweep's direction (the first of equals)."""
        done = [t for t in self.trials if t.state == "complete" and t.score is not None]
        if not done:
            return None
        sign = 1.0 if self.settings.direction == "maximize" else -1.0
        return max(done, key=lambda t: (sign * t.score, -t.number))  # type: ignore[operator]


def make_pruner(settings: SweepSettings) -> Any:
    """The Optuna pruner `settings.pruner` names: MedianPruner (after `prune_startup_trials` trials and
    `prune_warmup_rounds` rounds), NopPruner, or what a 'module:callable' returns."""
    import optuna

    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_startup_trials,
                                           n_warmup_steps=settings.prune_warmup_rounds)
    if settings.pruner == "none":
        return optuna.pruners.NopPruner()
    module, _, name = settings.pruner.partition(":")
    try:
        pruner = getattr(importlib.import_module(module), name)()
    except Exception as exc:  # noqa: BLE001 - user code: any failure is reported the same way
        raise ConfigError(f"[sweep] pruner={settings.pruner!r}: {type(exc).__name__}: {exc}") from None
    if not isinstance(pruner, optuna.pruners.BasePruner):
        raise ConfigError(f"[sweep] pruner={settings.pruner!r}: returned {type(pruner).__name__}, not an Optuna "
                          f"pruner (optuna.pruners.BasePruner)")
    return pruner


def make_sampler(settings: SweepSettings) -> Any:
    """The Optuna sampler of `settings.sampler`, seeded; TPE with a constant liar, so that trials running side by
    side are not drawn alike."""
    import optuna

    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=settings.seed)
    return optuna.samplers.TPESampler(seed=settings.seed, constant_liar=True)


def run_sweep(file: SweepFile, out: str | Path, *, pruner: Any = None,
              on_change: Callable[[SweepReport], None] | None = None) -> SweepReport:
    """Check `file` (`SweepFile.check`), then run its trials side by side and write OUT/sweep.json (rewritten as
    each trial ends), OUT/sweep.png and OUT/best.toml (report.py). `pruner`: an Optuna pruner instead of the
    file's. `on_change(report)` is called whenever a trial starts, reports a round or ends. Ctrl-C or SIGTERM stops
    the running trials gracefully and ends the sweep with what finished (`interrupted`)."""
    require("sweep", "pzasync sweep")
    import optuna

    from pzasync.sweep import report as files

    file.check()
    settings = file.settings
    cores = usable_core_ids()
    parallel = settings.trials_at_once(len(cores))
    report = SweepReport(file, str(out), parallel, len(core_slices(parallel, cores)[0]))
    Path(out).mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=settings.direction, sampler=make_sampler(settings),
                                pruner=pruner if pruner is not None else make_pruner(settings))
    if settings.baseline:
        params, report.baseline_skipped = file.baseline_params()
        if params is not None:
            study.enqueue_trial(params)
    minutes, steps = settings.budget()
    live: dict[int, tuple[Any, TrialRecord]] = {}
    stop: list[int] = []
    started = time.monotonic()

    def changed() -> None:
        report.seconds = time.monotonic() - started
        if on_change is not None:
            on_change(report)

    with StopSignals(stop.append), SideBySide(parallel, cores, name="sweep trial") as jobs:
        while True:
            while not stop and jobs.free and len(report.trials) < settings.trials:
                trial = study.ask()
                record = _prepare(file, trial, Path(out))
                record.baseline = settings.baseline and not report.baseline_skipped and trial.number == 0
                report.trials.append(record)
                if record.state == "failed":
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    jobs.start(trial.number, run_trial, record.folder, settings.env, minutes, steps,
                               settings.final_episodes, settings.metric)
                    record.state = "running"
                    live[trial.number] = (trial, record)
                changed()
            if not jobs.running:
                break
            if stop and not report.interrupted:
                report.interrupted = True
                for number in list(jobs.running):
                    jobs.stop(number)
            ended = jobs.poll(0.5)
            for number, (trial, record) in live.items():
                if _report_rounds(trial, record, settings.metric):
                    if record.state == "running" and trial.should_prune():
                        record.state = "pruning"
                        jobs.stop(number)
                    changed()
            for outcome in ended:
                trial, record = live.pop(outcome.key)  # type: ignore[call-overload]
                _report_rounds(trial, record, settings.metric, finished=True)
                _finish(study, trial, record, outcome)
                files.write_json(report)
                changed()
    report.seconds = time.monotonic() - started
    report.files = files.write_all(report)
    changed()
    return report


def _prepare(file: SweepFile, trial: Any, out: Path) -> TrialRecord:
    """A trial's params drawn, its folder made and its config.toml written (the file `pzasync train --config`
    reads); a combination the options refuse together fails the trial here, before any process starts."""
    params = {param.key: param.suggest(trial) for param in file.space}
    folder = out / "trials" / f"{trial.number:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    record = TrialRecord(trial.number, params, str(folder))
    try:
        trainer = file.trainer(params, str(folder))
        (folder / CONFIG).write_text(trainer.to_toml(
            f"sweep {file.path}, trial {trial.number}: {params}\nTOML has no null: \"none\" stands for None."))
    except (ConfigError, UserInputError) as exc:
        record.state, record.error = "failed", f"refused before it started: {exc}"
    return record


def _report_rounds(trial: Any, record: TrialRecord, metric: str, finished: bool = False) -> bool:
    """Report the trial's new complete evaluation rounds to the study (`trial.report`); whether there were any.
    `finished`: the trial's process has ended, so every round written is complete."""
    seen = {r["round"] for r in record.rounds}
    new = [r for r in rounds(record.folder, metric, finished) if r["round"] not in seen]
    for r in new:
        trial.report(float(r["score"]), r["round"])
        record.rounds.append(r)
    return bool(new)


def _finish(study: Any, trial: Any, record: TrialRecord, outcome: Any) -> None:
    """Tell the study how a trial ended and keep it on its record."""
    import optuna

    State = optuna.trial.TrialState
    record.seconds = outcome.seconds
    if record.state == "pruning":
        record.state = "pruned"
        study.tell(trial, state=State.PRUNED)
    elif outcome.status == "ok" and outcome.value.get("score") is not None:
        record.final, record.score, record.run_dir = outcome.value, outcome.value["score"], outcome.value["run_dir"]
        record.state = "complete"
        study.tell(trial, record.score)
    else:
        if outcome.status == "stopped":
            record.state, record.error = "interrupted", "stopped by a signal before it finished"
        else:
            record.state = "failed"
            record.error = (f"{type(outcome.error).__name__}: {outcome.error}" if outcome.status == "error"
                            else "no scored unit in the final evaluation")
            if outcome.trace:
                (Path(record.folder) / "error.txt").write_text(outcome.trace)
            elif outcome.error is not None:
                (Path(record.folder) / "error.txt").write_text("".join(traceback.format_exception(outcome.error)))
        study.tell(trial, state=State.FAIL)
    if record.run_dir is None:
        from pzasync.sweep.trial import run_dir_of

        found = run_dir_of(record.folder)
        record.run_dir = str(found) if found is not None else None
