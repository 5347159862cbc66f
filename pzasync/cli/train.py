"""`pzasync train`: a thin layer over `pzasync.training.Trainer`. Its run options are generated from RunConfig's
declarations (pzasync/config/groups.py), read from a TOML file with --config (learners too), printed with
--print-config; what they leave open comes from the env's recipe."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from pzasync.cli.common import console, errors, parse_options, scoring_line
from pzasync.cli.options import SectionedCommand, declared_params, given
from pzasync.config import GROUPS
from pzasync.core.groups import members_label, units_in_order
from pzasync.extras import require
from pzasync.recipes import DEFAULT_RECIPE, SELF_PLAY
from pzasync.runtime.stop_signals import StopSignals
from pzasync.runtime.stop_signals import exit_code as signal_exit_code
from pzasync.runtime.stop_signals import reason as signal_reason
from pzasync.runtime.trackers import FAILED, FINISHED, KILLED

#: The defaults --help shows where `pzasync train`'s differ from RunConfig's: its own, and the recipe's.
TRAIN_DEFAULTS = {
    "out_dir": "runs", "progress": "on in a terminal",
    "envs_per_actor": f"{SELF_PLAY.envs_per_actor} in self-play, {DEFAULT_RECIPE.envs_per_actor} otherwise",
    "agent_groups": "players=* in self-play", "league": f"{SELF_PLAY.league} in self-play",
    "league_trainee_weights": "player_1=4 in connect_four's self-play",
    "eval_vs": "the env's recipe's: one_ply (connect_four), perfect (tictactoe), random elsewhere",
}
#: What `pzasync train` adds to the declared help of some options.
TRAIN_NOTES = {
    "eval_vs": "pzasync train: also the yardstick of the final evaluation; 'none': no evaluation while training.",
    "eval_every_s": "pzasync train: 0 turns evaluation while training off.",
    "league": "pzasync train: see also --self-play.",
}


@click.command(cls=SectionedCommand)
@click.argument("env_id", default=None, required=False)
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Read run options from this TOML file: one table per group below ([run], [acting], [learning], "
                   "[league], [evaluation], [reliability], [ray]), or flat keys (docs/running.md). Flags override "
                   "it; what neither gives comes from the env's recipe, then the defaults.")
@click.option("--print-config", is_flag=True,
              help="Print the resolved run options as TOML (a file for --config) and exit without training.")
@click.option("--learner", "learner", default=None,
              help="Learner for every agent: NAME[,KEY=VALUE...], e.g. 'ppo,lr=3e-4' or 'mypkg.mod:MyLearner'; "
                   "`pzasync learners NAME` lists a learner's options, their defaults and what they accept. "
                   "Default: the env's recipe's (`pzasync envs`, docs/running.md \"Recipes\"): "
                   f"{SELF_PLAY.learner!r} in self-play (see --self-play), with ',mirror=True' on connect_four; "
                   f"{DEFAULT_RECIPE.learner!r} otherwise.")
@click.option("--learner-for", "learner_for", multiple=True, metavar="AGENT=SPEC",
              help="Learner for one agent, overriding --learner (repeatable).")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env keyword argument, e.g. N=4.")
@click.option("--wrapper", "wrappers", multiple=True, metavar="SPEC",
              help="Env wrapper applied in order, replacing the recipe's (repeatable): a SuperSuit wrapper "
                   "NAME[,KEY=VALUE...] such as 'resize_v1,x_size=84,y_size=84', or 'module:callable'; "
                   "'none' for no wrappers. Default: the env's recipe's (pistonball: grey, 64x64, 3 frames stacked).")
@click.option("--runner", type=click.Choice(["async", "sequential"]), default="async", show_default=True)
@click.option("--steps", type=int, default=None, help="Agent steps (decisions) to train for.")
@click.option("--minutes", type=float, default=None,
              help="Wall-clock minutes to train for (default: the env's recipe's, "
                   f"{DEFAULT_RECIPE.minutes:g} where it has none, if no --steps).")
@click.option("--self-play/--independent", "self_play", default=None,
              help="Seats share one learner (an agent group) and train in a league against their latest and past "
                   "selves. Default: on where the env's recipe says so (connect_four, tictactoe) when no "
                   "--group or --learner-for is given (a --config file's agent_groups leave it on).")
@click.option("--final-episodes", "final_episodes", type=int, default=None,
              help="Games per scored unit (seat, side or team) at the end against the yardstick and random, and "
                   "for the untrained baseline (0 to skip). Default: 400, or as many as fit where 400 would take "
                   "more than a quarter of the training time, as measured on one round of every evaluation first.")
def train(env_id: str | None, config_file: str | None, print_config: bool, learner: str | None,
          learner_for: tuple[str, ...], env_args: tuple[str, ...], wrappers: tuple[str, ...], runner: str,
          steps: int | None,
          minutes: float | None, self_play: bool | None, final_episodes: int | None, **_run_options: Any) -> None:
    """Train every agent of ENV_ID (default: connect_four, both seats sharing one DQN in a self-play league).

    Scores the greedy policies against a yardstick player while training (eval.png) and at the end, beside an
    untrained network of the same shape and random play. SIGTERM or Ctrl-C stops the run gracefully (final
    checkpoints kept, no final evaluation) and exits with 128 + the signal's number (docs/reliability.md).
    """
    flags = given(click.get_current_context(), GROUPS)
    with _exit_on_stop_signals():
        _train(env_id, config_file=config_file, print_config=print_config, learner=learner,
               learner_for=learner_for, env_args=env_args, wrappers=wrappers, runner=runner, steps=steps,
               minutes=minutes,
               self_play=self_play, final_episodes=final_episodes, flags=flags)


train.params.extend(declared_params(GROUPS, defaults=TRAIN_DEFAULTS, notes=TRAIN_NOTES))


class _StoppedBySignal(BaseException):
    """SIGTERM or SIGINT outside a run (building it, the final evaluation): leave at once."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _exit_on_stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the command with 128 + the signal's number wherever no run is in progress (a run
    installs its own handlers for its whole length: runners.py). Nothing is held outside a run. Once the command
    has finished, both are ignored until the process exits: the run is complete, its exit code stands."""
    def stop(signum: int) -> None:
        raise _StoppedBySignal(signum)

    try:
        with StopSignals(stop) as signals:
            yield
            signals.ignore_after = True  # everything is written: a signal while the interpreter exits is ignored
    except _StoppedBySignal as stopped:
        errors.print(f"stopped by {signal.Signals(stopped.signum).name}", highlight=False)
        sys.exit(signal_exit_code(stopped.signum))



def _train(env_id: str | None, *, config_file: str | None, print_config: bool, learner: str | None,
           learner_for: tuple[str, ...], env_args: tuple[str, ...], wrappers: tuple[str, ...], runner: str,
           steps: int | None,
           minutes: float | None, self_play: bool | None, final_episodes: int | None, flags: dict[str, Any]) -> None:
    from pzasync.training import Trainer

    require("torch", "pzasync train")
    from pzasync.training.learner_file import read_config

    file_options, file_learners = read_config(config_file) if config_file else ({}, None)

    def say(note: str) -> None:
        if not print_config:
            console.print(note, highlight=False, soft_wrap=True)

    trainer = Trainer(env_id, learner=learner, learner_for=learner_for, env_args=parse_options(env_args, "--env-arg"),
                      wrappers=None if not wrappers else () if list(wrappers) == ["none"] else tuple(wrappers),
                      runner=runner, steps=steps, minutes=minutes, self_play=self_play, final_episodes=final_episodes,
                      options=flags, file_options=file_options, file_learners=file_learners,
                      run_defaults={"out_dir": "runs", "progress": console.is_terminal}, say=say)
    if print_config:
        decided_here = {} if "progress" in {**file_options, **flags} else {"progress": "on in a terminal"}
        click.echo(trainer.to_toml(f"pzasync train {trainer.env.name}: every run and learner option, resolved (read "
                                   f"it back with --config FILE).\nTOML has no null: \"none\" stands for None.",
                                   decided_here), nl=False)
        return
    trainer.build()
    for line in trainer.describe():
        console.print(line, highlight=False)
    run = trainer.runner
    try:
        result = trainer.train(hold_trackers=True)  # open for the final evaluation: `finish` below closes them
    except Exception as exc:
        if run.stop_signal is None:
            raise
        errors.print(f"[bold red]error[/] after {signal_reason(run.stop_signal)}: {escape(str(exc))}", highlight=False,
                     soft_wrap=True)
        sys.exit(signal_exit_code(run.stop_signal))
    yardstick = trainer.choices.yardstick
    if run.stop_signal is not None:
        _print_summary(result, None, yardstick)
        console.print(f"stopped by {signal.Signals(run.stop_signal).name}: no final evaluation"
                      + (f"; score the checkpoints with `pzasync eval {result.run_dir}`" if result.run_dir else ""),
                      highlight=False)
        sys.exit(signal_exit_code(run.stop_signal))
    report, status = None, FAILED
    try:
        episodes = trainer.final_episodes_for(result) if result.run_dir and trainer.learned else 0
        if episodes:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                          transient=True) as progress:
                task = progress.add_task(f"evaluating: {episodes} games per scored unit", total=None)
                report = trainer.final_evaluation(result, episodes, progress=lambda label: progress.advance(task))
        status = FINISHED
    except KeyboardInterrupt:
        status = KILLED
        raise
    finally:
        trainer.finish(report, status)
    _print_summary(result, report, yardstick)
    if episodes:
        _print_exploitability(trainer.exploitability(result), result.run_dir)
    if trainer.final_episodes != 0 and not trainer.learned:
        console.print("no agent learns here, so there is no trained policy to score", highlight=False)


def _print_exploitability(reports: dict[str, Any] | None, run_dir: str) -> None:
    """On leduc, one line of exact exploitability (docs/league.md, "Exploitability") beside the final scores: it
    ranks poker policies where chips won from random players do not."""
    if not reports:
        return
    untrained = reports.get("untrained")
    console.print(f"exact exploitability (sampled; big blinds a hand a best response wins, lower is better): "
                  f"trained {reports['trained'].exploitability:.3f}"
                  + (f", untrained {untrained.exploitability:.3f}" if untrained else "")
                  + f", random play {reports['random'].exploitability:.3f} (`pzasync exploitability {run_dir}`)",
                  highlight=False, soft_wrap=True)


def _print_summary(result: Any, report: Any = None, yardstick: str = "random") -> None:
    """Two narrow tables (they fit 80 columns without cutting names or numbers): training, one row per learning
    unit (an agent group under its members' short name), then scores."""
    console.print(f"[bold]{result.env}[/]: {result.runner} runner, {result.agent_steps:,} agent steps in "
                  f"{result.wall_seconds:.0f}s ({result.actor_steps_per_second:,.0f}/s), {result.episodes:,} "
                  f"episodes; stopped: {result.stopped_because}", highlight=False)
    if result.env_set:
        console.print(env_set_line(result.env_set), highlight=False, soft_wrap=True)
    table = Table(title="training", title_justify="left")
    recorded = any(r.dataset_transitions for r in result.agents.values())  # RunConfig.dataset: rows loaded
    for column in ("agent", "learner", "updates", "version", "lag mean/p95", "dropped", *(["recorded"] * recorded)):
        table.add_column(column, justify="left" if column in ("agent", "learner") else "right",
                         overflow="fold")
    # One row per learning unit: a group's learner figures (dropped transitions included) are its own, which
    # every member's AgentResult repeats, so they are read once, from its first member.
    for unit, members in units_in_order({a: r.group or a for a, r in result.agents.items()}).items():
        r = result.agents[members[0]]
        learner = r.learner + (f" ({r.group})" if r.group else "") + (" [red]crashed[/]" if r.error else "")
        table.add_row(members_label(members) if r.group else unit, learner, f"{r.updates:,}",
                      str(r.published_version), f"{r.policy_lag_mean:.0f}/{r.policy_lag_p95:.0f}",
                      f"{r.transitions_dropped:,}",
                      *([f"{sum(result.agents[m].dataset_transitions for m in members):,}"] * recorded))
    console.print(table)
    if report is not None and report.results:
        console.print(scoring_line(report), highlight=False)
        games = report.episodes
        # Game results (1/0/-1) are scored as wins, draws and losses; other returns by their mean.
        outcomes = all(r.outcomes for r in report.results)
        side = "side" if report.scoring == "sides" else "team"
        per = "seat and opponent" if report.scoring == "seats" else f"{side} and policy"
        table = Table(title=f"greedy play, {games} {'games' if outcomes else 'episodes'} per {per}",
                      title_justify="left")
        scored = ("win [95% CI]", "draw", "loss") if outcomes else ("mean return [95% CI]",)
        for column in ("unit" if report.scoring != "seats" else "agent", "policy", "against", *scored):
            table.add_column(column, justify="left" if column in ("agent", "unit", "policy", "against") else "right",
                             overflow="fold")
        for unit in report.units:
            for r in (r for r in report.results if r.agent == unit):
                if outcomes:
                    lo, hi = r.win_rate_ci95
                    table.add_row(unit, r.policy, r.opponent, f"{r.win_rate:.1%} [{lo:.0%}-{hi:.0%}]",
                                  f"{r.draws / r.episodes:.1%}", f"{(r.episodes - r.wins - r.draws) / r.episodes:.1%}")
                else:
                    table.add_row(unit, r.policy, r.opponent, f"{r.mean:.4g} ± {r.mean_ci95:.2g}")
            table.add_section()
        console.print(table)
    if result.run_dir:
        console.print(f"run directory: {result.run_dir} (eval.png, returns.png, metrics.jsonl, checkpoints/)",
                      highlight=False, overflow="fold")


def env_set_line(summary: dict[str, Any]) -> str:
    """A run's env set in one line: the curriculum step reached and its changes, episodes per env."""
    played = ", ".join(f"{label} {n:,}" for label, n in sorted(summary["episodes_per_env"].items()))
    changes = summary["stage_changes"]
    reached = (f"; curriculum at {summary['step']} after {len(changes)} stage change(s) (curriculum.jsonl)"
               if summary.get("step") else "")
    return f"env set {summary['name']}{reached}; episodes per env: {played or '-'}"
