"""Updates per second of the default connect_four learner on one torch thread: sample + update, as the learner
process runs them (`LearnerDriver.try_update`, without its publishing and bookkeeping).

    taskset -c 1 python benchmarks/learner_updates.py [--learner SPEC] [--updates 1000] [--repeats 7]
    taskset -c 1 python benchmarks/learner_updates.py --profile cprofile|torch|parts|flops
    taskset -c 1 python benchmarks/learner_updates.py --paired /path/to/checkout_a /path/to/checkout_b
    taskset -c 1 python benchmarks/learner_updates.py --paired OLD NEW --learner dqn --learner-b SPEC

The buffer is the one `pzasync train` gives the default learner: both seats in one agent group, 8 env copies
(columns `member` and `track`), 100,000 rows, filled with `--fill` transitions of random legal play on
connect_four (both seats, through the same `Transition`s the actor writes). Each repetition times
`--updates` calls of `learner.sample(buffer, rng)` followed by `learner.update(batch)` after a warm-up, and
prints updates/s, by the wall clock and by the process's CPU time (the second is the steadier one where the
core is shared with other work); the summary line gives the medians (and the wall clock's min-max) over
`--repeats` repetitions, and, on the side, the median time of `sample` and of `update` alone. Prints JSON
lines. `--profile parts` gives the CPU time per update of each part (sample; with DQN's update by hand the
online and target forwards, the backward, the Adam step and the rest of the update). `--profile flops` gives
the floating-point work of an update's matrix products (every `mm`/`addmm`/`linear`/convolution torch runs,
recorded with their shapes, autograd's backward included), the CPU time those products take replayed alone
with the same shapes, and the core's own rate on one large product: what an update would cost if nothing but
its matrix products took time, the ceiling of any speed-up that keeps the network and the batch.

`--paired A B` compares two checkouts of pzasync on a machine shared with other work, where back-to-back runs
drift with the load: it starts one worker process per checkout (each importing pzasync from its own
directory, each with its own buffer filled alike), then for `--rounds` rounds asks each in turn, in
alternating order, for `--updates` timed updates. Each round gives a ratio B/A of updates per second taken
within seconds of each other; the summary gives every round's rates and the median ratio. A checkout from
before pzasync's modules moved into packages (758f8ed, whose default connect_four learner was plain `dqn`,
one per seat) runs too; `--learner-b` gives checkout B another learner.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

ENV = "pettingzoo.classic.connect_four_v3"
DEFAULT_LEARNER = "dqn,gamma=0.9,epsilon_end=0.2,mirror=True"


def old_layout() -> bool:
    """Whether the pzasync imported is one from before its modules moved into packages (such as 758f8ed, the
    code of 2026-11-23): `--paired` can then still time it, with its own module paths."""
    import pathlib

    import pzasync

    return not (pathlib.Path(pzasync.__file__).parent / "core").is_dir()


def filled_buffer(fill: int, seed: int = 0, copies: int = 8):
    """A group buffer with `fill` transitions of random legal connect_four play, `member` and `track` set as
    the actor sets them (`copies` env copies interleaved, each with both seats)."""
    from pzasync import SharedRingBuffer, env_layouts, make_env

    if old_layout():
        from pzasync.collect import run_episodes
        from pzasync.spaces import probe_info_masks
        tracks = {}
    else:
        from pzasync.core.collect import run_episodes
        from pzasync.core.spaces import probe_info_masks
        tracks = {"tracks": 2 * copies}

    env = make_env(ENV)
    layout = env_layouts(env, probe_info_masks(env))["player_0"]
    buffer = SharedRingBuffer.create(layout, 100_000, {"member": "int16", "track": "int32"}, **tracks)
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
    from pzasync.learners import LearnerContext, resolve_learner

    if old_layout():
        from pzasync.cli import parse_learner_spec
        tracks = {}
    else:
        from pzasync.specs import parse_learner_spec
        tracks = {"tracks": 16}
    cls, options = resolve_learner(parse_learner_spec(spec), "players")
    learner = cls(LearnerContext("players", layout, options, "cpu", seed, members=["player_0", "player_1"], **tracks))
    if not hasattr(learner, "sample"):  # before learners sampled for themselves, the learner loop did this
        learner.sample = lambda buffer, rng: buffer.sample(learner.batch_size, rng)
    return learner


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learner", default=DEFAULT_LEARNER)
    parser.add_argument("--updates", type=int, default=1000, help="timed updates per repetition")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--fill", type=int, default=50_000, help="transitions in the buffer")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--autograd", action="store_true",
                        help="DQN's update through autograd even where its update by hand applies (now also the option "
                             "by_hand=False, which --learner-b can give in a paired run)")
    parser.add_argument("--profile", choices=("cprofile", "torch", "parts", "flops"), default=None)
    parser.add_argument("--paired", nargs=2, metavar=("CHECKOUT_A", "CHECKOUT_B"), default=None)
    parser.add_argument("--rounds", type=int, default=10, help="with --paired")
    parser.add_argument("--learner-b", default=None, help="with --paired: checkout B's learner (default --learner)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paired:
        paired(args)
        return

    torch.set_num_threads(args.threads)
    layout, buffer = filled_buffer(args.fill)
    learner = make_learner(args.learner, layout)
    if args.autograd:  # checkouts before the cleanup pass named the fast path `manual`; now `by_hand=False` does it
        learner.manual = learner.by_hand = None
    rng = np.random.default_rng(1)
    try:
        for _ in range(args.warmup):
            learner.update(learner.sample(buffer, rng))
        if args.worker:
            serve(learner, buffer, rng)
            return
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


def serve(learner, buffer, rng) -> None:
    """--paired's worker: for each line "N" on stdin, time N updates and answer with one JSON line."""
    import sys

    print(json.dumps({"ready": True, "pzasync": __import__("pzasync").__file__}), flush=True)
    for line in sys.stdin:
        n = int(line)
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(n):
            learner.update(learner.sample(buffer, rng))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        print(json.dumps({"updates_per_s": n / wall, "updates_per_cpu_s": n / cpu}), flush=True)


def paired(args) -> None:
    import os
    import subprocess
    import sys

    workers = []
    for checkout, spec in zip(args.paired, (args.learner, args.learner_b or args.learner)):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--learner", spec,
                   "--warmup", str(args.warmup), "--fill", str(args.fill), "--threads", str(args.threads)]
        workers.append(subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    ready = [json.loads(w.stdout.readline()) for w in workers]
    rates: list[list[dict]] = [[], []]
    for round_ in range(args.rounds):
        order = (0, 1) if round_ % 2 == 0 else (1, 0)
        for i in order:
            workers[i].stdin.write(f"{args.updates}\n")
            workers[i].stdin.flush()
            rates[i].append(json.loads(workers[i].stdout.readline()))
        print(json.dumps({"round": round_, "a": round(rates[0][-1]["updates_per_s"], 1),
                          "b": round(rates[1][-1]["updates_per_s"], 1),
                          "b_over_a": round(rates[1][-1]["updates_per_s"] / rates[0][-1]["updates_per_s"], 3),
                          "b_over_a_cpu": round(rates[1][-1]["updates_per_cpu_s"] / rates[0][-1]["updates_per_cpu_s"],
                                                3)}), flush=True)
    for w in workers:
        w.stdin.close()
        w.wait()

    def med(i: int, key: str) -> float:
        return round(statistics.median(r[key] for r in rates[i]), 1)

    print(json.dumps({
        "learner": args.learner, "learner_b": args.learner_b or args.learner,
        "updates_per_round": args.updates, "rounds": args.rounds,
        "a": ready[0]["pzasync"], "b": ready[1]["pzasync"],
        "a_median_updates_per_s": med(0, "updates_per_s"), "b_median_updates_per_s": med(1, "updates_per_s"),
        "a_median_updates_per_cpu_s": med(0, "updates_per_cpu_s"),
        "b_median_updates_per_cpu_s": med(1, "updates_per_cpu_s"),
        "median_ratio_b_over_a": round(statistics.median(
            b["updates_per_s"] / a["updates_per_s"] for a, b in zip(*rates)), 3),
        "median_ratio_b_over_a_cpu": round(statistics.median(
            b["updates_per_cpu_s"] / a["updates_per_cpu_s"] for a, b in zip(*rates)), 3),
    }), flush=True)


def profile_parts(learner, buffer, rng, updates: int) -> None:
    """CPU time per update of each part of sample + update, timed in place (each part wrapped, so the parts
    run with each other's caches, as they do in a run): with DQN's update by hand, the two forwards, the
    backward and the Adam step; the rest of `update` is its numpy and bookkeeping."""
    import collections

    spent: dict[str, float] = collections.defaultdict(float)

    def timed(name, f):
        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return f(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start
        return call

    manual = getattr(learner, "manual", None)
    if manual is not None:
        online, target = manual
        online.forward = timed("online forward", online.forward)
        target.forward = timed("target forward", target.forward)
        online.backward = timed("backward", online.backward)
        if hasattr(learner, "_adam_step"):
            learner._adam_step = timed("adam", learner._adam_step)
        else:
            learner.optimizer.step = timed("adam", learner.optimizer.step)
    learner.sample = timed("sample", learner.sample)
    learner.update = timed("update (all)", learner.update)
    start = time.process_time()
    for _ in range(updates):
        learner.update(learner.sample(buffer, rng))
    total = time.process_time() - start
    parts = {name: round(seconds / updates * 1e3, 3) for name, seconds in spent.items()}
    inside = sum(v for k, v in parts.items() if k not in ("sample", "update (all)"))
    parts["update, rest"] = round(parts["update (all)"] - inside, 3)
    print(json.dumps({"ms_per_update_cpu": parts, "total_ms": round(total / updates * 1e3, 3),
                      "pzasync": __import__("pzasync").__file__}), flush=True)


def matmul_shapes(learner, buffer, rng, updates: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of every matrix product `updates` sample + update calls run, in order (a convolution as its
    im2col product)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    shapes: list[tuple[int, int, int]] = []
    aten = torch.ops.aten

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = func.overloadpacket
            if packet in (aten.mm, aten.addmm):
                a, b = (args[0], args[1]) if packet is aten.mm else (args[1], args[2])
                shapes.append((int(a.shape[0]), int(a.shape[1]), int(b.shape[1])))
            elif packet is aten.convolution:
                w = args[1]
                out = func(*args, **(kwargs or {}))
                places = int(out.shape[0]) * int(out[0, 0].numel())
                shapes.append((places, int(w[0].numel()), int(w.shape[0])))
                return out
            return func(*args, **(kwargs or {}))

    with Record():
        for _ in range(updates):
            learner.update(learner.sample(buffer, rng))
    return shapes


def profile_flops(learner, buffer, rng, updates: int) -> None:
    """The update's matrix products: their work, their CPU time replayed alone, and the core's rate."""
    import torch

    shapes = matmul_shapes(learner, buffer, rng, 5)
    per_update = len(shapes) // 5
    shapes = shapes[:per_update]
    flops = sum(2 * m * k * n for m, k, n in shapes)
    operands = [(torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)) for m, k, n in shapes]

    def replay() -> None:
        for a, b, out in operands:
            torch.mm(a, b, out=out)

    def cpu_seconds(f, repeats: int) -> float:
        for _ in range(max(1, repeats // 10)):
            f()
        start = time.process_time()
        for _ in range(repeats):
            f()
        return (time.process_time() - start) / repeats

    products_s = min(cpu_seconds(replay, updates) for _ in range(3))
    big = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.empty(1024, 1024)
    peak_s = min(cpu_seconds(lambda: torch.mm(big[0], big[1], out=big[2]), 20) for _ in range(3))
    start = time.process_time()
    for _ in range(updates):
        learner.update(learner.sample(buffer, rng))
    update_s = (time.process_time() - start) / updates
    print(json.dumps({
        "matrix_products_per_update": per_update,
        "mflop_per_update": round(flops / 1e6, 2),
        "ms_per_update_cpu": round(update_s * 1e3, 3),
        "ms_matrix_products_alone_cpu": round(products_s * 1e3, 3),
        "gflops_of_products_alone": round(flops / products_s / 1e9, 1),
        "gflops_core_1024_sgemm": round(2 * 1024 ** 3 / peak_s / 1e9, 1),
        "updates_per_cpu_s": round(1 / update_s, 1),
        "ceiling_updates_per_cpu_s_products_only": round(1 / products_s, 1),
        "pzasync": __import__("pzasync").__file__}), flush=True)


def profile(kind: str, learner, buffer, rng, updates: int) -> None:
    if kind == "flops":
        profile_flops(learner, buffer, rng, updates)
        return
    if kind == "parts":
        profile_parts(learner, buffer, rng, updates)
        return
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
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(updates):
            with record_function("sample"):
                batch = learner.sample(buffer, rng)
            with record_function("update"):
                learner.update(batch)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


if __name__ == "__main__":
    main()
