"""Benchmark the async runtime against the sequential baseline on the same work, from Python.

Run: python examples/benchmark.py [--env ENV] [--steps N] [--seeds K] [--plot FILE]

The same as `pzasync bench`, driven through `pzasync.bench.harness.run_bench`: the bare loops (the env's own limit,
and with the policy forwards), the sequential runner, and the async runner at the same replay ratio in both
publish modes, each trial in a fresh process. The headline is the ratios, which carry across machines.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    from pzasync.bench.harness import BenchSettings, run_bench
    from pzasync.bench.report import headline_lines, plot_report

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="pettingzoo.classic.connect_four_v3")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    settings = BenchSettings(env=args.env, learners="dqn", agent_steps=args.steps, seeds=args.seeds,
                             configs=("bare_random", "bare_policy", "sequential", "async_double_buffer",
                                      "async_snapshot"))
    report = run_bench(settings, on_trial_start=lambda i, t: print(f"trial {i + 1}: {t.config}, seed {t.seed}"))
    for config, s in report["summary"].items():
        print(f"{config:22s} {s['agent_steps_per_s']['median']:10,.0f} agent steps/s")
    for line in headline_lines(report):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot:
        print("plot:", plot_report(report, args.plot))


if __name__ == "__main__":
    main()
