"""The `pzasync` command line: train, eval, export, bench, suite, rollout, envs, clean, microbench, serve.

- `train` (cli/train.py) and `bench` (cli/bench.py): options generated from RunConfig's and BenchSettings'
  declarations by cli/options.py;
- `suite` (cli/suite.py): the learning suite;
- `export` (cli/export.py): a run's policies as files that act with torch alone;
- the other commands here.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from typing import Any

import click
import numpy as np
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from pzasync.cli.bench import bench
from pzasync.cli.common import console, errors, scoring_line
from pzasync.cli.export import export_cmd
from pzasync.cli.suite import suite
from pzasync.cli.sweep import sweep
from pzasync.cli.train import train
from pzasync.config import SCORING_MODES
from pzasync.core.environments import ENV_APIS
from pzasync.errors import UserInputError
from pzasync.evaluation.episodes import ACTING_MODES, EVAL_COPIES
from pzasync.extras import require
from pzasync.recipes import DEFAULT_RECIPE, env_api_for, recipe_for
from pzasync.training import train_choices

__all__ = ["main", "train_choices"]

#: What a bare `pzasync rollout` plays: the project's own env, whose agents die mid-episode.
DEFAULT_ENV = "pzasync.envs.forage"


class FriendlyGroup(click.Group):
    """Prints user errors as one clear line (no traceback) and exits with status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserInputError as exc:
            errors.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            sys.exit(2)


@click.group(cls=FriendlyGroup)
@click.version_option(package_name="pzasync")
def main() -> None:
    """Asynchronous actor-learner training for any PettingZoo environment."""


main.add_command(train)
main.add_command(bench)
main.add_command(suite)
main.add_command(sweep)
main.add_command(export_cmd)


def parse_players(items: tuple[str, ...]) -> dict[str, str]:
    """Repeated `--player AGENT=SPEC` (AGENT `*`: every agent not named) -> {agent: spec}."""
    players: dict[str, str] = {}
    for item in items:
        agent, sep, spec = item.partition("=")
        agent, spec = agent.strip(), spec.strip()
        if not sep or not agent or not spec:
            raise UserInputError(f"--player {item!r}: expected AGENT=SPEC, e.g. player_1=one_ply or "
                                 f"'*=negamax,depth=2'")
        if agent in players:
            raise UserInputError(f"--player {agent!r} is given twice")
        players[agent] = spec
    return players


@main.command()
@click.argument("env_id", default=DEFAULT_ENV)
@click.option("--steps", default=20_000, show_default=True, help="Agent steps (decisions) to play.")
@click.option("--seed", default=0, show_default=True, help="Seed of the first reset and of the players.")
@click.option("--max-episode-steps", type=int, default=None, help="Cut episodes after this many decisions.")
@click.option("--player", "players", multiple=True, metavar="AGENT=SPEC",
              help="Who plays AGENT (repeatable; AGENT '*' for every agent not named): random (the default), a "
                   "scripted player (one_ply, negamax,depth=N, perfect), fixed,checkpoint=FILE, module:callable, or "
                   "a RUN_DIR (that run's greedy policy of the agent).")
@click.option("--record", "record_path", default=None, metavar="PATH",
              help="Write every agent's transitions to PATH, a new directory, as a dataset that `pzasync train "
                   "--dataset PATH` loads (docs/running.md, \"Recorded data\").")
def rollout(env_id: str, steps: int, seed: int, max_episode_steps: int | None, players: tuple[str, ...],
            record_path: str | None) -> None:
    """Play ENV_ID (random legal players, or those of --player) and summarise the transitions per agent; with
    --record, write them as a dataset.

    Every episode is checked for reward conservation (docs/transitions.md, invariant 8) as it is played.
    """
    if steps < 1:
        raise UserInputError(f"--steps {steps}: must be >= 1 agent steps")
    chosen = parse_players(players)
    if record_path is not None or chosen:
        require("torch", "pzasync rollout --record/--player")
        _record(env_id, steps, seed, max_episode_steps, chosen, record_path)
        return
    from pzasync.core.collect import run_episodes
    from pzasync.core.environments import make_env
    from pzasync.core.transitions import EpisodeSummary, LayoutBook
    from pzasync.evaluation.evaluate import random_actor

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
        try:
            run_episodes(env, lambda a, o, m: (act(a, o, m), {}), emit,
                         agent_steps=steps, seed=seed, layouts=LayoutBook(env), on_episode=episodes.append,
                         max_episode_steps=max_episode_steps)
        finally:
            env.close()  # a remote env id's connection, and the server a cmd: id launched
        elapsed = time.perf_counter() - start

    table = Table(title=f"{env_id}: {steps:,} agent steps, {len(episodes)} episodes, "
                        f"{steps / elapsed:,.0f} agent-steps/s, rewards conserved in every episode")
    for column in ("agent", "transitions", "terminal", "truncated", "mean episode return", "reward in transitions"):
        table.add_column(column, justify="left" if column == "agent" else "right", overflow="fold")
    for agent in sorted(set(counts) | {a for e in episodes for a in e.returns}):
        returns = [e.returns[agent] for e in episodes if agent in e.returns]
        table.add_row(agent, f"{counts[agent]:,}", str(terminated[agent]), str(truncated[agent]),
                      f"{np.mean(returns):.3f}" if returns else "-", f"{rewards[agent]:.3f}")
    console.print(table)


def _record(env_id: str, steps: int, seed: int, max_episode_steps: int | None, players: dict[str, str],
            path: str | None) -> None:
    """`pzasync rollout` with players (`--player`), recorded as a dataset at `path` (`--record`), or played into a
    temporary directory that is removed afterwards when only players are given."""
    import shutil
    import tempfile

    from pzasync.evaluation.record import record

    scratch = tempfile.mkdtemp(prefix="pzasync-rollout-") if path is None else None
    target = path if path is not None else os.path.join(str(scratch), "dataset")
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task(f"rollout {env_id}", total=steps)
            start = time.perf_counter()
            dataset = record(env_id, target, players, agent_steps=steps, seed=seed, max_episode_steps=max_episode_steps,
                             on_steps=lambda n: progress.update(task, completed=n))
            elapsed = time.perf_counter() - start
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    info = dataset.info
    title = (f"{env_id}: {info['agent_steps']:,} agent steps, {info['episodes']} episodes, "
             f"{info['agent_steps'] / elapsed:,.0f} agent-steps/s, rewards conserved in every episode"
             + (f"; recorded in {path}" if path is not None else ""))
    table = Table(title=title)
    for column in ("agent", "player", "transitions", "terminal", "truncated", "mean episode return"):
        table.add_column(column, justify="left" if column in ("agent", "player") else "right", overflow="fold")
    for agent, row in info["summary"].items():
        mean = row["mean_return"]
        table.add_row(agent, escape(row["player"]), f"{row['rows']:,}", str(row["terminated"]), str(row["truncated"]),
                      "-" if mean is None else f"{mean:.3f}")
    console.print(table)


@main.command()
@click.argument("env_id")
@click.option("--socket", "socket_path", default=None, help="Serve on this Unix socket path.")
@click.option("--address", default=None, help="Serve at unix:///path or tcp://host:port (port 0: any free port).")
@click.option("--instances", default=16, show_default=True, help="Env instances each connection may use.")
@click.option("--workers", default=0, show_default=True,
              help="Step each instance on one of this many threads and answer instances as they finish (a paced "
                   "server: docs/remote.md); 0 answers each request whole.")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env keyword argument, e.g. N=4.")
@click.option("--env-api", type=click.Choice(["auto", "aec"]), default="auto", show_default=True,
              help="auto: offer the env's parallel API too where it has one (docs/remote.md, \"The parallel API\"); "
                   "aec: the AEC protocol only.")
def serve(env_id: str, socket_path: str | None, address: str | None, instances: int, workers: int,
          env_args: tuple[str, ...], env_api: str) -> None:
    """Serve ENV_ID over the remote env protocol (docs/remote.md) until SIGTERM or Ctrl-C; train on it with
    the env id unix:///path (or tcp://host:port), or let pzasync launch it:
    "cmd:pzasync serve ENV --socket {socket}"."""
    from pzasync.cli.common import parse_options
    from pzasync.core.environments import EnvSpec, choose_env_api
    from pzasync.remote import serve as serve_env

    if (socket_path is None) == (address is None):
        raise UserInputError("pzasync serve: give exactly one of --socket PATH and --address ADDRESS")
    spec = EnvSpec.of(env_id, **parse_options(env_args, "--env-arg"))
    if workers < 0:
        raise UserInputError(f"pzasync serve: --workers must be >= 0, got {workers}")
    parallel = env_api == "auto" and choose_env_api(spec, declared=env_api_for(spec.base_name))[0] == "parallel"
    serve_env(spec.make, address or f"unix://{socket_path}", instances, name=spec.name, workers=workers,
              parallel_fn=spec.make_parallel if parallel else None)


@main.command()
@click.argument("name", required=False)
def learners(name: str | None) -> None:
    """List the built-in learners, or NAME's options (a built-in name or 'module:Class'): each with its default,
    what it accepts and what it does, as `--learner NAME,KEY=VALUE` and a --config file's [learners] tables
    take them."""
    from pzasync.errors import ConfigError
    from pzasync.learners import BUILTIN, resolve_learner

    if name is None:
        table = Table(title="learners (`pzasync learners NAME` lists one's options)", title_justify="left")
        for column in ("name", "learns", "options"):
            table.add_column(column, overflow="fold")
        for builtin in BUILTIN:
            cls, _ = resolve_learner(builtin)
            kind = ("on-policy" if cls.on_policy else "off-policy") if cls.learns else "never"
            table.add_row(builtin, kind, ", ".join(cls.Options.names()) or "-")
        console.print(table)
        return
    try:
        cls, _ = resolve_learner(name)
    except ConfigError as exc:
        raise UserInputError(str(exc).removeprefix("agent '?': ")) from None
    docs, checks = cls.Options.docs(), cls.option_rules()
    table = Table(title=f"{name} ({cls.__module__}:{cls.__qualname__}) options", title_justify="left")
    for column in ("option", "default", "accepted", "what"):
        table.add_column(column, overflow="fold")
    for option, default in cls.Options.defaults().items():
        check = checks.get(option)
        table.add_row(option, repr(default), check.text() if check is not None else "anything", docs.get(option, ""))
    console.print(table if cls.Options.names() else f"{name} takes no options", highlight=False)


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
    table.add_column("env id", overflow="fold")
    for column in ("API", "agents", "action spaces", "recipe"):
        table.add_column(column, overflow="fold")
    if show_all:
        table.add_column("status", overflow="fold")
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
@click.option("--episodes", default=500, show_default=True, help="Episodes per scored unit and evaluation.")
@click.option("--seed", default=12345, show_default=True, help="Episode e is seeded from SEED and e.")
@click.option("--scoring", type=click.Choice(list(SCORING_MODES)), default=None,
              help="seats: each trained seat against the yardstick; team: every seat its trained policy, scored "
                   "by the team's summed return; sides: each side (agents sharing a name prefix) against the "
                   "other sides played by the yardstick. Default: the env's recipe's, else read from the env "
                   "(docs/league.md, \"Scoring\").")
@click.option("--baselines/--no-baselines", default=True, show_default=True,
              help="Also score untrained networks of the run's learners, and random play.")
@click.option("--acting", type=click.Choice(list(ACTING_MODES)), default="greedy", show_default=True,
              help="greedy: each policy's most likely action (a Box action's mean, clipped); sampled: drawn from "
                   "the policy's own distribution as in training (seeded per episode and turn), for Gaussian "
                   "policies whose spread acts through the clipping.")
@click.option("--copies", type=int, default=None,
              help=f"Env copies played side by side (one batched forward per policy and round); the figures do "
                   f"not depend on it. Default: {EVAL_COPIES}, fewer for a simultaneous-move env of many agents.")
@click.option("--env-api", type=click.Choice(list(ENV_APIS)), default=None,
              help="Step the env through its AEC or parallel API (auto: parallel where the env has one). "
                   "Default: the run's.")
@click.option("--split", type=click.Choice(["train", "test"]), default=None,
              help="For a run on an env set (--env-set): play its train or its test split (docs/running.md, \"Env "
                   "sets\"). Default: the test split where the set has one, else the train split at the curriculum "
                   "stage the run reached.")
@click.option("--snapshot", default=None, metavar="STEPS|all",
              help="Score the run's policy snapshot taken at STEPS agent steps (train with --snapshot-every-steps; "
                   "the run directory's snapshots.jsonl lists them) instead of its final checkpoints; 'all': every "
                   "snapshot, the same episodes each, as a learning curve (a table, snapshots.png in the run "
                   "directory, and with --json a list of documents).")
@click.option("--json", "json_out", default=None, is_flag=False, flag_value="-", metavar="[FILE|-]",
              help="Also write the figures as JSON (docs/eval-schema.json) to FILE, or to stdout (the table "
                   "then goes to stderr) with '-' or no value (give it last, or as '--json -', so that RUN_DIR "
                   "is not read as FILE).")
def evaluate_cmd(run_dir: str, versus: str, episodes: int, seed: int, scoring: str | None, baselines: bool,
                 acting: str, copies: int | None, env_api: str | None, split: str | None, snapshot: str | None,
                 json_out: str | None) -> None:
    """Score the trained agents of RUN_DIR (greedy, or sampling with --acting sampled) in the mode that fits
    the game: each seat against a yardstick (random or scripted players, another run's agents), the whole team,
    or each side; beside untrained networks and random play."""
    import json
    import os

    from pzasync.evaluation.report import evaluate

    require("torch", "pzasync eval")
    if episodes < 1 or (copies is not None and copies < 1):
        raise UserInputError(f"--episodes {episodes} --copies {copies}: both must be >= 1")
    out = errors if json_out == "-" else console
    if not os.path.isdir(versus):
        parse_versus(versus)  # an unknown player is refused here, with the names it might mean
    if snapshot == "all":
        _evaluate_snapshots(run_dir, out, json_out, vs=versus, episodes=episodes, seed=seed, scoring=scoring,
                            baselines=baselines, copies=copies, acting=acting, env_api=env_api, split=split)
        return
    at = None if snapshot is None else _snapshot_steps(snapshot)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=errors,
                  transient=True) as progress:
        task = progress.add_task(f"evaluating {run_dir}", total=None)
        report = evaluate(run_dir, vs=versus, episodes=episodes,
                          seed=seed, scoring=scoring, baselines=baselines, copies=copies, acting=acting,
                          env_api=env_api, split=split, snapshot=at,
                          progress=lambda label: progress.advance(task))
    document = report.to_json()
    if json_out == "-":
        click.echo(json.dumps(document, indent=1))
    elif json_out is not None:
        with open(json_out, "w") as f:
            json.dump(document, f, indent=1)
    unit = {"seats": "agent", "team": "evaluation", "sides": "side and evaluation"}[report.scoring]
    out.print(f"{report.env}: {run_dir} vs {versus}, {episodes} episodes per {unit}, {acting}"
              + (f", the env set's {report.split} split" if report.split else "")
              + (f", its policy snapshot at {at:,} agent steps" if at is not None else ""),
              highlight=False, soft_wrap=True)
    out.print(scoring_line(report), highlight=False, soft_wrap=True)
    table = Table()
    for column in ("unit", "policy", "against", "mean return [95% CI]", "win rate [95% CI]", "wins/draws/losses"):
        table.add_column(column, justify="left" if column in ("unit", "policy", "against") else "right",
                         overflow="fold")
    for r in report.results:
        lo, hi = r.win_rate_ci95
        table.add_row(r.agent, r.policy, r.opponent, f"{r.mean:+.3f} ± {r.mean_ci95:.3f}",
                      f"{r.win_rate:.1%} [{lo:.1%}, {hi:.1%}]", f"{r.wins}/{r.draws}/{r.episodes - r.wins - r.draws}")
    out.print(table)
    played: dict[str, int] = defaultdict(int)
    for r in report.results:
        for label, n in r.envs.items():
            played[label] += n
    if played:
        out.print("episodes per env of the set: " + ", ".join(f"{label} {n}" for label, n in sorted(played.items())),
                  highlight=False, soft_wrap=True)


def _snapshot_steps(text: str) -> int:
    """--snapshot's value as agent steps (a non-negative integer), or a UserInputError naming the forms."""
    try:
        steps = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        steps = -1
    if steps < 0:
        raise UserInputError(f"--snapshot {text!r}: expected agent steps (an integer >= 0) or 'all'")
    return steps


def _evaluate_snapshots(run_dir: str, out: Any, json_out: str | None, **options: Any) -> None:
    """`pzasync eval RUN --snapshot all`: every snapshot scored alike, a table, snapshots.png, and with --json the
    list of their documents."""
    import json

    from pzasync.evaluation.snapshots import evaluate_snapshots, plot_snapshots, snapshot_rows

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=errors,
                  transient=True) as progress:
        task = progress.add_task(f"scoring the snapshots of {run_dir}", total=None)
        scored = evaluate_snapshots(run_dir, progress=lambda done, total: progress.update(task, completed=done,
                                                                                          total=total), **options)
    documents = [report.to_json() for _row, report in scored]
    if json_out == "-":
        click.echo(json.dumps(documents, indent=1))
    elif json_out is not None:
        with open(json_out, "w") as f:
            json.dump(documents, f, indent=1)
    rows = snapshot_rows(scored)
    first = scored[0][1]
    out.print(f"{first.env}: {run_dir}, {len(scored)} policy snapshots, {options['episodes']} episodes each "
              f"({options['acting']}), {scoring_line(first)}", highlight=False, soft_wrap=True)
    table = Table()
    for column in ("agent steps", "seconds", "unit", "against", "mean return [95% CI]", "win rate [95% CI]"):
        table.add_column(column, justify="left" if column in ("unit", "against") else "right", overflow="fold")
    for r in rows:
        lo, hi = r["win_rate_ci95"]
        table.add_row(f"{r['agent_steps']:,}", f"{r['seconds']:.0f}", r["unit"], r["against"],
                      f"{r['mean_return']:+.3f} ± {r['mean_return_ci95']:.3f}",
                      f"{r['win_rate']:.1%} [{lo:.1%}, {hi:.1%}]" if r["outcomes"] else "-")
    out.print(table)
    plot = plot_snapshots(run_dir, rows, f"{first.env}: policy snapshots")
    out.print(f"plot: {plot}" if plot else "no plot (pip install \"pzasync[plot]\" for snapshots.png)",
              highlight=False, soft_wrap=True, markup=False)


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--acting", type=click.Choice(["sampled", "greedy"]), default="sampled", show_default=True,
              help="sampled: the policies' action distributions, what they draw from in training; greedy: their "
                   "most likely actions, as `pzasync eval` plays by default.")
@click.option("--baselines/--no-baselines", default=True, show_default=True,
              help="Also untrained networks of the run's learners, and uniformly random play.")
@click.option("--seed", default=12345, show_default=True, help="Seed of the untrained networks.")
@click.option("--json", "json_out", default=None, is_flag=False, flag_value="-", metavar="[FILE|-]",
              help="Also write the figures as JSON to FILE, or to stdout (the table then goes to stderr) with '-'.")
def exploitability(run_dir: str, acting: str, baselines: bool, seed: int, json_out: str | None) -> None:
    """Exact exploitability of a leduc_holdem_v4 run's policies: what a best response wins against each seat,
    in big blinds a hand (0 for an equilibrium), with their self-play and against-random returns; computed over
    every deal and betting line, no episodes played (docs/league.md, "Exploitability")."""
    import json

    from pzasync.evaluation.exploitability import exploitability as leduc_figures

    require("torch", "pzasync exploitability")

    out = errors if json_out == "-" else console
    reports = leduc_figures(run_dir, acting=acting, baselines=baselines, seed=seed)
    document = {"run": run_dir, **{name: report.to_json() for name, report in reports.items()}}
    if json_out == "-":
        click.echo(json.dumps(document, indent=1))
    elif json_out is not None:
        with open(json_out, "w") as f:
            json.dump(document, f, indent=1)
    table = Table(title=f"leduc exploitability of {run_dir} ({acting}), big blinds a hand")
    for column in ("policy", "exploitability", "best response as player_0 / player_1", "self-play, player_0",
                   "vs random as player_0 / player_1"):
        table.add_column(column, justify="left" if column == "policy" else "right", overflow="fold")
    def figure(value: float) -> str:
        return f"{value + 0.0:+.3f}"  # + 0.0: no "-0.000"

    for name, r in reports.items():
        table.add_row(name if name != "random" else "random (uniform)", f"{r.exploitability:.3f}",
                      f"{figure(r.best_response[0])} / {figure(r.best_response[1])}", figure(r.self_play[0]),
                      f"{figure(r.vs_random[0])} / {figure(r.vs_random[1])}")
    out.print(table)


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
        table.add_column(column, overflow="fold")
    for m in results:
        ratio = f"{m.seconds / memcpy:.2f}x" if "floats (" in m.name else ""
        table.add_row(m.name, format_seconds(m.seconds), ratio, m.target)
    console.print(table)
