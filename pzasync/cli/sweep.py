"""`pzasync sweep FILE`: a search over run and learner options (pzasync/sweep; docs/sweeps.md), with a live table
of trials."""

from __future__ import annotations

import time
from typing import Any

import click
from rich import box
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pzasync.cli.common import console
from pzasync.config.declare import check_value, declared
from pzasync.extras import require

#: Trials the live table shows (the latest ones); the table at the end shows every trial.
LIVE_ROWS = 15


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out", default=None, metavar="DIR",
              help="Where sweep.json, sweep.png, best.toml and the trials (trials/NNNN/) go [default: "
                   "sweeps/FILE-TIMESTAMP].")
@click.option("--trials", type=int, default=None, help="Trials in all (over the file's [sweep] trials).")
@click.option("--parallel", default=None, metavar="N|auto",
              help="Trials side by side, each in a process of its own on cores // N cores (over the file's).")
@click.option("--check", "check_only", is_flag=True,
              help="Check the file (every key, value and range against the run's options) and exit.")
def sweep(file: str, out: str | None, trials: int | None, parallel: str | None, check_only: bool) -> None:
    """Search run and learner options with Optuna: FILE's [space] drawn for each trial, each trial a `pzasync
    train` run at a fixed budget scored by the evaluator's figure, several side by side, bad ones pruned on their
    evaluation rounds. Writes OUT/sweep.json, OUT/sweep.png and OUT/best.toml (`pzasync train ENV --config
    best.toml`). The whole file is checked before any trial starts. Ctrl-C stops the running trials gracefully
    and keeps the ones that ended."""
    from pzasync.sweep import SweepFile, SweepSettings

    require("torch", "pzasync sweep")
    require("sweep", "pzasync sweep")
    sweep_file = SweepFile.read(file)
    specs = {f.name: spec for f, spec in declared(SweepSettings)}
    if trials is not None:
        check_value("--trials", "", trials, specs["trials"])
        sweep_file.settings.trials = trials
    if parallel is not None:
        value: Any = parallel if parallel == "auto" else _integer(parallel)
        check_value("--parallel", "", value, specs["parallel"])
        sweep_file.settings.parallel = value
    sweep_file.check()
    for note in sweep_file.notes:
        console.print(note, highlight=False, soft_wrap=True)
    if check_only:
        console.print(f"{file}: {len(sweep_file.space)} options searched over {sweep_file.settings.env}; checked",
                      highlight=False)
        return
    _run(sweep_file, out or f"sweeps/{click.format_filename(file).rsplit('/', 1)[-1].rsplit('.', 1)[0]}-"
                            f"{time.strftime('%Y%m%d-%H%M%S')}")


def _integer(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text


def _run(sweep_file: Any, out: str) -> None:
    from pzasync.bench.side_by_side import core_slices
    from pzasync.sweep import run_sweep
    from pzasync.sweep.report import table_rows

    settings = sweep_file.settings
    minutes, steps = settings.budget()
    at_once = settings.trials_at_once(len(core_slices(1)[0]))
    share = len(core_slices(at_once)[0])
    budget = " or ".join(([f"{minutes:g} min"] if minutes is not None else [])
                         + ([f"{steps:,} agent steps"] if steps is not None else []))
    console.print(f"sweep of {settings.env}: {settings.trials} trials of {budget}, {at_once} at a time on {share} "
                  f"core(s) each (its learner hosts and torch threads sized to them); {settings.direction} "
                  f"{settings.metric}; pruner {settings.pruner}; in {out}", highlight=False, soft_wrap=True)
    progress = Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)
    task = progress.add_task("trials", total=settings.trials)

    def table(report: Any, last: int | None = None) -> Table:
        columns, rows = table_rows(report)
        best = report.best
        title = "trials" + ("" if best is None else f" (best: trial {best.number}, {best.score:.4g})")
        shown = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)  # no rules between columns: 80 fit
        for column in columns:
            shown.add_column(column, justify="left" if column in ("trial", "state", "options") else "right",
                             overflow="fold", no_wrap=column != "options")
        for row in rows[-last:] if last else rows:
            shown.add_row(*row)
        return shown

    with Live(console=console, transient=True, refresh_per_second=2) as live:
        def show(report: Any) -> None:
            ended = sum(t.state not in ("waiting", "running", "pruning") for t in report.trials)
            progress.update(task, completed=ended)
            live.update(Group(progress, table(report, LIVE_ROWS)))

        report = run_sweep(sweep_file, out, on_change=show)
    console.print(table(report))
    for t in report.trials:
        if t.error:
            console.print(f"trial {t.number}: {t.error}", highlight=False, soft_wrap=True)
    best = report.best
    console.print(f"{sum(t.state == 'complete' for t in report.trials)} complete, "
                  f"{sum(t.state == 'pruned' for t in report.trials)} pruned, "
                  f"{sum(t.state in ('failed', 'interrupted') for t in report.trials)} failed or interrupted, in "
                  f"{report.seconds:.0f} s", highlight=False)
    base = report.baseline
    if base is not None:
        line = f"baseline (trial {base.number}, the options unsearched): "
        if base.score is None:
            line += base.state
        else:
            line += f"{settings.metric} {base.score:.4g}"
            if best is not None and best.score is not None and best.number != base.number:
                line += f"; the best trial differs from it by {best.score - base.score:+.4g}"
            elif best is not None:
                line += "; it is the best trial"
        console.print(line, highlight=False)
    elif report.baseline_skipped:
        console.print(f"no baseline trial: {report.baseline_skipped}", highlight=False, soft_wrap=True)
    if best is not None:
        console.print(f"best: trial {best.number}, {settings.metric} {best.score:.4g}: "
                      + ", ".join(f"{k} = {v!r}" for k, v in best.params.items()), highlight=False, soft_wrap=True)
    console.print(f"report: {report.files['json']}; plot: {report.files['plot'] or '-'}; best config: "
                  f"{report.files['best'] or '- (no trial completed)'}"
                  + (f" (pzasync train {settings.env} --config {report.files['best']})" if report.files["best"]
                     else ""), highlight=False, soft_wrap=True)
    if report.interrupted:
        console.print("[yellow]interrupted: the report holds the trials that ended[/]")
        raise SystemExit(130)
