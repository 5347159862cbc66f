"""`pzasync bench`: its options are generated from BenchSettings' declarations (pzasync/bench/settings.py)."""

from __future__ import annotations

from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pzasync.bench.settings import BenchSettings
from pzasync.cli.common import console, with_learner_for
from pzasync.cli.options import SectionedCommand, declared_params, given
from pzasync.config.groups import parse_groups


@click.command(cls=SectionedCommand)
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Read bench settings from this TOML file: a [bench] table (or flat keys) of the settings below, "
                   "as --print-config writes them. Flags override it.")
@click.option("--print-config", is_flag=True,
              help="Print the resolved bench settings as TOML (a file for --config) and exit without measuring.")
@click.option("--learner-for", "learner_for", multiple=True, metavar="AGENT=SPEC",
              help="Learner for one agent, e.g. player_1=random, overriding --learner (repeatable).")
@click.option("--group", "groups", multiple=True, metavar="NAME=PATTERN[,PATTERN]",
              help="Agent group sharing one learner in every trial, e.g. pistons=piston_* (repeatable): the run "
                   "option agent_groups.")
@click.option("--learner-processes", "learner_processes", type=int, default=None,
              help="Learner host processes of the async trials: the run option learner_processes [default: one "
                   "per core beyond the actor's, at most one per learner].")
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Run nothing: show (and with --target, re-score) a report written by --json.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write the PNG here.")
def bench(config_file: str | None, print_config: bool, learner_for: tuple[str, ...], groups: tuple[str, ...],
          learner_processes: int | None, from_json: str | None, json_path: str | None, plot_path: str | None,
          **_settings: Any) -> None:
    """Compare AsyncRunner with SequentialRunner and the bare loops on ENV, same seeds and algorithm."""
    import json
    from pathlib import Path

    from pzasync.bench.harness import plan_trials, rescore, run_bench
    from pzasync.bench.report import describe

    file_values = BenchSettings.toml_values(Path(config_file).read_text(), config_file) if config_file else {}
    values = {**file_values, **given(click.get_current_context(), [BenchSettings])}
    if from_json is not None:
        with open(from_json) as f:
            report = json.load(f)
        if values.get("target") is not None or report["settings"].get("target") is not None:
            report = rescore(report, values.get("target"), values.get("target_window"))
        _show_bench(report, json_path, plot_path)
        return
    run_options = {**values.get("run_options", {}), **({"agent_groups": parse_groups(groups)} if groups else {}),
                   **({"learner_processes": learner_processes} if learner_processes is not None else {})}
    settings = BenchSettings(**{**values, "run_options": run_options})
    settings.learners = with_learner_for(settings.learners, learner_for)
    settings.validate()
    if print_config:
        click.echo(settings.to_toml("pzasync bench: every setting, resolved (read it back with --config FILE).\n"
                                    "TOML has no null: \"none\" stands for None."), nl=False)
        return
    steps = settings.agent_steps
    total = len(plan_trials(settings))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        overall = progress.add_task("trials", total=total)
        current = progress.add_task("", total=steps)

        def on_trial_start(i: int, spec: Any) -> None:
            progress.update(overall, completed=i)
            progress.reset(current, total=steps,
                           description=f"{describe(spec.label)}, seed {spec.seed} (agent steps; then evaluation)")

        report = run_bench(settings, on_trial_start=on_trial_start,
                           on_progress=lambda n: progress.update(current, completed=n))
        progress.update(overall, completed=len(report["trials"]))
    _show_bench(report, json_path, plot_path)
    if report["interrupted"]:
        console.print("[yellow]interrupted: the report holds the trials that finished[/]")
        raise SystemExit(130)


bench.params.extend(declared_params([BenchSettings]))


def _show_bench(report: dict[str, Any], json_path: str | None, plot_path: str | None) -> None:
    import json

    from pzasync.bench.report import headline_lines, plot_report, summary_tables

    for table in summary_tables(report):
        console.print(table)
    for line in headline_lines(report):
        console.print(line, soft_wrap=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
        console.print(f"report: {json_path}")
    if plot_path:
        console.print(f"plot: {plot_report(report, plot_path)}")


