"""`pzasync suite`: the learning suite (pzasync/bench/suite.py; docs/benchmarks.md "Learning suite")."""

from __future__ import annotations

import click
from rich.table import Table

from pzasync.cli.common import console
from pzasync.errors import UserInputError
from pzasync.extras import require


@click.command()
@click.argument("envs", nargs=-1, metavar="[ENV ...]")
@click.option("--minutes", type=float, default=10.0, show_default=True,
              help="Wall-clock minutes of training per env and seed.")
@click.option("--seeds", type=int, default=3, show_default=True, help="Seeds per env (F .. F+K-1).")
@click.option("--first-seed", type=int, default=0, show_default=True, metavar="F",
              help="The first seed: more seeds for envs an earlier suite trained, without training its seeds again.")
@click.option("--out", "out", default="suite", show_default=True, metavar="DIR",
              help="Where suite.json, ENV.png and the runs (runs/ENV/) go.")
@click.option("--eval-every", "eval_every_s", type=float, default=None, metavar="SECONDS",
              help="Seconds between evaluations while training [default: a tenth of the budget, at least 5].")
@click.option("--eval-episodes", type=int, default=10, show_default=True,
              help="Episodes per scored seat in each evaluation while training.")
@click.option("--baseline-episodes", type=int, default=50, show_default=True,
              help="Episodes per scored seat of the random and untrained baselines.")
@click.option("--env-api", type=click.Choice(["auto", "aec", "parallel"]), default="auto", show_default=True,
              help="Step each env through its AEC or parallel API (auto: parallel where the env has one).")
@click.option("--parallel", type=int, default=1, show_default=True, metavar="N",
              help="Runs (each env's seeds) trained side by side, N at a time, each in a process of its own pinned to "
                   "an equal share of the cores (cores // N, at least 1), which its learner hosts and torch threads "
                   "are sized to. 1: one after the other.")
@click.option("--learner", default=None, metavar="SPEC",
              help="Train every env with this learner spec (as `pzasync train --learner` takes it, e.g. "
                   "'mappo,lr_schedule=linear') in place of its recipe's; the recipe's groups, wrappers and env copies "
                   "stay.  [default: each recipe's]")
@click.option("--envs-per-actor", type=int, default=None, metavar="N",
              help="Env copies every run's actor steps in place of its recipe's (as `pzasync train --envs-per-actor` "
                   "takes it).  [default: each recipe's]")
def suite(envs: tuple[str, ...], minutes: float, seeds: int, first_seed: int, out: str, eval_every_s: float | None,
          eval_episodes: int, baseline_episodes: int, env_api: str, parallel: int, learner: str | None,
          envs_per_actor: int | None) -> None:
    """Train each suite env (or the ENVs named) with its recipe for --minutes per seed, and score it against wall
    time beside random play and an untrained network: OUT/suite.json (docs/suite-schema.json), OUT/ENV.png and a
    summary table. Each run's directory (metrics.jsonl, TensorBoard's tb/ with the extra) is under OUT/runs/."""
    from pzasync.bench.suite import SUMMARY_COLUMNS, SuiteSettings, run_suite, summary_rows
    from pzasync.errors import ConfigError
    from pzasync.recipes import SUITE

    require("torch", "pzasync suite")
    settings = SuiteSettings(envs=list(envs), minutes=minutes, seeds=seeds, first_seed=first_seed, out=out,
                             eval_every_s=eval_every_s,
                             eval_episodes=eval_episodes, baseline_episodes=baseline_episodes, env_api=env_api,
                             parallel=parallel, learner=learner, envs_per_actor=envs_per_actor)
    try:
        settings.validate()
    except ConfigError as exc:
        raise UserInputError(str(exc)) from None
    names = list(envs) or list(SUITE)
    if parallel > 1:
        from pzasync.bench.side_by_side import core_slices

        runs = len(names) * seeds
        share = len(core_slices(parallel)[0])
        console.print(f"learning suite: {len(names)} envs x {seeds} seeds x {minutes:g} min, {parallel} runs at a time "
                      f"on {share} core(s) each (about {-(-runs // parallel) * minutes:g} min of training, then the "
                      f"baselines)", highlight=False)
    else:
        console.print(f"learning suite: {len(names)} envs x {seeds} seeds x {minutes:g} min "
                      f"(about {len(names) * seeds * minutes:g} min of training, then the baselines)", highlight=False)
    report = run_suite(settings, on_run=lambda env, seed: console.print(f"  {env}, seed {seed}", highlight=False))
    table = Table(title=f"learning suite, {minutes:g} min per seed", title_justify="left")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="left" if column in ("env", "metric") else "right", overflow="fold")
    for row in summary_rows(report):
        table.add_row(*row)
    console.print(table)
    for entry in report["envs"]:
        for note in entry["recipe"]["notes"]:
            console.print(f"{entry['short']}: {note}", highlight=False, soft_wrap=True)
    console.print(f"report: {out}/suite.json; plots: " + ", ".join(str(e['plot']) for e in report["envs"]),
                  highlight=False, soft_wrap=True)
    if report["interrupted"]:
        console.print("[yellow]interrupted: the report holds the envs that finished[/]")
        raise SystemExit(130)
