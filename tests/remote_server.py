"""A Python remote env server for the tests (`python tests/remote_server.py ENV --socket PATH`), with faults on
demand: exit or hang after a number of env steps (printing to stderr first), in every server or only in the
one whose `--index` is `--fault-index`. With `--workers N` it is paced (docs/remote.md, "Replies at the
server's pace"): `--pace-ms` gives each step an instance-dependent delay that changes from step to step, and
`--hold I` holds instance I's first steps until the other instances have moved on. An env with a parallel API is
served through it too (docs/remote.md, "The parallel API"), faults included (a cycle counts one step per action);
`--env-arg KEY=VALUE` passes keyword arguments to the env."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pzasync.core.environments import make_env, make_parallel_env  # noqa: E402
from pzasync.errors import EnvSpecError  # noqa: E402
from pzasync.remote import serve  # noqa: E402
from pzasync.specs import parse_key_value  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("env")
    parser.add_argument("--socket", help="Unix socket path")
    parser.add_argument("--address", help="unix:///path or tcp://host:port")
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--env-arg", action="append", default=[], help="KEY=VALUE: an env keyword argument")
    parser.add_argument("--exit-after", type=int, default=None, help="exit with code 3 after this many env steps")
    parser.add_argument("--hang-after", type=int, default=None, help="sleep for good after this many env steps")
    parser.add_argument("--index", type=int, default=0, help="this server's index (a cmd: id's {index})")
    parser.add_argument("--fault-index", type=int, default=None, help="faults only in the server of this index")
    parser.add_argument("--pid-dir", default=None, help="write a file named after this server's pid here, holding "
                        "its index and, once stopped, the env steps it took")
    parser.add_argument("--workers", type=int, default=0, help="paced: step instances on this many threads")
    parser.add_argument("--pace-ms", type=float, default=0.0, help="paced: step n of instance i takes "
                        "((7 i + n) %% 4) times this many milliseconds")
    parser.add_argument("--hold", type=int, default=None, help="paced: the first 3 steps of this instance each "
                        "wait until the other instances have taken 4 steps since it began (at most 20 s)")
    args = parser.parse_args()
    if args.pid_dir:
        Path(args.pid_dir, str(os.getpid())).write_text(f"{args.index} 0")
    if args.fault_index is not None and args.fault_index != args.index:
        args.exit_after = args.hang_after = None
    steps = 0
    kwargs = dict(parse_key_value(item, f"--env-arg {item!r}: expected KEY=VALUE") for item in args.env_arg)
    faulty = args.exit_after is not None or args.hang_after is not None or args.pid_dir

    def count(taken: int) -> None:
        nonlocal steps
        steps += taken
        if args.exit_after is not None and steps > args.exit_after:
            print(f"test server: exiting on purpose after {args.exit_after} steps", file=sys.stderr, flush=True)
            os._exit(3)
        if args.hang_after is not None and steps > args.hang_after:
            print("test server: hanging on purpose", file=sys.stderr, flush=True)
            time.sleep(3600)

    def env_fn():
        env = make_env(args.env, **kwargs)
        step = env.step

        def faulty_step(action):
            count(1)
            step(action)

        if faulty:
            env.step = faulty_step
        return env

    def parallel_fn():
        env = make_parallel_env(args.env, **kwargs)
        step = env.step

        def faulty_step(actions):
            count(len(actions))
            return step(actions)

        if faulty:
            env.step = faulty_step
        return env

    try:
        make_parallel_env(args.env, **kwargs).close()
        offered = parallel_fn
    except EnvSpecError:
        offered = None
    serve(env_fn, args.address or f"unix://{args.socket}", instances=args.instances, workers=args.workers,
          pace=pace_function(args.pace_ms, args.hold) if args.workers else None, parallel_fn=offered)
    if args.pid_dir:  # stopped by SIGTERM: say how many env steps this server took
        Path(args.pid_dir, str(os.getpid())).write_text(f"{args.index} {steps}")


def pace_function(pace_ms: float, hold: int | None):
    """The paced server's `pace(instance)`: a delay that depends on the instance and its step, and, for instance
    `hold`, a wait for the others (counted per connection-less instance number: the tests use one connection)."""
    taken: Counter = Counter()
    moved = threading.Condition()

    def pace(instance: int) -> float:
        with moved:
            n = taken[instance]
            taken[instance] += 1
            moved.notify_all()
            if instance == hold and n < 3:
                others = sum(taken.values()) - taken[instance]
                moved.wait_for(lambda: sum(taken.values()) - taken[instance] >= others + 4, timeout=20)
        return ((7 * instance + n) % 4) * pace_ms / 1000

    return pace


if __name__ == "__main__":
    main()
