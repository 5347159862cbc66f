"""Actors as Ray actors (backend="ray", RunConfig.actors = M): what they cost against local actor processes,
and what crossing a node costs per transition and per policy version (docs/distributed.md, "Scaling model").

    python benchmarks/ray_actors.py --json docs/bench/ray_actors.json

Part 1, one machine, equal M (connect_four, player_0 a DQN learner that never updates, player_1 random, a time
budget; an idle learner, so that the actors alone share the cores): M local
actor processes (`backend="shm"`), M actors of which M-1 are Ray actors on this node writing shared memory
(`backend="ray"`), and M-1 Ray actors on a second simulated node (a `Cluster` on loopback: their rows go
through that node's relay and Ray's object store, the learner stays on the head). Agent steps/s while acting;
configurations interleaved, each trial in a fresh process; medians.

Part 2, the forwarding path per transition, without a run: a node's relay reads a shard in order and packs
chunks (`read_new` + `chunks.pack`), Ray carries a chunk from an actor to the driver (`ray.get` of a call
returning it), the driver unpacks and writes it into its shard (`chunks.unpack` + `write_rows`); microseconds
per transition for each, and bytes per transition, for connect_four's rows (256, 4,096 and 16,384 rows a chunk, and
what `ray_chunk_rows="auto"` chooses) and for rows with pistonball's observation (457 x 120 x 3 bytes; 64 and 16
rows a chunk, and "auto").

Part 3, a simulated cluster (`ray.cluster_utils.Cluster` on loopback: the head runs the driver and the learner,
two worker nodes offer 'actor_node'): 3 actors, one per node, connect_four with a DQN learner; the RunResult's
per-actor and per-node figures and each version's latency from its put to its publication in a worker node's slot.
All simulated nodes share this machine's cores.
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
LEARNERS = {"player_0": ("dqn", {"learning_starts": 1000}), "player_1": "random"}
#: Part 1's learners: the same, never updating, so that the actors alone share the cores (a free-running learner
#: takes whatever CPU the actors leave it: on 2 cores its updates, not the transport, would set the ratio).
IDLE_LEARNERS = {"player_0": ("dqn", {"learning_starts": 10**12}), "player_1": "random"}
CONFIGS = {
    "local_processes": {"backend": "shm", "learner_processes": 1},
    "ray_actors_shm": {"backend": "ray"},
    "ray_actors_other_node": {"backend": "ray", "cluster": True},
}


def _ray_dir() -> str:
    root = tempfile.mkdtemp(prefix="pzb", dir="/tmp")
    os.environ["RAY_TMPDIR"] = root
    return root


def trial(options: dict, actors: int, seconds: float) -> dict:
    """One run in this (fresh) process."""
    from pzasync import AsyncRunner, RunConfig

    root = _ray_dir()
    options = dict(options)
    cluster = None
    try:
        if options.pop("cluster", False):  # actors 1..M-1 on a second (simulated) node, the learner on the head
            import ray
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                                    "resources": {"learner_node": 1}})
            cluster.add_node(num_cpus=actors - 1, resources={"actor_node": actors - 1})
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            options.update(ray_address=cluster.address, ray_learner_resources={"learner_node": 1},
                           ray_actor_pool_resources={"actor_node": 1})
        runner = AsyncRunner(C4, IDLE_LEARNERS, RunConfig(seed=0, actors=actors, **options))
        result = runner.run(seconds=seconds)
        pool = runner.actor_pool
        received = getattr(pool, "rows_received", 0)
        return {"agent_steps_per_s": result.actor_steps_per_second, "agent_steps": result.agent_steps,
                "startup_s": result.startup_seconds,
                "dropped": sum(r.transitions_dropped for r in result.agents.values()),
                "learner_updates": result.agents["player_0"].updates,
                "learner_cpu_seconds": result.agents["player_0"].learner_cpu_seconds,
                "bytes_per_transition": (pool.bytes_received / received) if received else None,
                "actor_nodes": result.actor_nodes}
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def forwarding(setting: int | str, obs_shape: tuple[int, ...], repeats: int) -> dict:
    """Part 2: microseconds per transition of each step of the forwarding path, and bytes per transition, with
    chunks of `setting` rows (`ray_chunk_rows`: a number, or "auto", what the run would choose)."""
    import numpy as np
    import ray
    from gymnasium import spaces

    from pzasync.backends.ray.chunks import chunk_rows as rows_for
    from pzasync.backends.ray.chunks import nbytes, pack, unpack
    from pzasync.core.spaces import agent_layout
    from pzasync.core.transitions import Transition
    from pzasync.transport.buffer import SharedRingBuffer, transition_fields

    dtype = np.float32 if len(obs_shape) == 1 else np.uint8
    layout = agent_layout("a", spaces.Box(0, 255, obs_shape, dtype), spaces.Discrete(7))
    extras = {"track": "int32"}
    chunk_rows = rows_for(setting, sum(f.nbytes for f in transition_fields(layout, extras)))
    capacity = max(4 * chunk_rows, 64)
    source = SharedRingBuffer.create(layout, capacity, extras, obs_storage="auto", tracks=4)
    target = SharedRingBuffer.create(layout, capacity, extras, obs_storage="auto", tracks=4)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, obs_shape).astype(dtype) for _ in range(chunk_rows + 8)]

    def fill() -> None:  # 4 tracks, each a run of turns: obs is the track's previous next_obs
        rows = []
        for i in range(chunk_rows):
            track, turn = i % 4, i // 4
            rows.append(Transition("a", frames[turn + track], i % 7, 1.0, frames[turn + track + 1], False, False,
                                   None, None, {"policy_version": 1, "track": track}))
        source.write_batch(rows)

    read_s = pack_s = unpack_s = write_s = 0.0
    chunk = None
    for _ in range(repeats):
        fill()
        t0 = time.perf_counter()
        rows = source.read_new(chunk_rows)
        t1 = time.perf_counter()
        chunk = pack(rows)
        t2 = time.perf_counter()
        back = unpack(chunk)
        t3 = time.perf_counter()
        target.write_rows(back)
        t4 = time.perf_counter()
        read_s, pack_s, unpack_s, write_s = read_s + t1 - t0, pack_s + t2 - t1, unpack_s + t3 - t2, write_s + t4 - t3

    @ray.remote
    class Holder:
        def __init__(self, chunk):
            self.chunk = chunk

        def get(self):
            return self.chunk

    holder = Holder.remote(chunk)
    ray.get(holder.get.remote())
    t0 = time.perf_counter()
    for _ in range(repeats):
        ray.get(holder.get.remote())
    ray_s = time.perf_counter() - t0
    ray.kill(holder)
    for b in (source, target):
        b.close()
        b.unlink()
    n = repeats * chunk_rows
    per = {"relay_read_us": read_s / n * 1e6, "relay_pack_us": pack_s / n * 1e6, "ray_transfer_us": ray_s / n * 1e6,
           "driver_unpack_us": unpack_s / n * 1e6, "driver_write_us": write_s / n * 1e6}
    per["relay_us"] = per["relay_read_us"] + per["relay_pack_us"]
    per["driver_us"] = per["ray_transfer_us"] + per["driver_unpack_us"] + per["driver_write_us"]
    assert chunk is not None
    whole = unpack(chunk)
    return {"chunk_setting": setting, "chunk_rows": chunk_rows,
            "obs_bytes": int(np.prod(obs_shape) * np.dtype(dtype).itemsize),
            "bytes_per_transition": nbytes(chunk) / chunk_rows,
            "bytes_per_transition_obs_twice": nbytes({"rows": whole}) / chunk_rows, **per}


def cluster_run(seconds: float) -> dict:
    """Part 3: three actors, one on each simulated node; the per-actor and per-node figures."""
    import ray
    from ray.cluster_utils import Cluster

    from pzasync import AsyncRunner, RunConfig

    root = _ray_dir()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                            "resources": {"learner_node": 1}})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"actor_node": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        config = RunConfig(seed=0, backend="ray", ray_address=cluster.address, actors=3,
                           ray_learner_resources={"learner_node": 1}, ray_actor_pool_resources={"actor_node": 1})
        runner = AsyncRunner(C4, LEARNERS, config)
        result = runner.run(seconds=seconds)
        pool = runner.actor_pool
        latency = {node[:12]: {"versions": len(v), "median_ms": statistics.median(v) * 1e3,
                               "p95_ms": sorted(v)[int(0.95 * (len(v) - 1))] * 1e3}
                   for node, v in pool.version_latency.items() if v}
        agent = result.agents["player_0"]
        return {"agent_steps": result.agent_steps, "agent_steps_per_s": result.actor_steps_per_second,
                "actor_nodes": result.actor_nodes, "nodes": pool.node_figures(result.actor_nodes),
                "version_latency": latency, "bytes_per_transition": pool.bytes_received / max(1, pool.rows_received),
                "player_0": {"updates": agent.updates, "published_version": agent.published_version,
                             "transitions_written": agent.transitions_written,
                             "transitions_dropped": agent.transitions_dropped,
                             "policy_lag_mean": agent.policy_lag_mean}}
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


#: The model's assumptions: a node's cores, the nodes modelled, the learner node's network (bits/s / 8, less 6%
#: for policy versions: one of P <= 10 MB a second to each of 8 nodes), and each env's actor cost per agent step
#: on one core (env step + its share of a batched forward), as measured on this machine (docs/benchmarks.md).
NODE_CORES = 16
NODES = [1, 2, 4, 8, 16, 32, 64]
BANDWIDTH = {"10GbE": 0.94 * 1.25e9, "25GbE": 0.94 * 3.125e9}
ENVS = {
    "connect_four": {"actor_us": 1e6 / 9_244, "obs_bytes": 84,
                     "source": "the actor, learners idle: 9,244 agent-steps/s (benchmarks.md, The cleanup pass)"},
    "pursuit_v5": {"actor_us": 1e6 / 2_707, "obs_bytes": 7 * 7 * 3 * 4,
                   "source": "parallel API, batched forwards: 2,707 agent-steps/s (benchmarks.md, parallel path)"},
    "pistonball_v6": {"actor_us": 1e6 / 887, "obs_bytes": 457 * 120 * 3,
                      "source": "parallel API, batched forwards: 887 agent-steps/s (benchmarks.md, parallel path)"},
    "an env of 50 us a step (connect_four's rows)": {"actor_us": 50.0, "obs_bytes": 84, "source": "the target"},
}
#: DQN updates/s on one CPU thread, batch 64 (benchmarks.md, The cleanup pass), and a replay ratio.
LEARNER_UPDATES_PER_S, REPLAY_RATIO = 545.0, 0.25


def model(forwarding_rows: list[dict]) -> dict:
    """Agent-steps/s against nodes from the measured costs (docs/distributed.md, "Scaling model").

    Per transition, the relay's CPU on the actor's node and the driver's on the learner's node are each
    a + beta * bytes, fitted on connect_four's rows and pistonball's, each with the chunks a run chooses
    (`ray_chunk_rows="auto"`).
    R_node(N) = min((cores - 1) / t_actor, 1 / t_relay)  (a core left to the relay, which is one thread)
    R(N) = min(N * R_node, 1 / t_driver, bandwidth / bytes)  (the driver's pool is one thread; one link in)
    efficiency(N) = R(N) / (N * R_node); the bend is the first N where it falls below 0.8."""
    small = next(f for f in forwarding_rows if f["obs_bytes"] == 84 and f.get("chunk_setting") == "auto")
    big = next(f for f in forwarding_rows if f["obs_bytes"] > 100_000 and f.get("chunk_setting") == "auto")
    fits = {}
    for side in ("relay_us", "driver_us"):
        beta = (big[side] - small[side]) / (big["bytes_per_transition"] - small["bytes_per_transition"])
        fits[side] = (small[side] - beta * small["bytes_per_transition"], beta)
    overhead = small["bytes_per_transition"] - small["obs_bytes"]
    out: dict = {"inputs": {"node_cores": NODE_CORES, "chunk_rows": {"connect_four": small["chunk_rows"],
                                                                        "pistonball": big["chunk_rows"]},
                            "bandwidth_bytes_per_s": BANDWIDTH,
                            "relay_us": {"a": fits["relay_us"][0], "beta_per_byte": fits["relay_us"][1]},
                            "driver_us": {"a": fits["driver_us"][0], "beta_per_byte": fits["driver_us"][1]},
                            "learner_updates_per_s_per_core": LEARNER_UPDATES_PER_S, "replay_ratio": REPLAY_RATIO,
                            "envs": ENVS},
                 "envs": {}}
    for name, env in ENVS.items():
        size = (big["bytes_per_transition"] if env["obs_bytes"] == big["obs_bytes"]
                else env["obs_bytes"] + overhead)
        t_relay = fits["relay_us"][0] + fits["relay_us"][1] * size
        t_driver = fits["driver_us"][0] + fits["driver_us"][1] * size
        per_node = min((NODE_CORES - 1) / env["actor_us"], 1 / t_relay) * 1e6
        rows = []
        for link, bandwidth in BANDWIDTH.items():
            for n in NODES:
                bounds = {"actors": n * per_node, "driver ingest": 1e6 / t_driver, "network": bandwidth / size}
                rate = min(bounds.values())
                rows.append({"link": link, "nodes": n, "agent_steps_per_s": rate, "efficiency": rate / (n * per_node),
                             "bound": min(bounds, key=bounds.get),
                             "learner_cores_needed": rate * REPLAY_RATIO / LEARNER_UPDATES_PER_S})
        bends = {link: next((r["nodes"] for r in rows if r["link"] == link and r["efficiency"] < 0.8), None)
                 for link in BANDWIDTH}
        out["envs"][name] = {"bytes_per_transition": size, "relay_us": t_relay, "driver_us": t_driver,
                             "per_node_agent_steps_per_s": per_node,
                             "relay_bound_per_node": per_node < (NODE_CORES - 1) / env["actor_us"] * 1e6,
                             "first_nodes_below_0_8": bends, "rows": rows}
    return out


def _fresh(kind: str, spec: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--trial", json.dumps({"kind": kind, **spec})],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cluster-seconds", type=float, default=20.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--equal-m-only", default=None, metavar="JSON",
                        help="measure part 1 again, into an earlier report")
    parser.add_argument("--forwarding-only", default=None, metavar="JSON",
                        help="measure part 2 again and recompute the model, into an earlier report")
    parser.add_argument("--model-only", default=None, metavar="JSON",
                        help="recompute the model from an earlier report's measurements, written back into it")
    parser.add_argument("--trial", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.forwarding_only:
        with open(args.forwarding_only) as f:
            report = json.load(f)
        report["forwarding"] = _fresh("forwarding", {})
        args.model_only = args.forwarding_only
        with open(args.forwarding_only, "w") as f:
            json.dump(report, f, indent=2)
    if args.model_only:
        with open(args.model_only) as f:
            report = json.load(f)
        report["model"] = model(report["forwarding"])
        _print_model(report["model"])
        with open(args.model_only, "w") as f:
            json.dump(report, f, indent=2)
        return
    if args.trial:
        spec = json.loads(args.trial)
        if spec["kind"] == "run":
            print(json.dumps(trial(spec["options"], spec["actors"], spec["seconds"])))
        elif spec["kind"] == "forwarding":
            import ray

            root = _ray_dir()
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            try:
                print(json.dumps([forwarding(256, (6, 7, 2), 400), forwarding(4096, (6, 7, 2), 40),
                                  forwarding(16384, (6, 7, 2), 12), forwarding("auto", (6, 7, 2), 12),
                                  forwarding(64, (457, 120, 3), 30), forwarding(16, (457, 120, 3), 100),
                                  forwarding("auto", (457, 120, 3), 100)]))
            finally:
                ray.shutdown()
                shutil.rmtree(root, ignore_errors=True)
        else:
            print(json.dumps(cluster_run(spec["seconds"])))
        return

    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    report: dict = {"env": C4, "actors": args.actors, "seconds": args.seconds, "repeats": args.repeats,
                    "cores": os.cpu_count(), "loadavg_before": load_before, "equal_m": {}}
    if args.equal_m_only:
        with open(args.equal_m_only) as f:
            report = {**json.load(f), **{k: v for k, v in report.items() if k != "loadavg_before"},
                      "equal_m_loadavg_before": load_before}
    rows: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for rep in range(args.repeats):
        for name, options in CONFIGS.items():
            rows[name].append(_fresh("run", {"options": options, "actors": args.actors, "seconds": args.seconds}))
            print(f"repeat {rep} {name}: {rows[name][-1]['agent_steps_per_s']:,.0f} agent steps/s", flush=True)
    base = statistics.median(r["agent_steps_per_s"] for r in rows["local_processes"])
    for name in CONFIGS:
        median = statistics.median(r["agent_steps_per_s"] for r in rows[name])
        report["equal_m"][name] = {"agent_steps_per_s": median, "ratio_to_local_processes": median / base,
                                   "runs": rows[name]}
        updates = statistics.median(r["learner_updates"] for r in rows[name])
        print(f"{name:<26}{median:>10,.0f} steps/s  {median / base:.2f}x local processes; "
              f"learner updates {updates:,.0f}")
    if args.equal_m_only:
        with open("/proc/loadavg") as f:
            report["equal_m_loadavg_after"] = f.read().split()[:3]
        with open(args.equal_m_only, "w") as f:
            json.dump(report, f, indent=2)
        return
    report["forwarding"] = _fresh("forwarding", {})
    for f in report["forwarding"]:
        print(f"forwarding, {f['obs_bytes']:,} B observations, {f['chunk_rows']} rows a chunk: "
              f"{f['bytes_per_transition']:,.0f} B/transition ({f['bytes_per_transition_obs_twice']:,.0f} with obs "
              f"twice); relay {f['relay_us']:.2f} us, driver {f['driver_us']:.2f} us "
              f"(of which Ray {f['ray_transfer_us']:.2f}) per transition", flush=True)
    report["cluster"] = _fresh("cluster", {"seconds": args.cluster_seconds})
    c = report["cluster"]
    print(f"cluster: {c['agent_steps_per_s']:,.0f} steps/s; per node: "
          + "; ".join(f"{n['node'][:8]} actors {n['actors']} {n['steps_per_second']:,.0f}/s" for n in c["nodes"])
          + f"; version latency {c['version_latency']}")
    report["model"] = model(report["forwarding"])
    _print_model(report["model"])
    with open("/proc/loadavg") as f:
        report["loadavg_after"] = f.read().split()[:3]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


def _print_model(m: dict) -> None:
    for name, env in m["envs"].items():
        line = " ".join(f"{r['nodes']}:{r['agent_steps_per_s'] / 1e3:,.0f}k({r['efficiency']:.2f},{r['bound'][:6]})"
                        for r in env["rows"] if r["link"] == "10GbE")
        print(f"{name}: {env['bytes_per_transition']:,.0f} B, node {env['per_node_agent_steps_per_s']:,.0f}/s, "
              f"below 0.8 from {env['first_nodes_below_0_8']} nodes; 10GbE: {line}")


if __name__ == "__main__":
    main()
