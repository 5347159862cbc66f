"""Per-agent-step cost of remote env copies (docs/remote.md, "Speed") against the same env stepped in process.

Both sides drive their copies through the `EnvCopies` interface with the same trivial policy (the first legal
action), so what differs is only where the env runs: in this process (`LocalEnvs`), or in a server process
reached over a Unix socket or TCP loopback, at 1, 8 and 32 instances per connection (one connection, so one
frame per group of instances). Then the actor itself, with a batched numpy policy, on 16 copies in process
and remote. Each figure is the median of `--repeats` runs.

    python benchmarks/remote_overhead.py [--env pettingzoo.classic.connect_four_v3] [--steps 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pzasync.core.environments import EnvSpec, make_env  # noqa: E402
from pzasync.core.spaces import env_layouts, probe_info_masks  # noqa: E402
from pzasync.runtime.copies.local import LocalEnvs  # noqa: E402
from pzasync.runtime.copies.remote import RemoteEnvs  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(factory, layouts, steps: int, server_pid: int | None = None, cpu: list | None = None) -> float:
    """Seconds per agent step of `steps` decisions answered with the first legal action; with `cpu`, appends
    the CPU seconds per step of this process and of the server (`server_pid`), which a machine whose other
    core is busy does not blur as it blurs wall time."""
    copies = factory.open(0, layouts, emit=lambda t, k: None, on_episode=lambda s: None, on_start=lambda k: None)
    taken = 0
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        server_start = cpu_seconds(server_pid) if server_pid else 0.0
        copies.start(True)
        while (ready := copies.next_ready()) is not None:
            group, pending = ready
            if not pending:
                continue
            more = taken < steps
            answered = [(d, np.int64(d.mask.argmax()) if d.mask is not None else np.int64(0), {}) for d in pending] \
                if more else []
            taken += len(answered)
            copies.submit(group, answered, [] if more else [d.copy for d in pending], taken < steps)
        copies.finish()
        wall = (time.perf_counter() - start) / taken
        if cpu is not None:
            cpu.append(((time.process_time() - cpu_start) / taken,
                        (cpu_seconds(server_pid) - server_start) / taken if server_pid else 0.0))
        return wall
    finally:
        copies.close()


def start_server(env: str, address: str, instances: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "pzasync.cli", "serve", env, "--address", address,
                             "--instances", str(instances)], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    found = re.search(r" at (\S+) ", line)
    if not found:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line}{proc.stderr.read()}")
    return proc, found.group(1)


def actor_steps_per_second(factory, env_id: str, steps: int) -> float:
    """The real actor (runtime/actor.py) with a batched first-legal numpy policy, agent steps per second."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_vector_actor import Counters, ListWriter

    from pzasync.learners import Policy
    from pzasync.runtime.actor import ActingAgent, Actor

    class FirstLegal(Policy):
        def act(self, obs, mask, explore):
            return mask.argmax(axis=1).astype(np.int64), {}

    probe = make_env(env_id)
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    agents = {a: ActingAgent(a, layout, FirstLegal(), learns=False, buffer=ListWriter(), tracks=factory.copies)
              for a, layout in layouts.items()}
    actor = Actor(factory, agents, Counters(), replay_ratio=None, max_lead=64, backpressure=False)
    start = time.perf_counter()
    taken = actor.run(agent_steps=steps, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    return taken / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="pettingzoo.classic.connect_four_v3")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--socket", default="/tmp/pzasync-remote-bench.sock")
    args = parser.parse_args()
    probe = make_env(args.env)
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()

    def median(measure) -> float:
        return statistics.median(measure() for _ in range(args.repeats))

    print(f"{args.env}: microseconds per agent step, median of {args.repeats} runs of {args.steps} steps; wall "
          f"time, then CPU time (client + server; the overhead is their sum less the in-process CPU time)")
    print(f"{'instances':>9} {'path':>6} {'wall':>8} {'cpu client':>11} {'cpu server':>11} {'cpu overhead':>13}")
    for instances in (1, 8, 32):
        cpu: list = []
        local = median(lambda: drive(LocalEnvs([make_env(args.env) for _ in range(instances)]), layouts, args.steps,
                                     cpu=cpu))
        local_cpu = statistics.median(c for c, _ in cpu)
        print(f"{instances:>9} {'local':>6} {local * 1e6:>8.1f} {local_cpu * 1e6:>11.1f} {'-':>11} {'-':>13}")
        for name, address in (("unix", f"unix://{args.socket}"), ("tcp", "tcp://127.0.0.1:0")):
            proc, where = start_server(args.env, address, instances)
            cpu = []
            try:
                factory = RemoteEnvs(EnvSpec.of(where), instances, timeout_s=60)
                wall = median(lambda: drive(factory, layouts, args.steps, proc.pid, cpu))
            finally:
                proc.terminate()
                proc.wait(10)
                proc.stderr.close()
            client = statistics.median(c for c, _ in cpu)
            server = statistics.median(s for _, s in cpu)
            print(f"{instances:>9} {name:>6} {wall * 1e6:>8.1f} {client * 1e6:>11.1f} {server * 1e6:>11.1f} "
                  f"{(client + server - local_cpu) * 1e6:>+13.1f}", flush=True)

    copies = 16
    local = median(lambda: actor_steps_per_second(LocalEnvs([make_env(args.env) for _ in range(copies)]), args.env,
                                                  args.steps))
    proc, where = start_server(args.env, f"unix://{args.socket}", copies)
    try:
        remote = median(lambda: actor_steps_per_second(RemoteEnvs(EnvSpec.of(where), copies, 60), args.env,
                                                       args.steps))
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
    print(f"actor, {copies} copies: {local:,.0f} agent steps/s in process, {remote:,.0f} over a Unix socket "
          f"({remote / local:.2f}x)")


if __name__ == "__main__":
    main()
