"""Updates per second of the default connect_four learner on one torch thread: sample + update, as the learner
process runs them (`LearnerDriver.try_update`, without its publishing and bookkeeping).

    taskset -c 1 python benchmarks/learner_updates.py [--learner SPEC] [--updates 1000] [--repeats 7]
    taskset -c 1 python benchmarks/learner_updates.py --profile cprofile|torch

The buffer is the one `pzasync train` gives the default learner: both seats in one agent group, 8 env copies
(columns `member` and `track`), 100,000 rows, filled with `--fill` transitions of random legal play on
connect_four (both seats, through the same `Transition`s the actor writes). Each repetition times
`--updates` calls of `learner.sample(buffer, rng)` followed by `learner.update(batch)` after a warm-up, and
prints updates/s, by the wall clock and by the process's CPU time (the second is the steadier one where the
core is shared with other work); the summary line gives the medians (and the wall clock's min-max) over
`--repeats` repetitions, and, on the side, the median time of `sample` and of `update` alone. Prints JSON
lines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

ENV = "pettingzoo.classic.connect_four_v3"
DEFAULT_LEARNER = "dqn,gamma=0.9,epsilon_end=0.2,mirror=True"


def filled_buffer(fill: int, seed: int = 0, copies: int = 8):
    """A group buffer with `fill` transitions of random legal connect_four play, `member` and `track` set as
    the actor sets them (`copies` env copies interleaved, each with both seats)."""
    from pzasync import SharedRingBuffer, env_layouts, make_env
    from pzasync.collect import run_episodes
    from pzasync.spaces import probe_info_masks

    env = make_env(ENV)
    layout = env_layouts(env, probe_info_masks(env))["player_0"]
    buffer = SharedRingBuffer.create(layout, 100_000, {"member": "int16", "track": "int32"}, tracks=2 * copies)
    members = {"player_0": 0, "player_1": 1}
    rng = np.random.default_rng(seed)
    per_copy: list[list] = []
    for copy in range(copies):
        rows: list = []

        def emit(t, copy=copy, rows=rows):
            t.extras.update(member=members[t.agent], track=copy * 2 + members[t.agent], policy_version=0)
            rows.append(t)

        run_episodes(make_env(ENV), lambda agent, obs, mask: (int(rng.choice(np.flatnonzero(mask))), {}), emit,
                     agent_steps=fill // copies, seed=seed + copy)
        per_copy.append(rows)
    # Interleave the copies as a vectorised actor does (one decision per copy in turn).
    for i in range(max(len(rows) for rows in per_copy)):
        for rows in per_copy:
            if i < len(rows):
                buffer.write(rows[i])
    return layout, buffer


def make_learner(spec: str, layout, seed: int = 0):
    from pzasync.cli import parse_learner_spec
    from pzasync.learners import LearnerContext, resolve_learner

    cls, options = resolve_learner(parse_learner_spec(spec), "players")
    return cls(LearnerContext("players", layout, options, "cpu", seed, members=["player_0", "player_1"],
                              tracks=16))


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learner", default=DEFAULT_LEARNER)
    parser.add_argument("--updates", type=int, default=1000, help="timed updates per repetition")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--fill", type=int, default=50_000, help="transitions in the buffer")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", choices=("cprofile", "torch"), default=None)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    layout, buffer = filled_buffer(args.fill)
    learner = make_learner(args.learner, layout)
    rng = np.random.default_rng(1)
    try:
        for _ in range(args.warmup):
            learner.update(learner.sample(buffer, rng))
        if args.profile:
            profile(args.profile, learner, buffer, rng, args.updates)
            return
        rates, cpu_rates, sample_ms, update_ms = [], [], [], []
        for repeat in range(args.repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(args.updates):
                learner.update(learner.sample(buffer, rng))
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            rates.append(args.updates / elapsed)
            cpu_rates.append(args.updates / cpu)
            # The two parts alone (fewer calls: a side figure, not the headline).
            n = max(1, args.updates // 4)
            batches = []
            start = time.perf_counter()
            for _ in range(n):
                batches.append(learner.sample(buffer, rng))
            sample_ms.append((time.perf_counter() - start) / n * 1e3)
            start = time.perf_counter()
            for batch in batches:
                learner.update(batch)
            update_ms.append((time.perf_counter() - start) / n * 1e3)
            print(json.dumps({"repeat": repeat, "updates_per_s": round(rates[-1], 1),
                              "updates_per_cpu_s": round(cpu_rates[-1], 1)}), flush=True)
        print(json.dumps({
            "learner": args.learner, "threads": args.threads, "updates": args.updates, "repeats": args.repeats,
            "median_updates_per_s": round(statistics.median(rates), 1),
            "min_max": [round(min(rates), 1), round(max(rates), 1)],
            "median_updates_per_cpu_s": round(statistics.median(cpu_rates), 1),
            "median_ms_per_update": round(1e3 / statistics.median(rates), 3),
            "median_sample_ms": round(statistics.median(sample_ms), 3),
            "median_update_ms": round(statistics.median(update_ms), 3),
            "torch": torch.__version__, "pzasync": __import__("pzasync").__file__,
        }), flush=True)
    finally:
        buffer.close()
        buffer.unlink()


def profile(kind: str, learner, buffer, rng, updates: int) -> None:
    if kind == "cprofile":
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(updates):
            learner.update(learner.sample(buffer, rng))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return
    from torch.profiler import ProfilerActivity, profile as torch_profile, record_function

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(updates):
            with record_function("sample"):
                batch = learner.sample(buffer, rng)
            with record_function("update"):
                learner.update(batch)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


if __name__ == "__main__":
    main()
