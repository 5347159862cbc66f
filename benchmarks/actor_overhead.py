"""Where the actor's time per decision goes: env, policy forward, and the actor's own work (issue 38, item 1).

    taskset -c 1 python benchmarks/actor_overhead.py [--copies 1,8,16] [--workers 0] [--steps 20000] [--paced]
    taskset -c 1 python benchmarks/actor_overhead.py --copies 1 --profile      # cProfile of the actor's run
    PROFILE_FILTER=pzasync PROFILE_LINES=40 taskset -c 1 python benchmarks/actor_overhead.py --profile   # its rows
    py-spy record --format raw -o stacks.txt -- python benchmarks/actor_overhead.py --copies 1 --only-run
    python benchmarks/spy_categories.py stacks.txt --us-per-step 300           # own work by function

One process, connect_four: `player_0` acts with the default DQN network (exploring, learning never starts),
`player_1` plays random legal moves, as in `pzasync bench ... --learner-for player_1=random`; every
transition is written to the run's shared-memory buffers. For each number of env copies, per agent step
(medians of `--repeats` runs of `--steps`):

- `actor_us`: `Actor.run` as a run uses it, nothing wrapped;
- `env_us`, `forward_us`: in further runs, the time inside the env (`step`, `reset`, the `last` reader and
  PettingZoo's turn iterator) and inside each policy's `act` (the forward, its exploration and tensor
  conversions), each call wrapped in a timer;
- `own_us`: those runs' total minus env, forward and the timers' own cost (`wrapper_cost`, per wrapped
  call): the actor's own work per decision (rounds, stepper, transition assembly, buffer writes, counters).

With env workers the envs are stepped elsewhere, so `env_us` stays 0 and `own_us` includes waiting for them.
Prints one JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

ENV = "pettingzoo.classic.connect_four_v3"


def build(copies: int, workers: int, paced: bool = False):
    from pzasync.config import RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.runtime.actor import acting_agents, build_actor
    from pzasync.runtime.plan import RunPlan

    config = RunConfig(envs_per_actor=copies, env_workers=workers, replay_ratio=0.25 if paced else None, progress=False,
                       out_dir=None, check_rewards=True)
    plan = RunPlan(EnvSpec.of(ENV), {"player_0": ("dqn", {"learning_starts": 10**15}), "player_1": "random"},
                   config)
    plan.allocate()
    acting = acting_agents(plan)
    return plan, build_actor(plan, acting, plan.stats, paced=paced)


class Clock:
    """Seconds spent inside wrapped calls, by kind, and how many calls were wrapped."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls = 0

    def wrap(self, kind: str, fn):
        seconds = self.seconds
        seconds.setdefault(kind, 0.0)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[kind] += time.perf_counter() - start
                self.calls += 1

        return timed


def wrapper_cost(calls: int = 200_000) -> float:
    """Seconds one `Clock.wrap` adds to a call, beyond the call (subtracted from the actor's total)."""
    def noop():
        return None

    timed = Clock().wrap("x", noop)
    best = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            timed()
        wrapped = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(calls):
            noop()
        best.append((wrapped - (time.perf_counter() - start)) / calls)
    return statistics.median(best)


class TimedTurns:
    """PettingZoo's turn iterator (`env.agent_iter()`, which reads `env.agents` through the wrappers at every
    turn) with each `next` timed as the env's."""

    def __init__(self, clock: Clock, turns) -> None:
        self.clock, self.turns = clock, turns

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        try:
            return next(self.turns)
        finally:
            self.clock.seconds["env"] += time.perf_counter() - start
            self.clock.calls += 1


def timed_turns(clock: Clock, env):
    def agent_iter(max_iter: int = 2**63):
        return TimedTurns(clock, iter(type(env).agent_iter(env, max_iter)))

    return agent_iter


def timed_run(actor, steps: int, seed: int) -> dict:
    """One `Actor.run` of `steps` decisions with the env's step/reset/last and each policy's act timed."""
    import pzasync.core.stepper as stepper_module

    clock = Clock()
    envs = getattr(actor.factory, "envs", [])
    for env in envs:
        env.step = clock.wrap("env", type(env).step.__get__(env))
        env.reset = clock.wrap("env", type(env).reset.__get__(env))
        env.agent_iter = timed_turns(clock, env)
    original_reader = getattr(stepper_module, "last_reader", None)  # checkouts before issue 54 read last() so
    if original_reader is not None:
        stepper_module.last_reader = lambda env: clock.wrap("env", original_reader(env))
    else:
        for env in envs:
            env.last = clock.wrap("env", type(env).last.__get__(env))
    policies = {id(a.policy): a.policy for a in actor.agents.values()}
    for policy in policies.values():
        policy.act = clock.wrap("forward", type(policy).act.__get__(policy))
    try:
        start, start_cpu = time.perf_counter(), time.process_time()
        done = actor.run(agent_steps=steps, seed=seed, keep_going=lambda: True, on_episode=lambda s: None)
        total, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    finally:
        if original_reader is not None:
            stepper_module.last_reader = original_reader
        for env in envs:
            del env.step, env.reset, env.agent_iter
            env.__dict__.pop("last", None)
        for policy in policies.values():
            del policy.act
    return {"total": total / done, "cpu": cpu / done, "calls": clock.calls / done,
            **{kind: seconds / done for kind, seconds in clock.seconds.items()}}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", default="1,8,16")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paired", nargs=2, metavar=("CHECKOUT_A", "CHECKOUT_B"), default=None,
                        help="compare two checkouts: one worker process each, timed runs alternating in rounds")
    parser.add_argument("--rounds", type=int, default=8, help="with --paired")
    parser.add_argument("--paced", action="store_true",
                        help="as the async runner's actor under the bench's replay ratio 0.25 (its lead bound is "
                             "asked for, never reached: the learner never starts)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="cProfile one run (per copies) instead")
    parser.add_argument("--only-run", action="store_true",
                        help="just one plain run of --steps per copies (for a sampling profiler outside)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.paired:
        paired(args)
        return
    per_wrap = wrapper_cost()
    if args.worker:
        serve(int(args.copies), args.workers, args.steps, per_wrap, args.paced)
        return
    for copies in (int(c) for c in args.copies.split(",")):
        plan, actor = build(copies, args.workers, args.paced)
        try:
            actor.run(agent_steps=args.steps // 4, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
            if args.only_run:
                actor.run(agent_steps=args.steps, seed=7, keep_going=lambda: True, on_episode=lambda s: None)
                continue
            if args.profile:
                import cProfile
                import pstats

                profiler = cProfile.Profile()
                profiler.enable()
                actor.run(agent_steps=args.steps, seed=7, keep_going=lambda: True, on_episode=lambda s: None)
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(
                    os.environ.get("PROFILE_FILTER", ""), int(os.environ.get("PROFILE_LINES", "35")))
                continue
            plain = []
            for r in range(args.repeats):  # untimed parts: the actor's rate as a run sees it
                start = time.perf_counter()
                done = actor.run(agent_steps=args.steps, seed=100 + r, keep_going=lambda: True,
                                 on_episode=lambda s: None)
                plain.append((time.perf_counter() - start) / done)
            runs = [timed_run(actor, args.steps, 200 + r) for r in range(args.repeats)]

            def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                return statistics.median(r.get(key, 0.0) for r in runs)

            own = [r["total"] - r.get("env", 0.0) - r.get("forward", 0.0) - r["calls"] * per_wrap for r in runs]
            print(json.dumps({
                "copies": copies, "env_workers": args.workers,
                "actor_us": round(statistics.median(plain) * 1e6, 2),
                "actor_steps_per_s": round(1 / statistics.median(plain)),
                "timed_run_us": round(med("total") * 1e6, 2), "env_us": round(med("env") * 1e6, 2),
                "forward_us": round(med("forward") * 1e6, 2), "own_us": round(statistics.median(own) * 1e6, 2),
                "own_us_min_max": [round(min(own) * 1e6, 2), round(max(own) * 1e6, 2)],
                "wrapped_calls_per_step": round(med("calls"), 2), "per_wrap_us": round(per_wrap * 1e6, 3),
                "pzasync": __import__("pzasync").__file__,
            }), flush=True)
        finally:
            actor.close()
            plan.release()


def serve(copies: int, workers: int, steps: int, per_wrap: float, paced: bool) -> None:
    """--paired's worker: for each line "SEED" on stdin, one timed run; answers one JSON line."""
    import sys

    plan, actor = build(copies, workers, paced)
    try:
        actor.run(agent_steps=steps // 4, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
        print(json.dumps({"ready": True, "pzasync": __import__("pzasync").__file__}), flush=True)
        for line in sys.stdin:
            r = timed_run(actor, steps, int(line))
            r["own"] = r["total"] - r.get("env", 0.0) - r.get("forward", 0.0) - r["calls"] * per_wrap
            print(json.dumps(r), flush=True)
    finally:
        actor.close()
        plan.release()


def paired(args) -> None:
    """Two checkouts' actors side by side: each round asks each worker (alternating who goes first) for one
    timed run, so both see the same machine within seconds; per-round differences and medians."""
    import os
    import subprocess
    import sys

    for copies in (int(c) for c in args.copies.split(",")):
        workers = []
        for checkout in args.paired:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
            command = [sys.executable, os.path.abspath(__file__), "--worker", "--copies", str(copies),
                       "--workers", str(args.workers), "--steps", str(args.steps)] + (["--paced"] if args.paced else [])
            workers.append(subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True))
        ready = [json.loads(w.stdout.readline()) for w in workers]
        runs: list[list[dict]] = [[], []]
        for round_ in range(args.rounds):
            for i in ((0, 1) if round_ % 2 == 0 else (1, 0)):
                workers[i].stdin.write(f"{1000 + round_}\n")
                workers[i].stdin.flush()
                runs[i].append(json.loads(workers[i].stdout.readline()))
        for w in workers:
            w.stdin.close()
            w.wait()

        def med(i: int, key: str, runs: list[list[dict[str, float]]] = runs) -> float:
            return round(statistics.median(r.get(key, 0.0) for r in runs[i]) * 1e6, 2)

        print(json.dumps({
            "copies": copies, "env_workers": args.workers, "rounds": args.rounds, "steps": args.steps,
            "a": ready[0]["pzasync"], "b": ready[1]["pzasync"],
            **{f"{side}_{key}_us": med(i, key) for i, side in enumerate("ab")
               for key in ("total", "env", "forward", "own")},
            "own_b_minus_a_us_per_round": [round((b["own"] - a["own"]) * 1e6, 2) for a, b in zip(*runs)],
            "median_own_b_minus_a_us": round(statistics.median(
                (b["own"] - a["own"]) * 1e6 for a, b in zip(*runs)), 2),
            "median_total_b_over_a": round(statistics.median(b["total"] / a["total"] for a, b in zip(*runs)), 3),
            # CPU time per decision (this process, every thread): steadier than the wall clock on a shared core,
            # and env and forward cost both checkouts alike, so the difference is their own work's
            "median_cpu_b_minus_a_us": round(statistics.median(
                (b["cpu"] - a["cpu"]) * 1e6 for a, b in zip(*runs)), 2),
            "cpu_a_b_us": [med(0, "cpu"), med(1, "cpu")],
        }), flush=True)


if __name__ == "__main__":
    main()
