"""Score a peer's exported policy (benchmarks/peers/player.py) with pzasync's evaluator, as the suite scores pzasync.

Runs in pzasync's environment (torch, numpy, pzasync; no peer library):

    python benchmarks/peers/score.py /tmp/pzpeers/spread_s0 --episodes 10 --seed 9001 \\
        --json /tmp/pzpeers/spread_s0/score_final.json

RUN is the peer's output folder (its policy.pt and run.json); the env, its kwargs and its SuperSuit wrappers are
the ones the peer trained with (run.json) unless given. The mode is the evaluator's for the env (team on
simple_spread: every seat the peer's policy, the team return; per seat against the recipe's yardstick on a
turn-based game, one_ply on connect_four, as `pzasync suite` scores it), greedy (or `--acting sampled`: Box actions
drawn from the Gaussian of the exported log_std, discrete ones from the logits), over 8 env copies; with
`--baselines` the same units played by random players beside it. `pzasync suite` scores its runs' last point with
`--eval-episodes` (10) episodes on seed `seed + 9001` and its baselines with 50 episodes on seed 10007: give the
same here to compare. The JSON is `pzasync.evaluate`'s (docs/eval-schema.json) with the peer's run.json under
"peer".
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

from player import peer_policies

import pzasync
from pzasync.evaluation.episodes import ACTING_MODES
from pzasync.recipes import default_yardstick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="the peer's output folder (policy.pt, run.json)")
    parser.add_argument("env", nargs="?", default=None, help="env id, as pzasync takes it (default: run.json's)")
    parser.add_argument("--env-arg", action="append", default=None, metavar="KEY=VALUE",
                        help="env keyword argument (default: run.json's env_kwargs)")
    parser.add_argument("--wrapper", action="append", default=None, metavar="NAME[,KEY=VALUE...]",
                        help="env wrapper (default: run.json's wrappers)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=10_007)
    parser.add_argument("--vs", default=None,
                        help="yardstick of per-seat scoring (default: the env's recipe's, e.g. one_ply on "
                             "connect_four, else random)")
    parser.add_argument("--scoring", choices=("seats", "team", "sides"), default=None)
    parser.add_argument("--baselines", action="store_true", help="also score random players in the same units")
    parser.add_argument("--acting", choices=ACTING_MODES, default="greedy",
                        help="the peer's most likely action, or one drawn from its distribution")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    trained = json.loads((args.run / "run.json").read_text())
    kwargs = trained.get("env_kwargs", {}) if args.env_arg is None else \
        {k: ast.literal_eval(v) for k, _, v in (item.partition("=") for item in args.env_arg)}
    wrappers = tuple(trained.get("wrappers", ()) if args.wrapper is None else args.wrapper)
    spec = pzasync.EnvSpec.of(args.env or trained["env"], wrappers=wrappers, **kwargs)
    vs = args.vs or default_yardstick(spec.name)
    report = pzasync.evaluate(peer_policies(args.run / "policy.pt", spec), env=spec, vs=vs,
                              episodes=args.episodes, seed=args.seed, scoring=args.scoring,
                              baselines=args.baselines, acting=args.acting)
    print(f"env: {spec.name} {kwargs} wrappers {list(wrappers)}")
    print(f"scoring: {report.scoring} ({report.scoring_reason}); {args.episodes} episodes, seed {args.seed}, "
          f"{args.acting}")
    for r in report.results:
        wins = f", win rate {r.win_rate:.2f}" if r.outcomes else ""
        print(f"{r.policy:>8} {r.agent:>10} vs {r.opponent}: mean return {r.mean:.2f} ± {r.mean_ci95:.2f}{wins}")
    if args.json is not None:
        document = report.to_json()
        document["peer"] = trained
        args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
