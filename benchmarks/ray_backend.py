"""The Ray backend against the shared-memory backend, and what crossing a node costs (docs/benchmarks.md,
"The Ray backend").

    python benchmarks/ray_backend.py --json docs/bench/ray_backend.json --plot docs/bench/ray_backend.png

Part 1, one machine (connect_four, player_0 one DQN learner, player_1 random, the same agent steps): the
async runner with `backend="shm"`, with `backend="ray"` (the learner lands on the actor's node and uses
shared memory), and with `backend="ray", ray_transport="object_store"` (every transition and policy goes
through Ray's object store, as for a learner on another node). Acting throughput, start-up, policy lag and
peak RSS side by side; configurations interleaved, each trial in a fresh process.

Part 2, a simulated cluster (`ray.cluster_utils.Cluster` on loopback: the head runs the actor, learners are
placed on worker nodes through a custom resource): 1 or 2 DQN learners on 1 or 2 worker nodes. The extra
cost per transition is (1 / throughput) - (1 / throughput of the same learners on shared memory), in
microseconds of the actor's time. All simulated nodes share this machine's cores, so these figures include
the CPU the extra processes take; on real nodes that CPU is elsewhere and only the transport remains.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

C4 = "pettingzoo.classic.connect_four_v3"
ONE_MACHINE = {
    "shm": {"backend": "shm"},
    "ray": {"backend": "ray"},
    "ray_object_store": {"backend": "ray", "ray_transport": "object_store"},
}


def learners_for(n: int) -> dict:
    both = {"player_0": ("dqn", {"learning_starts": 1000}), "player_1": ("dqn", {"learning_starts": 1000})}
    return both if n == 2 else {"player_0": both["player_0"], "player_1": "random"}


def trial(options: dict, steps: int, learners: int, cluster_workers: int = 0) -> dict:
    """One run in this (fresh) process; returns its figures."""
    import ray

    from pzasync import AsyncRunner, RunConfig

    root = tempfile.mkdtemp(prefix="pzb", dir="/tmp")
    os.environ["RAY_TMPDIR"] = os.environ["HOME"] = root
    cluster = None
    try:
        extra = {}
        if cluster_workers:
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
            for _ in range(cluster_workers):
                cluster.add_node(num_cpus=2, resources={"learner_node": 2})
            cluster.wait_for_nodes()
            extra = {"ray_address": cluster.address, "ray_learner_resources": {"learner_node": 1}}
        start = time.monotonic()
        result = AsyncRunner(C4, learners_for(learners), RunConfig(seed=0, **options, **extra)).run(
            agent_steps=steps)
        wall = time.monotonic() - start
        learning = [r for r in result.agents.values() if r.learner == "dqn"]
        return {
            "agent_steps_per_s": result.actor_steps_per_second, "startup_s": result.startup_seconds,
            "wall_s": wall, "policy_lag_mean": statistics.mean(r.policy_lag_mean for r in learning),
            "policy_lag_p95": max(r.policy_lag_p95 for r in learning),
            "updates": sum(r.updates for r in learning), "dropped": sum(r.transitions_dropped for r in learning),
            "actor_rss_mb": result.process_peak_rss_mb,
            "learner_rss_mb": sum(r.learner_peak_rss_mb or 0 for r in learning),
            "transports": sorted({r.learner_transport or "shm" for r in learning}),
            "nodes": len({r.learner_node for r in learning}),
        }
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def run_trial(options: dict, steps: int, learners: int, workers: int) -> dict:
    spec = json.dumps({"options": options, "steps": steps, "learners": learners, "workers": workers})
    out = subprocess.run([sys.executable, __file__, "--trial", spec], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(rows: list[dict]) -> dict:
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float))]
    return {k: statistics.median(r[k] for r in rows) for k in keys} | {"transports": rows[0]["transports"],
                                                                       "runs": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cluster-steps", type=int, default=20_000)
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--trial", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        spec = json.loads(args.trial)
        print(json.dumps(trial(spec["options"], spec["steps"], spec["learners"], spec["workers"])))
        return

    report: dict = {"env": C4, "steps": args.steps, "repeats": args.repeats, "cores": os.cpu_count(),
                    "one_machine": {}, "cluster": {}}
    rows: dict[str, list[dict]] = {name: [] for name in ONE_MACHINE}
    for rep in range(args.repeats):
        for name, options in ONE_MACHINE.items():
            rows[name].append(run_trial(options, args.steps, 1, 0))
            print(f"repeat {rep} {name}: {rows[name][-1]['agent_steps_per_s']:,.0f} agent steps/s", flush=True)
    for name in ONE_MACHINE:
        report["one_machine"][name] = summarise(rows[name]) | {"raw": rows[name]}
    base = report["one_machine"]["shm"]["agent_steps_per_s"]
    print(f"\n{'config':<18}{'steps/s':>10}{'vs shm':>8}{'start s':>9}{'lag mean':>10}{'lag p95':>9}"
          f"{'actor MB':>10}{'learner MB':>11}")
    for name, s in report["one_machine"].items():
        print(f"{name:<18}{s['agent_steps_per_s']:>10,.0f}{s['agent_steps_per_s'] / base:>8.2f}{s['startup_s']:>9.1f}"
              f"{s['policy_lag_mean']:>10.1f}{s['policy_lag_p95']:>9.1f}{s['actor_rss_mb']:>10.0f}"
              f"{s['learner_rss_mb']:>11.0f}")

    if not args.skip_cluster:
        for learners in (1, 2):
            local = run_trial({"backend": "shm"}, args.cluster_steps, learners, 0)
            for workers in (1, 2):
                remote = run_trial({"backend": "ray"}, args.cluster_steps, learners, workers)
                extra_us = (1 / remote["agent_steps_per_s"] - 1 / local["agent_steps_per_s"]) * 1e6
                key = f"{learners} learner(s), {workers} worker node(s)"
                report["cluster"][key] = {"learners": learners, "workers": workers, "local": local, "remote": remote,
                                          "extra_us_per_transition": extra_us}
                print(f"{key}: {remote['agent_steps_per_s']:,.0f} vs {local['agent_steps_per_s']:,.0f} steps/s on "
                      f"shm; +{extra_us:.0f} us per transition; learners on {remote['nodes']} node(s), "
                      f"{remote['transports']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot:
        plot(report, args.plot)


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = list(report["one_machine"])
    axes[0].bar(names, [report["one_machine"][n]["agent_steps_per_s"] for n in names], color="#4477aa")
    axes[0].set_ylabel("agent steps / s (acting)")
    axes[0].set_title("one machine: connect_four, 1 DQN learner")
    if report["cluster"]:
        keys = list(report["cluster"])
        axes[1].bar(range(len(keys)), [report["cluster"][k]["extra_us_per_transition"] for k in keys], color="#cc6677")
        axes[1].set_xticks(range(len(keys)), [k.replace(", ", "\n") for k in keys], fontsize=8)
        axes[1].set_ylabel("extra actor µs per transition vs shm")
        axes[1].set_title("learners on other (simulated) nodes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
