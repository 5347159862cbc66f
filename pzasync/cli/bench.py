"""`pzasync bench`: its options are generated from BenchSettings' declarations (pzasync/bench/settings.py)."""

from __future__ import annotations

from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pzasync.bench.settings import BenchSettings
from pzasync.cli.common import console
from pzasync.cli.options import SectionedCommand, declared_params, given
from pzasync.config.groups import parse_groups
from pzasync.extras import require
from pzasync.training.choices import with_learner_for


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
@click.option("--remote", is_flag=True,
              help="Measure the remote env path instead (docs/remote.md, \"Speed\"): CPU time per agent step of ENV "
                   "served over a Unix socket, TCP loopback and an HTTP+JSON baseline, against ENV in process, and "
                   "the actor over a Unix socket against in process. Takes ENV (default connect_four), --steps "
                   "(default 4000), --json and the --remote-* options.")
@click.option("--remote-instances", default="1,8,16,32", show_default=True, metavar="N[,N...]",
              help="With --remote: instances per connection (a frame carries half of them).")
@click.option("--remote-paths", default="unix,tcp,http", show_default=True, metavar="P[,P...]",
              help="With --remote: the remote paths to measure, among unix, tcp, http, paced (a paced server "
                   "over a Unix socket: `pzasync serve --workers 4`) and parallel (copies stepped through the "
                   "server's parallel API, beside the env's parallel API in process).")
@click.option("--remote-repeats", default=3, show_default=True, type=click.IntRange(min=1),
              help="With --remote: runs per figure (the median is reported).")
@click.option("--remote-actor-copies", default=16, show_default=True, type=click.IntRange(min=0),
              help="With --remote: env copies of the actor comparison (0: skip it).")
def bench(config_file: str | None, print_config: bool, learner_for: tuple[str, ...], groups: tuple[str, ...],
          learner_processes: int | None, from_json: str | None, json_path: str | None, plot_path: str | None,
          remote: bool, remote_instances: str, remote_paths: str, remote_repeats: int, remote_actor_copies: int,
          **_settings: Any) -> None:
    """Compare AsyncRunner with SequentialRunner and the bare loops on ENV, same seeds and algorithm (or, with
    --remote, the remote env path against ENV in process)."""
    import json
    from pathlib import Path

    from pzasync.bench.harness import plan_trials, rescore, run_bench
    from pzasync.bench.report import describe

    require("torch", "pzasync bench")
    if plot_path:
        require("plot", "--plot")
    file_values = BenchSettings.toml_values(Path(config_file).read_text(), config_file) if config_file else {}
    values = {**file_values, **given(click.get_current_context(), [BenchSettings])}
    if remote:
        _remote_bench(values, remote_instances, remote_paths, remote_repeats, remote_actor_copies, json_path)
        return
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


def _remote_bench(values: dict[str, Any], instances: str, paths: str, repeats: int, actor_copies: int,
                  json_path: str | None) -> None:
    """`pzasync bench --remote` (pzasync/bench/remote.py)."""
    import json

    from pzasync.bench.remote import REMOTE_PATHS, remote_overhead, report_lines
    from pzasync.errors import ConfigError

    env = values.get("env", "pettingzoo.classic.connect_four_v3")
    if not isinstance(env, str):
        raise ConfigError("bench --remote: the env must be an env id (its servers run `pzasync serve ENV_ID`)")
    try:
        counts = tuple(int(n) for n in instances.split(","))
    except ValueError:
        raise ConfigError(f"--remote-instances: expected N[,N...], got {instances!r}") from None
    chosen = tuple(p.strip() for p in paths.split(",") if p.strip())
    if not counts or min(counts) < 1 or not chosen or any(p not in REMOTE_PATHS for p in chosen):
        raise ConfigError(f"bench --remote: --remote-instances takes integers >= 1 (got {instances!r}), "
                          f"--remote-paths some of {','.join(REMOTE_PATHS)} (got {paths!r})")
    steps = int(values.get("agent_steps", 4000))
    console.print(f"remote env overhead: {env}, {steps:,} agent steps per run, {repeats} runs per figure")
    report = remote_overhead(env, steps=steps, repeats=repeats, instances=counts, paths=chosen,
                             actor_copies=actor_copies, env_kwargs=values.get("env_kwargs") or {},
                             on_row=lambda row: console.print(f"  {row.instances} instances, {row.path}: "
                                                              f"{row.wall_us:.1f} us wall", highlight=False))
    for line in report_lines(report):
        console.print(line, highlight=False, soft_wrap=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
        console.print(f"report: {json_path}")


def command_line() -> str:
    """This process's command line as a shell would take it again: the report's `command` (docs/bench-schema.json)."""
    import shlex
    import sys

    return shlex.join(["pzasync", *sys.argv[1:]])


def _show_bench(report: dict[str, Any], json_path: str | None, plot_path: str | None) -> None:
    import json

    from pzasync.bench.report import headline_lines, plot_report, summary_tables

    for table in summary_tables(report):
        console.print(table)
    for line in headline_lines(report):
        console.print(line, soft_wrap=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"command": command_line(), **report}, f, indent=1)
        console.print(f"report: {json_path}")
    if plot_path:
        console.print(f"plot: {plot_report(report, plot_path)}")


