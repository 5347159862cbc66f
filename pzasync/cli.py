"""The `pzasync` command line: train, eval, bench, rollout, envs, clean, microbench."""

from __future__ import annotations

import signal
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import click
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from pzasync.bench.harness import CONFIGS, SCORES
from pzasync.config import AUTO
from pzasync.errors import UserInputError
from pzasync.recipes import DEFAULT_RECIPE, SELF_PLAY, TRAIN_ENV, recipe_for, train_recipe
from pzasync.specs import parse_key_value, parse_learner_spec
from pzasync.runtime.stop_signals import STOP_SIGNALS, exit_code as signal_exit_code, reason as signal_reason

console = Console()
errors = Console(stderr=True)

#: What a bare `pzasync rollout` plays: the project's own env, whose agents die mid-episode.
DEFAULT_ENV = "pzasync.envs.forage"


class IntOrAuto(click.ParamType):
    """A count, or "auto" (RunConfig's `AUTO`: the plan picks it from the core count)."""

    name = "N|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) or value == AUTO:
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is neither an integer nor 'auto'", param, ctx)


INT_OR_AUTO = IntOrAuto()


class FriendlyGroup(click.Group):
    """Prints user errors as one clear line (no traceback) and exits with status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserInputError as exc:
            errors.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            sys.exit(2)


@click.group(cls=FriendlyGroup)
@click.version_option(package_name="pzasync")
def main() -> None:
    """Asynchronous actor-learner training for any PettingZoo environment."""


@main.command()
@click.argument("env_id", default=DEFAULT_ENV)
@click.option("--steps", default=20_000, show_default=True, help="Agent steps (decisions) to play.")
@click.option("--seed", default=0, show_default=True, help="Seed of the first reset and of the random players.")
@click.option("--max-episode-steps", type=int, default=None, help="Cut episodes after this many decisions.")
def rollout(env_id: str, steps: int, seed: int, max_episode_steps: int | None) -> None:
    """Play ENV_ID with random legal players and summarise the transitions per agent.

    Every episode is checked for reward conservation (docs/transitions.md, invariant 8) as it is played.
    """
    from pzasync.core.collect import run_episodes
    from pzasync.core.environments import make_env
    from pzasync.evaluation.evaluate import random_actor
    from pzasync.core.transitions import EpisodeSummary, LayoutBook

    env = make_env(env_id)
    counts: dict[str, int] = defaultdict(int)
    rewards: dict[str, float] = defaultdict(float)
    terminated: dict[str, int] = defaultdict(int)
    truncated: dict[str, int] = defaultdict(int)
    episodes: list[EpisodeSummary] = []

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(f"rollout {env_id}", total=steps)

        def emit(t: Any) -> None:
            counts[t.agent] += 1
            rewards[t.agent] += t.reward
            terminated[t.agent] += t.terminated
            truncated[t.agent] += t.truncated
            if sum(counts.values()) % 500 == 0:
                progress.update(task, completed=sum(counts.values()))

        start = time.perf_counter()
        act = random_actor(env, seed)
        run_episodes(env, lambda a, o, m: (act(a, o, m), {}), emit,
                     agent_steps=steps, seed=seed, layouts=LayoutBook(env), on_episode=episodes.append,
                     max_episode_steps=max_episode_steps)
        elapsed = time.perf_counter() - start

    table = Table(title=f"{env_id}: {steps:,} agent steps, {len(episodes)} episodes, "
                        f"{steps / elapsed:,.0f} agent-steps/s, rewards conserved in every episode")
    for column in ("agent", "transitions", "terminal", "truncated", "mean episode return", "reward in transitions"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    for agent in sorted(set(counts) | {a for e in episodes for a in e.returns}):
        returns = [e.returns[agent] for e in episodes if agent in e.returns]
        table.add_row(agent, f"{counts[agent]:,}", str(terminated[agent]), str(truncated[agent]),
                      f"{np.mean(returns):.3f}" if returns else "-", f"{rewards[agent]:.3f}")
    console.print(table)


@main.command()
@click.option("--instantiate/--no-instantiate", default=True, show_default=True,
              help="Build each env to report its API and agents (slower).")
@click.option("--all", "show_all", is_flag=True, help="Also list envs that cannot load here, with the reason.")
def envs(instantiate: bool, show_all: bool) -> None:
    """List the PettingZoo and MPE (mpe2) environments importable here, with API, agent count and recipe."""
    import importlib
    import warnings

    from pettingzoo import AECEnv

    from pzasync.core.environments import known_env_ids

    table = Table(title="Environments (use the id with `pzasync rollout` / `make_env`)",
                  caption="recipe: what `pzasync train ENV` trains the env with (docs/running.md, \"Recipes\"); "
                          f"-: none, {DEFAULT_RECIPE.learner!r} for every agent, scored against {DEFAULT_RECIPE.vs}")
    table.add_column("env id", no_wrap=True)
    for column in ("API", "agents", "action spaces", "recipe"):
        table.add_column(column)
    if show_all:
        table.add_column("status")
    unavailable = 0
    ids = known_env_ids()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task("importing envs", total=len(ids))
        for env_id in ids:
            progress.update(task, advance=1, description=f"importing {env_id}")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    module = importlib.import_module(env_id)
                    apis = [name for name in ("env", "parallel_env") if callable(getattr(module, name, None))]
                    if not apis:
                        continue
                    agents, kinds = "-", "-"
                    if instantiate:
                        env = module.env() if "env" in apis else module.parallel_env()
                        kinds = ", ".join(sorted({type(env.action_space(a)).__name__ for a in env.possible_agents}))
                        agents = str(len(env.possible_agents))
                        env.close()
                        if "env" in apis and not isinstance(env, AECEnv):
                            apis = ["parallel_env"]
                row = [env_id, "+".join("AEC" if a == "env" else "par" for a in apis), agents, kinds,
                       recipe_column(env_id)]
                table.add_row(*row, *(["[green]ok[/]"] if show_all else []))
            except Exception as exc:  # noqa: BLE001 - an env that cannot load is reported, not fatal
                unavailable += 1
                if show_all:
                    table.add_row(env_id, "-", "-", "-", recipe_column(env_id),
                                  f"[red]unavailable[/]: {type(exc).__name__}: {exc}")
    console.print(table)
    if unavailable and not show_all:
        console.print(f"{unavailable} more env module(s) cannot load here (missing dependencies); see --all.",
                      soft_wrap=True)


def recipe_column(env_id: str) -> str:
    """`pzasync envs`'s recipe cell: the learner spec of the env's recipe (self-play marked), "-" without one."""
    recipe = recipe_for(env_id)
    if recipe is None:
        return "-"
    return recipe.learner_spec + (" (self-play)" if recipe.self_play else "")


def learners_from_options(learner: str, learner_for: tuple[str, ...]) -> Any:
    """--learner SPEC and repeated --learner-for AGENT=SPEC -> a learner spec for the runners."""
    learners: Any = parse_learner_spec(learner)
    if learner_for:
        per_agent: dict[str, Any] = {"*": learners}
        for item in learner_for:
            agent, sep, spec = item.partition("=")
            if not sep:
                raise UserInputError(f"--learner-for {item!r}: expected AGENT=SPEC")
            per_agent[agent] = parse_learner_spec(spec)
        learners = per_agent
    return learners


def parse_options(items: tuple[str, ...], flag: str) -> dict[str, Any]:
    """Repeated `flag KEY=VALUE` (--env-arg, --option) -> keyword arguments, values read as Python literals."""
    return dict(parse_key_value(item, f"{flag} {item!r}: expected KEY=VALUE") for item in items)


def parse_groups(items: tuple[str, ...]) -> dict[str, list[str]]:
    """Repeated `--group NAME=PATTERN[,PATTERN...]` -> RunConfig.agent_groups (patterns as fnmatch, e.g. piston_*)."""
    groups: dict[str, list[str]] = {}
    for item in items:
        name, sep, patterns = item.partition("=")
        name, members = name.strip(), [p.strip() for p in patterns.split(",") if p.strip()]
        if not sep or not name or not members:
            raise UserInputError(f"--group {item!r}: expected NAME=PATTERN[,PATTERN...], e.g. pistons=piston_*")
        if name in groups:
            raise UserInputError(f"--group {name!r} is given twice")
        groups[name] = members
    return groups


def check_budget_options(steps: int | None, minutes: float | None) -> None:
    """--steps and --minutes must be budgets a run can meet: refused (one line) before anything starts."""
    if steps is not None and steps < 1:
        raise UserInputError(f"--steps {steps}: must be >= 1 agent steps")
    if minutes is not None and not minutes > 0:
        raise UserInputError(f"--minutes {minutes:g}: must be > 0")


@main.command()
@click.argument("env_id", default=TRAIN_ENV)
@click.option("--learner", "learner", default=None,
              help="Learner for every agent: NAME[,KEY=VALUE...], e.g. 'ppo,lr=3e-4' or 'mypkg.mod:MyLearner'. "
                   "Default: the env's recipe's (`pzasync envs`, docs/running.md \"Recipes\"): "
                   f"{SELF_PLAY.learner!r} in self-play (see --self-play), with ',mirror=True' on connect_four; "
                   f"{DEFAULT_RECIPE.learner!r} otherwise.")
@click.option("--learner-for", "learner_for", multiple=True, metavar="AGENT=SPEC",
              help="Learner for one agent, overriding --learner (repeatable).")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env keyword argument, e.g. N=4.")
@click.option("--group", "groups", multiple=True, metavar="NAME=PATTERN[,PATTERN]",
              help="Agent group sharing one learner, e.g. pistons=piston_* (repeatable; see RunConfig.agent_groups).")
@click.option("--runner", type=click.Choice(["async", "sequential"]), default="async", show_default=True)
@click.option("--publish", type=click.Choice(["double_buffer", "snapshot"]), default="double_buffer",
              show_default=True, help="How learners publish parameters to the actor.")
@click.option("--steps", type=int, default=None, help="Agent steps (decisions) to train for.")
@click.option("--minutes", type=float, default=None,
              help="Wall-clock minutes to train for (default: the env's recipe's, "
                   f"{DEFAULT_RECIPE.minutes:g} where it has none, if no --steps).")
@click.option("--replay-ratio", type=float, default=None, help="Updates per agent step (default: async runs free).")
@click.option("--device", default="cpu", show_default=True, help="Learner device: cpu, cuda, cuda:N.")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", "out_dir", default="runs", show_default=True, help="Parent folder of the run directory.")
@click.option("--self-play/--independent", "self_play", default=None,
              help="Seats share one learner (an agent group) and train in a league against their latest and past "
                   "selves. Default: on where the env's recipe says so (connect_four, tictactoe) when no "
                   "--group or --learner-for is given.")
@click.option("--league", "league", default=None, metavar="MIX",
              help=f"Opponent mix of every learning agent or group, drawn per episode: KIND=WEIGHT joined by ';', "
                   f"kinds 'latest', 'snapshot' or a player such as 'negamax,depth=2' (docs/league.md). 'none' for "
                   f"no league. Self-play default: {SELF_PLAY.league!r}.")
@click.option("--league-trainee", "league_trainee", multiple=True, metavar="SEAT=WEIGHT",
              help="How often SEAT is the one that trains in a league game against a snapshot or player, "
                   "relative to the unit's other seats (1 each unless given; repeatable). Self-play default: "
                   "player_1=4 on connect_four, uniform elsewhere.")
@click.option("--vs", "versus", default=None, metavar="PLAYER",
              help="Yardstick to score against while training and at the end: random, one_ply, negamax,depth=N, "
                   "perfect, module:callable or a RUN_DIR. Default: the env's recipe's, one_ply (connect_four), "
                   "perfect (tictactoe), random elsewhere.")
@click.option("--eval-every", "eval_every", type=float, default=30.0, show_default=True,
              help="Seconds between evaluations while training, in a separate low-priority process (0: none).")
@click.option("--eval-episodes", default=400, show_default=True,
              help="Games per seat at the end against the yardstick and random, and for the untrained baseline "
                   "(0 to skip).")
@click.option("--backend", type=click.Choice(["shm", "ray"]), default="shm", show_default=True,
              help="Where the async runner's learners run: local processes on shared memory, or Ray actors "
                   "(pip install 'pzasync[ray]'; docs/distributed.md).")
@click.option("--ray-address", "ray_address", default=None, metavar="ADDRESS",
              help="With --backend ray: the cluster to join ('auto', 'HOST:6379'); default: a local Ray instance.")
@click.option("--envs-per-actor", "envs_per_actor", type=INT_OR_AUTO, default=None, metavar="N|auto",
              help="Env copies the actor steps side by side, with one batched forward per agent "
                   f"[default: {SELF_PLAY.envs_per_actor} in self-play, {DEFAULT_RECIPE.envs_per_actor} otherwise].")
@click.option("--env-workers", "env_workers", type=INT_OR_AUTO, default=0, show_default=True, metavar="N|auto",
              help="Processes that step the env copies while the actor runs inference (0: the actor steps them; "
                   "auto: the cores left, for an env whose step is slow enough to pay).")
@click.option("--actors", type=INT_OR_AUTO, default=1, show_default=True, metavar="N|auto",
              help="Actor processes, each with --envs-per-actor env copies and its own buffer shards (async runner "
                   "on shared memory; the sequential runner steps as many copies in one actor; auto: one per "
                   "core not taken by learners and the evaluator).")
@click.option("--actor-device", "actor_device", default="cpu", show_default=True,
              help="Where the actor's batched forwards run: cpu, cuda, cuda:N.")
@click.option("--learner-processes", "learner_processes", type=int, default=None,
              help="Processes that host the async runner's learners, each updating several in turn "
                   "[default: one per core beyond the actor's, at most one per learning agent or group].")
def train(env_id: str, learner: str, learner_for: tuple[str, ...], env_args: tuple[str, ...],
          groups: tuple[str, ...], runner: str, publish: str, steps: int | None,
          minutes: float | None, replay_ratio: float | None, device: str, seed: int, out_dir: str,
          self_play: bool | None, league: str | None, league_trainee: tuple[str, ...], versus: str | None,
          eval_every: float,
          eval_episodes: int, backend: str, ray_address: str | None, envs_per_actor: int | str | None,
          env_workers: int | str, actors: int | str, actor_device: str, learner_processes: int | None) -> None:
    """Train every agent of ENV_ID (default: connect_four, both seats sharing one DQN in a self-play league).

    Scores the greedy policies against a yardstick player while training (eval.png) and at the end, beside an
    untrained network of the same shape and random play. SIGTERM or Ctrl-C stops the run gracefully (final
    checkpoints kept, no final evaluation) and exits with 128 + the signal's number (docs/reliability.md).
    """
    with _exit_on_stop_signals():
        _train(env_id, learner, learner_for, env_args, groups, runner, publish, steps, minutes, replay_ratio,
               device, seed, out_dir, self_play, league, league_trainee, versus, eval_every, eval_episodes,
               backend, ray_address, envs_per_actor, env_workers, actors, actor_device, learner_processes)


class _StoppedBySignal(BaseException):
    """SIGTERM or SIGINT outside a run (building it, the final evaluation): leave at once."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _exit_on_stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the command with 128 + the signal's number wherever no run is in progress (a run
    installs its own handlers for its whole length: runners.py). Nothing is held outside a run."""
    def stop(signum: int, frame: Any) -> None:
        raise _StoppedBySignal(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    except _StoppedBySignal as stopped:
        errors.print(f"stopped by {signal.Signals(stopped.signum).name}", highlight=False)
        sys.exit(signal_exit_code(stopped.signum))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class TrainChoices:
    """What `pzasync train ENV` runs once its options and the env's recipe are combined (`train_choices`)."""

    #: The --learner spec, the recipe's where none was given; `learners` adds --learner-for, parsed.
    learner: str
    learners: Any
    #: The --league mix ("none" or None: no league), the recipe's where none was given.
    league: str | None
    #: The player scored against: --vs, else the recipe's.
    yardstick: str
    #: Wall-clock minutes: --minutes, the recipe's if neither --steps nor --minutes was given, else None.
    minutes: float | None
    #: The RunConfig options chosen here: agent_groups, league, league_trainee_weights, envs_per_actor.
    config: dict[str, Any]


def train_choices(env_name: str, *, learner: str | None = None, learner_for: tuple[str, ...] = (),
                  groups: tuple[str, ...] = (), steps: int | None = None, minutes: float | None = None,
                  self_play: bool | None = None, league: str | None = None, league_trainee: tuple[str, ...] = (),
                  versus: str | None = None, envs_per_actor: int | str | None = None) -> TrainChoices:
    """`pzasync train`'s options combined with the env's recipe (docs/running.md, "Recipes"): what the options
    leave open comes from `train_recipe(env_name, self_play)`. Raises UserInputError for options that cannot
    go together. Builds nothing: `RunPlan(env, choices.learners, RunConfig(**choices.config))` checks them."""
    recipe = train_recipe(env_name)
    if steps is None and minutes is None:
        minutes = recipe.minutes
    agent_groups = parse_groups(groups)
    yardstick = versus or recipe.vs
    if self_play is None:
        self_play = recipe.self_play and not groups and not learner_for
    recipe = train_recipe(env_name, self_play)
    if self_play:
        agent_groups = {"players": ["*"]}
    if league is None:
        league = recipe.league
    if learner is None:
        learner = recipe.learner_spec
    if envs_per_actor is None:
        envs_per_actor = recipe.envs_per_actor
    learners = learners_from_options(learner, learner_for)
    league_config = {"*": league} if league is not None and league != "none" else {}
    trainee_weights = parse_options(league_trainee, "--league-trainee")
    if not trainee_weights and league_config:
        trainee_weights = dict(recipe.league_trainee_weights)
    if trainee_weights and not league_config:
        raise UserInputError("--league-trainee weighs the seats of a league; give --league too (or --self-play)")
    return TrainChoices(learner, learners, league, yardstick, minutes,
                        {"agent_groups": agent_groups, "league": league_config,
                         "league_trainee_weights": trainee_weights, "envs_per_actor": envs_per_actor})


def _train(env_id: str, learner: str, learner_for: tuple[str, ...], env_args: tuple[str, ...],
           groups: tuple[str, ...], runner: str, publish: str, steps: int | None,
           minutes: float | None, replay_ratio: float | None, device: str, seed: int, out_dir: str,
           self_play: bool | None, league: str | None, league_trainee: tuple[str, ...], versus: str | None,
           eval_every: float, eval_episodes: int, backend: str, ray_address: str | None,
           envs_per_actor: int | str | None, env_workers: int | str, actors: int | str, actor_device: str,
           learner_processes: int | None) -> None:
    from pzasync.config import RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.runtime.rundir import check_out_dir
    from pzasync.runners import AsyncRunner, SequentialRunner

    check_budget_options(steps, minutes)
    if backend == "ray" and runner != "async":
        raise UserInputError("--backend ray: only the async runner has learners apart from the actor; drop "
                             "--runner sequential")
    if ray_address is not None and backend != "ray":
        raise UserInputError("--ray-address needs --backend ray")
    if learner_processes is not None and (runner != "async" or backend != "shm"):
        raise UserInputError("--learner-processes: learner host processes are the async runner's on shared "
                             "memory; drop it with --runner sequential or --backend ray")
    env = EnvSpec.of(env_id, **parse_options(env_args, "--env-arg"))
    if eval_every < 0:
        raise UserInputError(f"--eval-every {eval_every:g}: must be >= 0 seconds (0: no evaluation while training)")
    if eval_episodes < 0:
        raise UserInputError(f"--eval-episodes {eval_episodes}: must be >= 0")
    chosen = train_choices(env.name, learner=learner, learner_for=learner_for, groups=groups, steps=steps,
                           minutes=minutes, self_play=self_play, league=league, league_trainee=league_trainee,
                           versus=versus, envs_per_actor=envs_per_actor)
    learner, learners, minutes, yardstick = chosen.learner, chosen.learners, chosen.minutes, chosen.yardstick
    league_config, trainee_weights = chosen.config["league"], chosen.config["league_trainee_weights"]
    config = RunConfig(seed=seed, publish_mode=publish, replay_ratio=replay_ratio, device=device, out_dir=out_dir,
                       progress=console.is_terminal, **chosen.config,
                       eval_vs=yardstick if eval_every > 0 else None, eval_every_s=eval_every or 30.0,
                       backend=backend, ray_address=ray_address,
                       env_workers=env_workers, actors=actors, actor_device=actor_device,
                       learner_processes=learner_processes)
    cls = AsyncRunner if runner == "async" else SequentialRunner
    check_out_dir(out_dir)
    run = cls(env, learners, config)
    console.print(f"training {env.name} with the {runner} runner: " + ", ".join(
        f"{a}={p.learner_name}" + (f" (group {p.unit})" if p.unit != a else "") for a, p in run.plan.agents.items())
        + (f"; learner {learner}" if not learner_for else "")
        + (f"; league {chosen.league}" if league_config else "")
        + (" (trainee weights " + ", ".join(f"{k}={v:g}" for k, v in trainee_weights.items()) + ")"
           if trainee_weights else "")
        + (f"; {run.plan.envs_per_actor} env copies" if run.plan.envs_per_actor > 1 else "")
        + (f" per actor, {run.plan.actors} actor processes" if run.plan.actors > 1 else "")
        + (f", {run.plan.config.env_workers} env workers" if run.plan.config.env_workers else "")
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
        _print_summary(result, {}, yardstick)
        console.print(f"stopped by {signal.Signals(run.stop_signal).name}: no final evaluation"
                      + (f"; score the checkpoints with `pzasync eval {result.run_dir}`" if result.run_dir else ""),
                      highlight=False)
        sys.exit(signal_exit_code(run.stop_signal))
    scores: dict[str, dict[str, Any]] = {}
    learned = any(p.learns for p in run.plan.agents.values())
    if eval_episodes > 0 and result.run_dir and learned:
        scores = _final_scores(env, result.run_dir, learners, yardstick, eval_episodes, seed + 777)
    _print_summary(result, scores, yardstick)
    if eval_episodes > 0 and not learned:
        console.print("no agent learns here, so there is no trained policy to score", highlight=False)


def _final_scores(env: Any, run_dir: str, learners: Any, yardstick: str, episodes: int,
                  seed: int) -> dict[str, dict[str, Any]]:
    """Each seat's greedy policy against the yardstick and random, and an untrained network's against the
    yardstick: {"vs": {agent: EvalResult}, "random": {...}, "untrained": {...}}."""
    from pzasync.evaluation.evaluate import evaluate_against, load_run_policies, untrained_baseline

    policies = load_run_policies(run_dir)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task(f"evaluating: {episodes} games per seat", total=3)
        scores = {"vs": {r.agent: r for r in evaluate_against(env, policies, yardstick, episodes, seed)}}
        progress.advance(task)
        scores["untrained"] = {r.agent: r for r in untrained_baseline(env, learners, yardstick, episodes, seed)}
        progress.advance(task)
        if yardstick != "random":
            scores["random"] = {r.agent: r for r in evaluate_against(env, policies, "random", episodes, seed)}
        progress.advance(task)
    return scores


def _print_summary(result: Any, scores: dict[str, dict[str, Any]], yardstick: str = "random") -> None:
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
    if scores:
        games = next(iter(scores["vs"].values())).episodes if scores.get("vs") else 0
        # Game results (1/0/-1) are scored as wins, draws and losses; other returns by their mean.
        outcomes = all(r.outcomes for by_agent in scores.values() for r in by_agent.values())
        table = Table(title=f"greedy play, {games} {'games' if outcomes else 'episodes'} per seat and opponent",
                      title_justify="left")
        scored = ("win [95% CI]", "draw", "loss") if outcomes else ("mean return [95% CI]",)
        for column in ("agent", "policy", "against", *scored):
            table.add_column(column, justify="left" if column in ("agent", "policy", "against") else "right",
                             overflow="fold")
        for agent in scores["vs"]:
            for policy, key, against in (("trained", "vs", yardstick), ("untrained", "untrained", yardstick),
                                         ("trained", "random", "random")):
                r = scores.get(key, {}).get(agent)
                if r is None:
                    continue
                if outcomes:
                    lo, hi = r.win_rate_ci95
                    table.add_row(agent, policy, against, f"{r.win_rate:.1%} [{lo:.0%}-{hi:.0%}]",
                                  f"{r.draws / r.episodes:.1%}", f"{(r.episodes - r.wins - r.draws) / r.episodes:.1%}")
                else:
                    table.add_row(agent, policy, against, f"{r.mean:.4g} ± {r.mean_ci95:.2g}")
            table.add_section()
        console.print(table)
    if result.run_dir:
        console.print(f"run directory: {result.run_dir} (eval.png, returns.png, metrics.jsonl, checkpoints/)",
                      highlight=False, overflow="fold")


VS_FORMS = "random, one_ply, negamax[,depth=N], perfect (tictactoe), another RUN_DIR, or module:callable"


def parse_versus(versus: str) -> Any:
    """`--vs`: an existing directory is a run directory (its policies); anything else a never-learning player."""
    import difflib
    import os

    from pzasync.evaluation.evaluate import load_run_policies
    from pzasync.learners import known_learner_names

    if os.path.isdir(versus):
        return load_run_policies(versus)
    name = versus.split(",")[0].strip()
    if name not in known_learner_names() and ":" not in name and "." not in name:
        close = difflib.get_close_matches(name, known_learner_names(), n=2)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UserInputError(f"--vs {versus!r} is neither a run directory nor a known player; "
                             f"accepted: {VS_FORMS}{hint}")
    return versus


@main.command(name="eval")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--vs", "versus", default="random", show_default=True, help=f"The yardstick: {VS_FORMS}.")
@click.option("--episodes", default=500, show_default=True)
@click.option("--seed", default=12345, show_default=True)
def evaluate_cmd(run_dir: str, versus: str, episodes: int, seed: int) -> None:
    """Play each trained agent of RUN_DIR (greedy) against a yardstick: random or scripted players, or another
    run's agents."""
    from pzasync.core.environments import EnvSpec
    from pzasync.evaluation.evaluate import evaluate_against, load_run_policies
    from pzasync.runtime.rundir import RunDirectory

    info = RunDirectory(run_dir, create=False).read_json("run.json")
    policies = load_run_policies(run_dir)
    opponents = parse_versus(versus)
    env = EnvSpec.of(info["env"], **info.get("env_kwargs", {}))
    results = evaluate_against(env, policies, opponents, episodes, seed, opponent_name=versus)
    table = Table(title=f"{info['env']}: {run_dir} vs {versus}, {episodes} episodes per agent")
    for column in ("agent", "mean return [95% CI]", "win rate [95% CI]", "wins/draws/losses"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    for r in results:
        lo, hi = r.win_rate_ci95
        table.add_row(r.agent, f"{r.mean:+.3f} ± {r.mean_ci95:.3f}", f"{r.win_rate:.1%} [{lo:.1%}, {hi:.1%}]",
                      f"{r.wins}/{r.draws}/{r.episodes - r.wins - r.draws}")
    console.print(table)


@main.command()
@click.argument("env_id", default=TRAIN_ENV)
@click.option("--learner", "learner", default="dqn", show_default=True, help="Learner for every agent (as in train).")
@click.option("--learner-for", "learner_for", multiple=True, metavar="AGENT=SPEC",
              help="Learner for one agent, e.g. player_1=random (repeatable).")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env keyword argument, e.g. N=4.")
@click.option("--group", "groups", multiple=True, metavar="NAME=PATTERN[,PATTERN]",
              help="Agent group sharing one learner in every trial, e.g. pistons=piston_* (repeatable).")
@click.option("--steps", default=30_000, show_default=True, help="Agent steps per trial.")
@click.option("--replay-ratio", default=0.25, show_default=True,
              help="Updates per agent step, the same in sequential and same-algorithm async trials.")
@click.option("--seeds", default=5, show_default=True, help="Seeds per configuration.")
@click.option("--configs", default=",".join(CONFIGS), show_default=True, help="Comma-separated configurations.")
@click.option("--envs-per-actor", "envs_per_actor", default="1", show_default=True, metavar="N[,N...]",
              help="Env copies per actor; every runner configuration runs at each N (e.g. 1,4,16).")
@click.option("--env-workers", "env_workers", default="0", show_default=True, metavar="W[,W...]",
              help="Env worker processes; every runner configuration runs at each W <= N (e.g. 0,2).")
@click.option("--actors", "actors", default="1", show_default=True, metavar="M[,M...]",
              help="Actor processes; every runner configuration runs at each M (sequential: M x N copies in one actor).")
@click.option("--target", type=float, default=None,
              help="Score to reach (e.g. 0.95): adds learning curves and time to target.")
@click.option("--target-window", type=int, default=3, show_default=True,
              help="Reached where the mean of this many consecutive evaluations first reaches the target.")
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Run nothing: show (and with --target, re-score) a report written by --json.")
@click.option("--score", type=click.Choice(list(SCORES)), default="win_rate", show_default=True,
              help="Evaluation score against the yardstick (--vs).")
@click.option("--vs", "versus", default=None, metavar="PLAYER",
              help="Yardstick the snapshots are scored against: default the env's recipe's, one_ply "
                   "(connect_four), perfect (tictactoe), random elsewhere; or random, negamax,depth=N, "
                   "module:callable.")
@click.option("--eval-every", type=int, default=None, help="Agent steps between policy snapshots [steps/20].")
@click.option("--eval-episodes", default=100, show_default=True, help="Games per snapshot evaluation.")
@click.option("--cores", type=int, default=None, help="Pin each trial and its learners to the first N cores.")
@click.option("--option", "run_options", multiple=True, metavar="KEY=VALUE",
              help="Extra RunConfig option for every runner trial, e.g. publish_every=20.")
@click.option("--learner-processes", "learner_processes", type=int, default=None,
              help="Learner host processes of the async trials [default: one per core beyond the actor's, at most one per learner].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write the PNG here.")
def bench(env_id: str, learner: str, learner_for: tuple[str, ...], env_args: tuple[str, ...], groups: tuple[str, ...],
          steps: int,
          replay_ratio: float, seeds: int, configs: str, target: float | None, target_window: int,
          from_json: str | None, score: str, versus: str | None, eval_every: int | None, eval_episodes: int,
          cores: int | None, run_options: tuple[str, ...], json_path: str | None, plot_path: str | None,
          envs_per_actor: str, env_workers: str, actors: str, learner_processes: int | None) -> None:
    """Compare AsyncRunner with SequentialRunner and the bare loops on ENV_ID, same seeds and algorithm."""
    import json

    from rich.progress import TimeElapsedColumn

    from pzasync.bench.harness import BenchSettings, plan_trials, rescore, run_bench
    from pzasync.bench.report import describe

    if from_json is not None:
        with open(from_json) as f:
            report = json.load(f)
        if target is not None or report["settings"].get("target") is not None:
            report = rescore(report, target, target_window)
        _show_bench(report, json_path, plot_path)
        return
    settings = BenchSettings(
        env=env_id, env_kwargs=parse_options(env_args, "--env-arg"), learners=learners_from_options(learner, learner_for),
        agent_steps=steps, replay_ratio=replay_ratio, seeds=seeds,
        configs=tuple(c.strip() for c in configs.split(",") if c.strip()), target=target,
        target_window=target_window, score=score, versus=versus,
        eval_every=eval_every, eval_episodes=eval_episodes, cores=cores,
        envs_per_actor=_int_list(envs_per_actor, "--envs-per-actor"),
        env_workers=_int_list(env_workers, "--env-workers"), actors=_int_list(actors, "--actors"),
        run_options={**parse_options(run_options, "--option"),
                     **({"agent_groups": parse_groups(groups)} if groups else {}),
                     **({"learner_processes": learner_processes} if learner_processes is not None else {})},
    ).validate()
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


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint=option) from None


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


@main.command()
def clean() -> None:
    """Remove shared-memory segments left by pzasync runs whose process is gone."""
    from pzasync.transport.shm import clean_stale, list_segments

    removed = clean_stale()
    for seg in removed:
        console.print(f"removed {seg.name} ({seg.size:,} bytes) of run {seg.run_id}, owner pid {seg.owner_pid} is gone",
                      soft_wrap=True)
    live = list_segments()
    console.print(f"{len(removed)} stale segment(s) removed; {len(live)} segment(s) of live runs left alone.",
                  soft_wrap=True)


@main.command()
@click.option("--floats", default=1_000_000, show_default=True, help="Parameter-vector size for publish/read.")
def microbench(floats: int) -> None:
    """Time the shared-memory primitives: buffer writes, version checks, publish/read against memcpy."""
    from pzasync.bench.microbench import format_seconds, run

    results = run(floats)
    memcpy = next(m.seconds for m in results if "memcpy" in m.name)
    table = Table(title="pzasync shared-memory primitives (median of 7 repeats)")
    for column in ("operation", "time per call", "vs memcpy", "target"):
        table.add_column(column)
    for m in results:
        ratio = f"{m.seconds / memcpy:.2f}x" if "floats (" in m.name else ""
        table.add_row(m.name, format_seconds(m.seconds), ratio, m.target)
    console.print(table)


if __name__ == "__main__":
    main()
