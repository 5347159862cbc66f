"""Measure what a training configuration reaches against yardstick players (how `pzasync train`'s default
was chosen, and how its figures in docs/benchmarks.md were made).

    python benchmarks/default_run.py                       # the default `pzasync train` configuration
    python benchmarks/default_run.py --option "league_trainee_weights={}"   # ... with uniform league trainees
    python benchmarks/default_run.py --minutes 5 --league 'latest=0.5;snapshot=0.5' --learner dqn,n_step=3
    python benchmarks/default_run.py --env pettingzoo.classic.tictactoe_v3 --vs perfect --minutes 2

Trains (async runner, both seats sharing one learner through an agent group unless --no-group), then plays
each seat's greedy policy for --episodes games against every yardstick, and the same for an untrained
network of the same shape; prints a table and appends one JSON line per run to --json, and adds the run to a
results-page report with --report (docs/bench/default_run_c4_cleanup.json: the default run after issue 54's pass).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.evaluation.evaluate import evaluate_against, load_run_policies, untrained_baseline
from pzasync.recipes import TRAIN_ENV, default_train_learner, default_trainee_weights, default_yardstick, train_recipe
from pzasync.specs import parse_learner_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=TRAIN_ENV)
    parser.add_argument("--learner", default=None, help="learner spec (default: what `pzasync train` uses for --env)")
    parser.add_argument("--league", default=None, help="opponent mix of the group, '' for none (default: the "
                        "env's self-play recipe's)")
    parser.add_argument("--no-group", action="store_true", help="one learner per seat instead of a shared one")
    parser.add_argument("--minutes", type=float, default=None, help="default: the env's recipe's")
    parser.add_argument("--envs-per-actor", type=int, default=None, help="default: the env's self-play recipe's")
    parser.add_argument("--runner", choices=["async", "sequential"], default="async")
    parser.add_argument("--replay-ratio", type=float, default=None)
    parser.add_argument("--vs", default=None, help="comma-free list separated by '/', e.g. 'one_ply/random'")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--option", action="append", default=[], help="RunConfig KEY=VALUE")
    parser.add_argument("--json", default=None)
    parser.add_argument("--report", default=None, help="a report for the results page (docs/bench/NAME.json): "
                        "this run is added to its \"runs\"")
    args = parser.parse_args()
    recipe = train_recipe(args.env, self_play=True)  # `pzasync train ENV --self-play`'s choices
    args.learner = args.learner or default_train_learner(args.env)
    args.league = recipe.league if args.league is None else args.league
    args.minutes = recipe.minutes if args.minutes is None else args.minutes
    args.envs_per_actor = recipe.envs_per_actor if args.envs_per_actor is None else args.envs_per_actor

    import ast

    options = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in args.option)}
    from pzasync.core.environments import EnvSpec

    probe = EnvSpec.of(args.env).make()
    agents = list(probe.possible_agents)
    probe.close()
    groups = {} if args.no_group else {"players": agents}
    unit = "players" if groups else None
    league = {}
    if args.league:
        league = dict.fromkeys([unit] if unit else agents, args.league)
    if league and groups:  # `pzasync train`'s self-play default; --option "league_trainee_weights={}" for uniform
        options.setdefault("league_trainee_weights", default_trainee_weights(args.env))
    yardsticks = (args.vs or default_yardstick(args.env)).split("/")
    config = RunConfig(seed=args.seed, out_dir="runs/default_run", agent_groups=groups, league=league,
                       replay_ratio=args.replay_ratio, eval_vs=yardsticks[0], eval_every_s=30.0,
                       **{"envs_per_actor": args.envs_per_actor, **options})
    learner = parse_learner_spec(args.learner)
    runner_cls = AsyncRunner if args.runner == "async" else SequentialRunner
    start = time.monotonic()
    result = runner_cls(args.env, learner, config).run(seconds=args.minutes * 60)
    wall = time.monotonic() - start
    policies = load_run_policies(result.run_dir)
    row = {"env": args.env, "learner": args.learner, "league": args.league, "group": bool(groups),
           "runner": args.runner, "minutes": args.minutes, "seed": args.seed,
           "options": {"envs_per_actor": args.envs_per_actor, **options},
           "agent_steps": result.agent_steps, "wall_s": round(wall, 1),
           "updates": {a: r.updates for a, r in result.agents.items()}, "run_dir": result.run_dir, "scores": {},
           "commit": commit()}
    print(f"{result.agent_steps:,} agent steps in {wall:.0f}s; updates {row['updates']}; run {result.run_dir}")
    for vs in yardsticks:
        trained = evaluate_against(args.env, policies, vs, args.episodes, seed=4321)
        untrained = untrained_baseline(args.env, dict.fromkeys(agents, learner), vs, args.episodes, seed=4321)
        for r in trained:
            base = next(b for b in untrained if b.agent == r.agent)
            lo, hi = r.win_rate_ci95
            row["scores"][f"{r.agent} vs {vs}"] = {"win": r.win_rate, "ci95": [lo, hi], "draw": r.draws / r.episodes,
                                                   "loss": 1 - (r.wins + r.draws) / r.episodes,
                                                   "untrained_win": base.win_rate}
            print(f"  {r.agent} vs {vs:>16}: win {r.win_rate:6.1%} [{lo:.1%}, {hi:.1%}]  "
                  f"draw {r.draws / r.episodes:5.1%}   untrained: win {base.win_rate:6.1%}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    if args.report:
        add_to_report(Path(args.report), row, command_of(args, "/".join(yardsticks)))


def commit() -> str | None:
    """The checkout this script runs in (git's short hash), which the report keeps beside each run."""
    import subprocess

    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                          text=True)
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def command_of(args: argparse.Namespace, vs: str) -> str:
    """The command that reproduces a report's runs, seed left as S (learner, league and copies: the recipe's unless
    given)."""
    parts = ["python benchmarks/default_run.py", f"--minutes {args.minutes:g}", f"--vs {vs}",
             f"--episodes {args.episodes}", "--seed S", f"--report {args.report}"]
    return " ".join(parts)


def add_to_report(path: Path, row: dict, command: str) -> None:
    """Add one run (the row --json writes) to a results-page report, made with its command if new."""
    data = json.loads(path.read_text()) if path.exists() else {
        "what": "The default `pzasync train` configuration trained by benchmarks/default_run.py, each seat scored "
                "over greedy games against each yardstick, beside an untrained network of the same shape.",
        "command": command, "runs": []}
    data["runs"] = [run for run in data["runs"]
                    if (run["seed"], run.get("commit")) != (row["seed"], row.get("commit"))] + [row]
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
