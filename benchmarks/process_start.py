"""How long a run's process takes to start: spawned, or forked from the fork server (pzasync/runtime/processes.py).

    python benchmarks/process_start.py [--processes 8] [--rounds 3]

Each round starts `--processes` processes one after another with each start method, and times each from
`start()` until it has imported what a learner host imports (torch, pzasync's learners) and answered on a pipe.
The fork server's first start (it imports torch itself) is reported apart. Prints one JSON line per method.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from pzasync.runtime.processes import START_METHOD_VARIABLE, process_context


def _answer(conn) -> None:
    import torch  # noqa: F401

    import pzasync.learners  # noqa: F401 - what a learner host imports before it does anything

    conn.send(os.getpid())
    conn.close()


def _time_one_start() -> float:
    ctx = process_context()
    receiver, sender = ctx.Pipe(duplex=False)
    started = time.perf_counter()
    child = ctx.Process(target=_answer, args=(sender,))
    child.start()
    sender.close()
    receiver.recv()
    took = time.perf_counter() - started
    child.join()
    receiver.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for method in ("forkserver", "spawn"):
        os.environ[START_METHOD_VARIABLE] = method
        first = _time_one_start() if method == "forkserver" else None
        times = [_time_one_start() for _ in range(args.processes * args.rounds)]
        print(json.dumps({"method": method, "first_start_s": first, "median_s": statistics.median(times),
                          "min_s": min(times), "max_s": max(times), "starts": len(times)}))


if __name__ == "__main__":
    main()
