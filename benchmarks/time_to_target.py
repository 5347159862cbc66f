"""Time to target of the default `pzasync train` run (connect_four, self-play, scored against one_ply), for
one or more checkouts of pzasync, seeds interleaved so that load drifts hit every checkout alike.

    python benchmarks/time_to_target.py --checkouts ../pzasync-before . --seeds 0,1,2 --minutes 5
    python benchmarks/time_to_target.py --checkouts ".::--learner dqn,gamma=0.9,mirror=True" ...
    python benchmarks/time_to_target.py --from-json runs.jsonl          # re-read earlier runs

Each run is `pzasync train --minutes M --seed S --eval-every E --final-episodes 0` from that checkout (`PYTHONPATH`;
a checkout written `PATH::ARGS` adds ARGS to its command line), evaluated while training by the run's own evaluator
against the recipe's yardstick. A run reaches the target at the first evaluation round in which every seat's win
rate is >= --target; the script prints, per checkout, each seed's time to target (wall seconds since the run
started, and agent steps and learner updates at that round) and the median, and appends one JSON line per run to
--json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_once(checkout: str, seed: int, minutes: float, every: float, out: Path) -> Path:
    path, _, extra = checkout.partition("::")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(path))
    command = [sys.executable, "-m", "pzasync.cli", "train", "--minutes", str(minutes), "--seed", str(seed),
               "--eval-every", str(every), "--final-episodes", "0", "--out", str(out), *shlex.split(extra)]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/tmp")
    return next(p for p in out.iterdir() if p.is_dir())


def curve(run_dir: Path) -> list[dict]:
    """Evaluation rounds: {round, wall_s, agent_steps, seats: {agent: win_rate}}."""
    rounds: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") != "eval":
            continue
        r = rounds.setdefault(row["round"], {"round": row["round"], "wall_s": row["wall_s"],
                                             "agent_steps": row["agent_steps"], "seats": {}})
        r["seats"][row["agent"]] = row["win_rate"]
    return [rounds[k] for k in sorted(rounds)]


def updates_at(run_dir: Path, wall_s: float) -> int | None:
    """The learner's updates in the last report at or before `wall_s`."""
    best = None
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") != "eval" and "updates" in row and row.get("wall_s", 1e18) <= wall_s:
            best = row["updates"]
    return best


def reached(rounds: list[dict], target: float) -> dict | None:
    for r in rounds:
        if r["seats"] and min(r["seats"].values()) >= target:
            return r
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkouts", nargs="+", default=[])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=20.0, help="seconds between evaluation rounds")
    parser.add_argument("--target", type=float, default=0.6, help="win rate every seat must reach")
    parser.add_argument("--json", default="time_to_target.jsonl")
    parser.add_argument("--from-json", default=None)
    args = parser.parse_args()
    results: list[dict] = []
    if args.from_json:
        results = [json.loads(line) for line in Path(args.from_json).read_text().splitlines() if line.strip()]
    for seed in (int(s) for s in args.seeds.split(",") if s and args.checkouts):
        for checkout in args.checkouts:
            with tempfile.TemporaryDirectory() as tmp:
                run_dir = run_once(checkout, seed, args.minutes, args.every, Path(tmp))
                rounds = curve(run_dir)
                hit = reached(rounds, args.target)
                row = {"checkout": checkout, "seed": seed, "minutes": args.minutes, "target": args.target,
                       "time_to_target_s": hit["wall_s"] if hit else None,
                       "agent_steps_at_target": hit["agent_steps"] if hit else None,
                       "updates_at_target": updates_at(run_dir, hit["wall_s"]) if hit else None,
                       "final_round": rounds[-1] if rounds else None, "rounds": rounds}
            results.append(row)
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
            final = row["final_round"]["seats"] if row["final_round"] else {}
            print(f"{checkout} seed {seed}: target {args.target} at "
                  f"{row['time_to_target_s'] if hit else 'never'} s; last round {final}", flush=True)
    by_checkout: dict[str, list[dict]] = {}
    for row in results:
        by_checkout.setdefault(row["checkout"], []).append(row)
    for checkout, rows in by_checkout.items():
        times = [r["time_to_target_s"] if r["time_to_target_s"] is not None else float("inf") for r in rows]
        print(f"{checkout}: time to target {args.target} per seed {times}, median {statistics.median(times)} s; "
              f"updates at target {[r['updates_at_target'] for r in rows]}")


if __name__ == "__main__":
    main()
