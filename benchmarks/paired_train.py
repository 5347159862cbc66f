"""A whole run's agent-steps/s in two checkouts, paired: `pzasync train ENV` for the same minutes and seed in
checkout A, then in checkout B (each side run in its checkout, its code from PYTHONPATH=<checkout>, checked before
the first run), the sides alternating in order from round to round, one run at a time. The figure is the run's
own (result.json: agent steps over acting seconds, evaluation while training included); the final evaluation is
skipped.

    python benchmarks/paired_train.py BEFORE AFTER --env pettingzoo.butterfly.pistonball_v6 --minutes 1 --rounds 2 \\
        --json docs/bench/observed_once_train_pistonball.json [--train-arg=--env-arg --train-arg=obs_method=image]

BEFORE and AFTER are checkouts (`git worktree add DIR COMMIT`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: `pzasync` (the console script) run by this interpreter, importing the package from PYTHONPATH.
CLI = "import sys; from pzasync.cli import main; sys.argv[0] = 'pzasync'; sys.exit(main())"


def imported_from(checkout: Path) -> Path:
    """Where `import pzasync` resolves when run as `train` runs it: the package directory of `checkout`, or
    SystemExit. `python -c` puts its working directory first on sys.path, ahead of PYTHONPATH, so each side runs
    in its own checkout (run from another pzasync checkout, both sides would import that one)."""
    environ = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    found = Path(subprocess.run([sys.executable, "-c", "import pzasync; print(pzasync.__file__)"], check=True,
                                env=environ, cwd=checkout, capture_output=True, text=True).stdout.strip()).parent
    if found.resolve() != (checkout / "pzasync").resolve():
        sys.exit(f"checkout {checkout}: `import pzasync` finds {found}, not its own package")
    return found


def train(checkout: Path, env: str, minutes: float, seed: int, extra: list[str], out: Path) -> dict[str, Any]:
    """One `pzasync train` with `checkout`'s code (run in the checkout, imported from it: `imported_from`); its
    result.json's figures."""
    command = [sys.executable, "-c", CLI, "train", env, "--minutes", str(minutes), "--seed", str(seed),
               "--final-episodes", "0", "--no-progress", "--out-dir", str(out), *extra]
    environ = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    subprocess.run(command, check=True, env=environ, cwd=checkout, stdout=subprocess.DEVNULL)
    (result,) = out.glob("*/result.json")
    data = json.loads(result.read_text())
    return {"agent_steps": data["agent_steps"], "acting_seconds": round(data["acting_seconds"], 2),
            "agent_steps_per_s": round(data["agent_steps"] / data["acting_seconds"], 1),
            "env_api": data["config"].get("env_api")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="checkout A (the reference)")
    parser.add_argument("b", type=Path, help="checkout B")
    parser.add_argument("--env", required=True)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-arg", action="append", default=[], help="passed to pzasync train (repeat)")
    parser.add_argument("--label-a", default="A")
    parser.add_argument("--label-b", default="B")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not (args.a / "pzasync").is_dir() or not (args.b / "pzasync").is_dir():
        sys.exit("A and B must be checkouts of pzasync (each with a pzasync/ package)")
    for checkout in (args.a, args.b):
        print(f"{checkout}: pzasync from {imported_from(checkout)}", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="paired_train_") as tmp:
        for round_index in range(args.rounds):
            sides = [("a", args.a), ("b", args.b)]
            for side, checkout in sides if round_index % 2 == 0 else sides[::-1]:
                out = Path(tmp) / f"{side}{round_index}"
                figures = train(checkout, args.env, args.minutes, args.seed + round_index, args.train_arg, out)
                runs.append({"round": round_index, "side": side, **figures})
                print(json.dumps(runs[-1]), flush=True)
    median = {side: statistics.median(r["agent_steps_per_s"] for r in runs if r["side"] == side) for side in "ab"}
    pairs = [next(r for r in runs if r["round"] == i and r["side"] == "b")["agent_steps_per_s"]
             / next(r for r in runs if r["round"] == i and r["side"] == "a")["agent_steps_per_s"]
             for i in range(args.rounds)]
    report = {"what": "a whole run's agent-steps/s, pzasync train in two checkouts, paired by round and seed",
              "command": "python benchmarks/paired_train.py BEFORE AFTER --env " + args.env
                         + f" --minutes {args.minutes:g} --rounds {args.rounds}"
                         + "".join(f" --train-arg={a}" for a in args.train_arg)
                         + (f" --json {args.json}" if args.json else ""),
              "env": args.env, "minutes": args.minutes, "labels": {"a": args.label_a, "b": args.label_b},
              "runs": runs, "median_agent_steps_per_s": median, "b_over_a_each_round": [round(p, 3) for p in pairs],
              "b_over_a_median": round(statistics.median(pairs), 3)}
    print(json.dumps({k: report[k] for k in ("median_agent_steps_per_s", "b_over_a_each_round")}))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
