"""Split py-spy's raw (collapsed) stacks of an actor run into where the time went: the env, the policy
forward, and the actor's own work by function (the innermost pzasync frame of the sample).

    py-spy record --format raw -r 1000 -o stacks.txt -- python benchmarks/actor_overhead.py --copies 1 --only-run
    python benchmarks/spy_categories.py stacks.txt [--us-per-step 120]

With `--us-per-step` (the actor's time per decision, from actor_overhead.py) it prints microseconds per
decision for each share, else percentages.
"""

from __future__ import annotations

import argparse
import collections
import re

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def category(frames: list[tuple[str, str]]) -> str:
    """'env', 'forward', 'own:<function>' or 'other' for one stack (outermost frame first)."""
    inside_run = False
    own = None
    for func, file in frames:
        name = func.rsplit(".", 1)[-1]
        if name == "run" and file.endswith("runtime/actor.py"):
            inside_run = True
            continue
        if not inside_run:
            continue
        if name == "act" and "learners/" in file:
            return "forward"
        if "pettingzoo" in file or "/envs/" in file:
            return "env"
        if "pzasync" in file:
            own = f"own:{func}"
        else:
            return own + " > " + func if own else "other"
    return own or ("other" if inside_run else "outside run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stacks")
    parser.add_argument("--us-per-step", type=float, default=None)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    counts: collections.Counter = collections.Counter()
    for line in open(args.stacks):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        frames = []
        for part in stack.split(";"):
            m = FRAME.match(part)
            frames.append((m["func"], m["file"]) if m else (part, ""))
        counts[category(frames)] += int(n)
    inside = sum(n for c, n in counts.items() if c != "outside run")
    groups = collections.Counter()
    for c, n in counts.items():
        if c != "outside run":
            groups["own" if c.startswith("own") or c == "other" else c] += n
    scale = (args.us_per_step / inside) if args.us_per_step else (100.0 / inside)
    unit = "us/step" if args.us_per_step else "%"
    for c, n in groups.most_common():
        print(f"{c:>8}: {n * scale:7.2f} {unit}")
    print("own work by innermost pzasync function (and the library call it was in):")
    for c, n in counts.most_common():
        if c.startswith("own") or c == "other":
            if args.top <= 0:
                break
            args.top -= 1
            print(f"  {n * scale:7.2f} {unit}  {c.removeprefix('own:')}")


if __name__ == "__main__":
    main()
