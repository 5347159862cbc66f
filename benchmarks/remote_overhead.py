"""Per-agent-step cost of remote env copies (docs/remote.md, "Speed") against the same env stepped in process,
beside an HTTP+JSON baseline of the same messages: a thin wrapper of `pzasync bench ENV --remote`
(pzasync/bench/remote.py, which says what is measured and how).

    python benchmarks/remote_overhead.py [--env pettingzoo.classic.connect_four_v3] [--steps 4000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pzasync.bench.remote import DEFAULT_PATHS, remote_overhead, report_lines  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="pettingzoo.classic.connect_four_v3")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instances", default="1,8,16,32")
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS), help="among unix, tcp, http, paced")
    parser.add_argument("--actor-copies", type=int, default=16)
    args = parser.parse_args()
    report = remote_overhead(args.env, steps=args.steps, repeats=args.repeats,
                             instances=tuple(int(n) for n in args.instances.split(",")),
                             paths=tuple(args.paths.split(",")), actor_copies=args.actor_copies,
                             on_row=lambda row: print(f"  {row.instances} instances, {row.path}: {row.wall_us:.1f} us "
                                                      f"wall", file=sys.stderr))
    print("\n".join(report_lines(report)))


if __name__ == "__main__":
    main()
