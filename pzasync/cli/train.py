"""`pzasync train`: its run options are generated from RunConfig's declarations (pzasync/config/groups.py), read
from a TOML file with --config, printed with --print-config; what they leave open comes from the env's recipe."""

from __future__ import annotations

import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from pzasync.cli.common import console, errors, learners_from_options, parse_options, scoring_line
from pzasync.cli.options import SectionedCommand, declared_params, given
from pzasync.config import GROUPS
from pzasync.errors import ConfigError, UserInputError
from pzasync.recipes import DEFAULT_RECIPE, SELF_PLAY, TRAIN_ENV, Recipe, recipe_for, train_recipe
from pzasync.runtime.stop_signals import StopSignals, exit_code as signal_exit_code, reason as signal_reason

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


def check_budget_options(steps: int | None, minutes: float | None) -> None:
    """--steps and --minutes must be budgets a run can meet: refused (one line) before anything starts."""
    if steps is not None and steps < 1:
        raise UserInputError(f"--steps {steps}: must be >= 1 agent steps")
    if minutes is not None and not minutes > 0:
        raise UserInputError(f"--minutes {minutes:g}: must be > 0")


@click.command(cls=SectionedCommand)
@click.argument("env_id", default=TRAIN_ENV)
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Read run options from this TOML file: one table per group below ([run], [acting], [learning], "
                   "[league], [evaluation], [reliability], [ray]), or flat keys (docs/running.md). Flags override "
                   "it; what neither gives comes from the env's recipe, then the defaults.")
@click.option("--print-config", is_flag=True,
              help="Print the resolved run options as TOML (a file for --config) and exit without training.")
@click.option("--learner", "learner", default=None,
              help="Learner for every agent: NAME[,KEY=VALUE...], e.g. 'ppo,lr=3e-4' or 'mypkg.mod:MyLearner'. "
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
              help="Games per seat at the end against the yardstick and random, and for the untrained baseline "
                   "(0 to skip). Default: 400, or fewer (not below 40) where 400 would take more than a quarter "
                   "of the training time, as measured on a few games first.")
def train(env_id: str, config_file: str | None, print_config: bool, learner: str | None,
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
    installs its own handlers for its whole length: runners.py). Nothing is held outside a run."""
    def stop(signum: int) -> None:
        raise _StoppedBySignal(signum)

    try:
        with StopSignals(stop):
            yield
    except _StoppedBySignal as stopped:
        errors.print(f"stopped by {signal.Signals(stopped.signum).name}", highlight=False)
        sys.exit(signal_exit_code(stopped.signum))



@dataclass(frozen=True)
class TrainChoices:
    """What `pzasync train ENV` runs once its options and the env's recipe are combined (`train_choices`)."""

    #: The --learner spec, the recipe's where none was given; `learners` adds --learner-for, parsed.
    learner: str
    learners: Any
    #: The league as the start line shows it (the mix of every unit, or unit: mix pairs); None: no league.
    league: str | None
    #: The player scored against: eval_vs if given, else the recipe's.
    yardstick: str
    #: Wall-clock minutes: --minutes, the recipe's if neither --steps nor --minutes was given, else None.
    minutes: float | None
    #: The RunConfig options the recipe may choose: agent_groups, league, league_trainee_weights, envs_per_actor.
    config: dict[str, Any]
    #: Whether an evaluator scores the policies while training (off with eval_every_s=0 or eval_vs none).
    evaluate: bool = True
    #: Env keyword arguments: the recipe's, with --env-arg's over them.
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Env wrapper specs (EnvSpec.wrappers): --wrapper's if given, else the recipe's.
    wrappers: tuple[str, ...] = ()


def train_choices(env_name: str, *, learner: str | None = None, learner_for: tuple[str, ...] = (),
                  steps: int | None = None, minutes: float | None = None, self_play: bool | None = None,
                  options: Mapping[str, Any] | None = None,
                  file_options: Mapping[str, Any] | None = None, env_args: Mapping[str, Any] | None = None,
                  wrappers: tuple[str, ...] | None = None, base: Recipe | None = None) -> TrainChoices:
    """`pzasync train`'s options combined with the env's recipe (docs/running.md, "Recipes"): what the options
    leave open comes from `train_recipe(env_name, self_play)`. `options` are the run options given as flags,
    `file_options` those of a --config file (flags win); both parsed, by RunConfig field name. Self-play is the
    recipe's unless --self-play/--independent, a --group flag or --learner-for says otherwise: a file never
    switches it, so that a printed configuration runs again the same way. Raises UserInputError for options
    that cannot go together. `env_args` (--env-arg) go over the recipe's env arguments, `wrappers` (--wrapper)
    replace its wrappers. `base`: the recipe of an env without one in the registry (`recipes.recipe_from_spaces`),
    else DEFAULT_RECIPE. Builds nothing: `RunPlan(env, choices.learners, RunConfig(**choices.config))` checks
    them."""
    given_options = {**(file_options or {}), **(options or {})}
    recipe = train_recipe(env_name, base=base)
    independent = self_play is False
    if steps is None and minutes is None:
        minutes = recipe.minutes
    yardstick = given_options.get("eval_vs") or recipe.vs
    evaluate = given_options.get("eval_every_s") != 0 and given_options.get("eval_vs", "") is not None
    if self_play is None:
        self_play = recipe.self_play and "agent_groups" not in (options or {}) and not learner_for
    recipe = train_recipe(env_name, self_play, base=base)
    # A team recipe's groups stay unless --independent, or --learner-for naming something other than a group.
    team = {} if independent or not set(_names(learner_for)) <= set(recipe.agent_groups) else {
        name: list(patterns) for name, patterns in recipe.agent_groups.items()}
    agent_groups = given_options.get("agent_groups", {"players": ["*"]} if self_play else team)
    if "league" in given_options:
        league = given_options["league"]
    else:
        league = {"*": recipe.league} if recipe.league is not None and recipe.league != "none" else {}
    if learner is None:
        learner = recipe.learner_spec
    learners = learners_from_options(learner, learner_for)
    trainee_weights = given_options.get("league_trainee_weights")
    if trainee_weights is None:
        trainee_weights = dict(recipe.league_trainee_weights) if league else {}
    elif trainee_weights and not league:
        raise UserInputError("--league-trainee weighs the seats of a league; give --league too (or --self-play)")
    shown = (None if not league else league["*"] if list(league) == ["*"] and isinstance(league["*"], str)
             else ", ".join(f"{unit}: {mix}" for unit, mix in league.items()))
    return TrainChoices(learner, learners, shown, yardstick, minutes,
                        {"agent_groups": agent_groups, "league": league, "league_trainee_weights": trainee_weights,
                         "envs_per_actor": given_options.get("envs_per_actor", recipe.envs_per_actor)},
                        evaluate, {**recipe.env_kwargs, **(env_args or {})},
                        recipe.wrappers if wrappers is None else tuple(wrappers))


def _names(learner_for: tuple[str, ...]) -> list[str]:
    """The agents or groups that --learner-for items (AGENT=SPEC) name."""
    return [item.partition("=")[0] for item in learner_for]


def _train(env_id: str, *, config_file: str | None, print_config: bool, learner: str | None,
           learner_for: tuple[str, ...], env_args: tuple[str, ...], wrappers: tuple[str, ...], runner: str,
           steps: int | None,
           minutes: float | None, self_play: bool | None, final_episodes: int | None, flags: dict[str, Any]) -> None:
    from pzasync.config import RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.runtime.rundir import check_out_dir
    from pzasync.runners import AsyncRunner, SequentialRunner

    check_budget_options(steps, minutes)
    if final_episodes is not None and final_episodes < 0:
        raise UserInputError(f"--final-episodes {final_episodes}: must be >= 0")
    every = flags.get("eval_every_s")
    if every is not None and every < 0:
        raise UserInputError(f"--eval-every {every:g}: must be >= 0 seconds (0: no evaluation while training)")
    file_options = RunConfig.toml_values(Path(config_file).read_text(), config_file) if config_file else {}
    given_wrappers = None if not wrappers else () if list(wrappers) == ["none"] else tuple(wrappers)
    given_env_args = parse_options(env_args, "--env-arg")
    base, base_notes = None, []
    if recipe_for(env_id) is None:  # no recipe: one chosen from the env's spaces, said at the start
        from pzasync.learners.space_defaults import recipe_from_spaces

        base, base_notes = recipe_from_spaces(EnvSpec.of(env_id, given_wrappers or (), **given_env_args))
    chosen = train_choices(env_id, learner=learner, learner_for=learner_for, steps=steps, minutes=minutes,
                           self_play=self_play, options=flags, file_options=file_options, env_args=given_env_args,
                           wrappers=given_wrappers, base=base)
    env = EnvSpec.of(env_id, chosen.wrappers, **chosen.env_kwargs)
    if not print_config:
        for note in base_notes:
            console.print(note, highlight=False, soft_wrap=True)
    given_learner, notes = learner, []
    learner, learners, minutes, yardstick = chosen.learner, chosen.learners, chosen.minutes, chosen.yardstick
    if given_learner is None:  # the recipe's learner: where it refuses an agent's spaces, one that fits
        from pzasync.learners.fitting import fit_learners

        learners, notes = fit_learners(env, learners, chosen.config["agent_groups"],
                                       chosen={item.partition("=")[0] for item in learner_for})
        for note in notes:
            console.print(note, highlight=False, soft_wrap=True)
    values = {"out_dir": "runs", "progress": console.is_terminal, **file_options, **flags, **chosen.config,
              "eval_vs": yardstick if chosen.evaluate else None}
    if values.get("eval_every_s") == 0:
        del values["eval_every_s"]
    config = RunConfig(**values)
    if config.backend == "ray" and runner != "async":
        raise UserInputError("--backend ray: only the async runner has learners apart from the actor; drop "
                             "--runner sequential")
    if config.ray_address is not None and config.backend != "ray":
        raise UserInputError("--ray-address needs --backend ray")
    if config.learner_processes is not None and (runner != "async" or config.backend != "shm"):
        raise UserInputError("--learner-processes: learner host processes are the async runner's on shared "
                             "memory; drop it with --runner sequential or --backend ray")
    config.validate()
    if print_config:
        decided_here = {} if "progress" in {**file_options, **flags} else {"progress": "on in a terminal"}
        click.echo(config.to_toml(f"pzasync train {env.name}: every run option, resolved (read it back with "
                                  f"--config FILE).\nTOML has no null: \"none\" stands for None.", decided_here),
                   nl=False)
        return
    cls = AsyncRunner if runner == "async" else SequentialRunner
    if config.out_dir is not None:
        check_out_dir(config.out_dir)
    run = cls(env, learners, config)
    league_config, trainee_weights = config.league, config.league_trainee_weights
    console.print(f"training {env.name} with the {runner} runner: " + ", ".join(
        f"{a}={p.learner_name}" + (f" (group {p.unit})" if p.unit != a else "") for a, p in run.plan.agents.items())
        + (f"; learner {learner}" if not learner_for and not notes else "")
        + (f"; league {chosen.league}" if league_config else "")
        + (" (trainee weights " + ", ".join(f"{k}={v:g}" for k, v in trainee_weights.items()) + ")"
           if trainee_weights else "")
        + (f"; {run.plan.envs_per_actor} env copies" if run.plan.envs_per_actor > 1 else "")
        + (f" per actor, {run.plan.actors} actor processes" if run.plan.actors > 1 else "")
        + (f", {run.plan.config.env_workers} env workers" if run.plan.config.env_workers else "")
        + (f"; env wrappers {' | '.join(env.wrappers)}" if env.wrappers else "")
        + f"; scored against {yardstick}", highlight=False)
    for option, choice in run.plan.auto.items():
        console.print(f"  {option}=auto: {choice}", highlight=False)
    try:
        result = run.run(agent_steps=steps, seconds=minutes * 60 if minutes is not None else None)
    except Exception as exc:
        if run.stop_signal is None:
            raise
        errors.print(f"[bold red]error[/] after {signal_reason(run.stop_signal)}: {exc}", highlight=False,
                     soft_wrap=True)
        sys.exit(signal_exit_code(run.stop_signal))
    if run.stop_signal is not None:
        _print_summary(result, None, yardstick)
        console.print(f"stopped by {signal.Signals(run.stop_signal).name}: no final evaluation"
                      + (f"; score the checkpoints with `pzasync eval {result.run_dir}`" if result.run_dir else ""),
                      highlight=False)
        sys.exit(signal_exit_code(run.stop_signal))
    report = None
    env = run.plan.env_spec  # the env as the run made it (with the global state where a critic reads it)
    learned = any(p.learns for p in run.plan.agents.values())
    if final_episodes is None and result.run_dir and learned:
        final_episodes, note = _affordable_episodes(env, result.run_dir, yardstick, config.eval_scoring,
                                                    result.wall_seconds, seed=config.seed + 777)
        if note:
            console.print(note, highlight=False, soft_wrap=True)
    if final_episodes and result.run_dir and learned:
        report = _final_scores(env, result.run_dir, learners, yardstick, config.eval_scoring, final_episodes,
                               seed=config.seed + 777)
    _print_summary(result, report, yardstick)
    if final_episodes != 0 and result.run_dir and learned:
        _print_exploitability(env.name, result.run_dir, seed=config.seed + 777)
    if final_episodes != 0 and not learned:
        console.print("no agent learns here, so there is no trained policy to score", highlight=False)


#: `pzasync train`'s final evaluation unless --final-episodes says: FINAL_EPISODES games per seat and opponent,
#: or fewer, not below FINAL_EPISODES_FLOOR, where they would take more than FINAL_SHARE of the training time.
FINAL_EPISODES, FINAL_EPISODES_FLOOR, FINAL_SHARE = 400, 40, 0.25


def _affordable_episodes(env: Any, run_dir: str, yardstick: str, scoring: str | None, training_s: float,
                         seed: int) -> tuple[int, str | None]:
    """Games per scored unit for the final evaluation: FINAL_EPISODES, unless a few games against the yardstick
    say that its evaluations (trained, untrained, random) would take more than FINAL_SHARE of `training_s`;
    then as many as fit, at least FINAL_EPISODES_FLOOR. Returns them and a line saying why, if cut."""
    from pzasync.evaluation.episodes import EVAL_COPIES
    from pzasync.evaluation.report import evaluate, evaluations_planned

    probe = EVAL_COPIES  # one round of copies: what a game costs when they play side by side
    start = time.monotonic()
    measured = evaluate(run_dir, env=env, vs=yardstick, episodes=probe, seed=seed, scoring=scoring, baselines=False)
    per_game = (time.monotonic() - start) / probe  # every unit, one opponent
    evaluations = evaluations_planned(measured.scoring, measured.vs)
    full, budget = per_game * evaluations * FINAL_EPISODES, FINAL_SHARE * training_s
    if full <= budget:
        return FINAL_EPISODES, None
    episodes = max(FINAL_EPISODES_FLOOR, int(budget / (per_game * evaluations)))
    return episodes, (f"final evaluation: {episodes} games per seat and opponent ({FINAL_EPISODES} would take "
                      f"about {full:.0f} s, more than a quarter of the {training_s:.0f} s run); "
                      f"--final-episodes N chooses")


def _final_scores(env: Any, run_dir: str, learners: Any, yardstick: str, scoring: str | None, episodes: int,
                  seed: int) -> Any:
    """The final evaluation (`pzasync.evaluate`): the greedy policies in the scoring mode that fits the env,
    beside untrained networks and random play, with a progress bar."""
    from pzasync.evaluation.report import evaluate

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task(f"evaluating: {episodes} games per seat", total=None)
        return evaluate(run_dir, env=env, vs=yardstick, episodes=episodes, seed=seed, scoring=scoring,
                        learners=learners, progress=lambda label: progress.advance(task))


def _print_exploitability(env_name: str, run_dir: str, seed: int) -> None:
    """On leduc, one line of exact exploitability (docs/league.md, "Exploitability") beside the final scores: it
    ranks poker policies where chips won from random players do not. Nothing elsewhere, or where a policy does not
    give its action probabilities (DQN) or a seat does not learn."""
    from pzasync.evaluation.exploitability import applies_to, exploitability

    if not applies_to(env_name):
        return
    try:
        reports = exploitability(run_dir, acting="sampled", seed=seed)
    except (ConfigError, NotImplementedError) as exc:
        console.print(f"exact exploitability not computed: {exc}", highlight=False, soft_wrap=True)
        return
    untrained = reports.get("untrained")
    console.print(f"exact exploitability (sampled; big blinds a hand a best response wins, lower is better): "
                  f"trained {reports['trained'].exploitability:.3f}"
                  + (f", untrained {untrained.exploitability:.3f}" if untrained else "")
                  + f", random play {reports['random'].exploitability:.3f} (`pzasync exploitability {run_dir}`)",
                  highlight=False, soft_wrap=True)


def _print_summary(result: Any, report: Any = None, yardstick: str = "random") -> None:
    """Two narrow tables (they fit 80 columns without cutting names or numbers): training, then scores."""
    console.print(f"[bold]{result.env}[/]: {result.runner} runner, {result.agent_steps:,} agent steps in "
                  f"{result.wall_seconds:.0f}s ({result.actor_steps_per_second:,.0f}/s), {result.episodes:,} "
                  f"episodes; stopped: {result.stopped_because}", highlight=False)
    table = Table(title="training", title_justify="left")
    for column in ("agent", "learner", "updates", "version", "lag mean/p95", "dropped"):
        table.add_column(column, justify="left" if column in ("agent", "learner") else "right",
                         overflow="fold")
    for agent, r in result.agents.items():
        learner = r.learner + (f" ({r.group})" if r.group else "") + (" [red]crashed[/]" if r.error else "")
        table.add_row(agent, learner, f"{r.updates:,}", str(r.published_version),
                      f"{r.policy_lag_mean:.0f}/{r.policy_lag_p95:.0f}", f"{r.transitions_dropped:,}")
    console.print(table)
    if report is not None and report.results:
        console.print(scoring_line(report), highlight=False)
        games = report.episodes
        # Game results (1/0/-1) are scored as wins, draws and losses; other returns by their mean.
        outcomes = all(r.outcomes for r in report.results)
        per = "seat and opponent" if report.scoring == "seats" else f"{'side' if report.scoring == 'sides' else 'team'} and policy"
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


