"""`pzasync bench ENV --remote`: the per-agent-step cost of remote env copies (docs/remote.md, "Speed") against
the same env stepped in process, and beside an HTTP/1.1 + JSON baseline of the same messages (remote_http.py).

Every path drives its copies through the `EnvCopies` interface with the same trivial policy (the first legal
action; action 0 without a mask), so what differs is only where the env runs: in this process (`LocalEnvs`),
or in a server process reached over a Unix socket, TCP loopback, or HTTP+JSON over TCP loopback, at each
number of instances on one connection (whose copies form two groups, so a frame carries half of them); and,
when asked for ("paced"), a paced server over a Unix socket, whose threads step the instances and answer them
as they finish (its copies are one group, and a frame carries the instances of the replies come in). For
each path the figures are wall time and CPU time per agent step, the client's (this process) and the
server's (read from /proc, Linux only); the **CPU overhead** is client + server less the in-process CPU
time, the figure that does not depend on a free core for the server. Then the actor itself (runtime/actor.py)
with a batched first-legal policy on `actor_copies` copies, in process and over a Unix socket. The paths are
interleaved within each repeat, so that a machine whose speed drifts (other work on its cores) affects them
alike, and every figure is the median of `repeats` runs.

The "parallel" path (asked for like "paced") is a server over a Unix socket whose copies are stepped through its
parallel API (docs/remote.md, "The parallel API": a whole cycle of a copy per record): its CPU overhead is
against the env's parallel API in process ("local_parallel", measured beside it), and the actor's comparison adds
both on the parallel path, so AEC and parallel over the same socket can be compared.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pzasync.bench.remote_http import HttpConnection
from pzasync.core.environments import EnvSpec, make_env, make_parallel_env
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.core.transitions import Transition
from pzasync.learners import Policy
from pzasync.remote.client import Connection
from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
from pzasync.runtime.copies.local import LocalEnvs
from pzasync.runtime.copies.protocol import Answer
from pzasync.runtime.copies.remote import RemoteEnvs

#: The ways to reach the env a report may hold by default, in table order: "local" is the env in this process.
PATHS = ("local", "unix", "tcp", "http")
#: The remote paths measured unless told otherwise.
DEFAULT_PATHS = PATHS[1:]
#: Every remote path: "paced" is a paced server over a Unix socket (`pzasync serve --workers PACED_WORKERS`),
#: whose replies come per instance as its threads finish them; "parallel" a server over a Unix socket stepped
#: through its parallel API (its in-process reference, "local_parallel", is measured with it).
REMOTE_PATHS = (*DEFAULT_PATHS, "paced", "parallel")
PACED_WORKERS = 4


@dataclass
class OverheadRow:
    """One path at one number of instances per connection: microseconds per agent step, medians."""

    instances: int
    per_frame: int | None  # None: as the server's pace brings the instances back (the "paced" path)
    path: str
    wall_us: float
    cpu_client_us: float
    cpu_server_us: float | None
    cpu_overhead_us: float | None


def per_frame(instances: int) -> int:
    """Instances a STEP frame carries when one connection serves `instances` copies (two groups)."""
    return math.ceil(instances / 2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _first_legal(mask: np.ndarray | None) -> np.int64:
    return np.int64(mask.argmax()) if mask is not None else np.int64(0)


def drive(factory: Any, layouts: dict, steps: int, server_pid: int | None = None) -> tuple[float, float, float]:
    """(wall, client CPU, server CPU) seconds per agent step of `steps` decisions answered with the first legal
    action, then every copy's episode cut."""
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
            answered: list[Answer] = [(d, _first_legal(d.mask), {}) for d in pending] if more else []
            taken += len(answered)
            copies.submit(group, answered, [] if more else list(dict.fromkeys(d.copy for d in pending)), taken < steps)
        copies.finish()
        return ((time.perf_counter() - start) / taken, (time.process_time() - cpu_start) / taken,
                (cpu_seconds(server_pid) - server_start) / taken if server_pid else 0.0)
    finally:
        copies.close()


class _FirstLegal(Policy):
    """The first legal action of every row (action 0 without a mask)."""

    def act(self, obs: dict, mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        rows = len(next(iter(obs.values())))
        return (mask.argmax(axis=1).astype(np.int64) if mask is not None else np.zeros(rows, np.int64)), {}


class _Discard:
    """A transition writer (`TransitionWriter`) that keeps nothing."""

    capacity = 1
    written = unread = dropped = 0

    def write(self, transition: Transition) -> int:
        return 0

    def write_batch(self, transitions: Sequence[Transition]) -> int:
        return len(transitions)

    def write_rows(self, batch: dict[str, np.ndarray], follows: np.ndarray | None = None) -> int:
        return len(batch["reward"])


class _Counters:
    """Run control (`RunControl`) that keeps nothing: the actor's words, read as 0, never a stop."""

    stop_requested = False
    progress = 0.0

    def request_stop(self) -> None:
        pass

    def beat(self, agent: str | None = None) -> None:
        pass

    def get(self, agent: str, word: int) -> int:
        return 0

    def set(self, agent: str, word: int, value: int) -> None:
        pass

    def add(self, agent: str, word: int, value: int) -> None:
        pass

    def record_steps(self, agent: str | None, agent_steps: int, total_steps: int) -> None:
        pass

    def record_episodes(self, episodes: int) -> None:
        pass

    def close(self) -> None:
        pass


def actor_steps_per_second(factory: Any, layouts: dict, steps: int) -> float:
    """Agent steps per second of the actor (runtime/actor.py) on `factory`'s copies, with a batched
    first-legal policy and nothing learning."""
    policy = LocalPolicy(_FirstLegal())  # one module for every agent: one forward per round
    agents = {a: ActingAgent(a, layout, policy, learns=False, buffer=_Discard(), tracks=factory.copies)
              for a, layout in layouts.items()}
    actor = Actor(ActorContext(factory, agents, _Counters()))
    start = time.perf_counter()
    taken = actor.run(agent_steps=steps, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    return taken / (time.perf_counter() - start)


class _Server:
    """A server process for one path: `pzasync serve` (unix, tcp, paced, parallel) or the HTTP+JSON baseline
    (http); `env_kwargs` go to the env as `--env-arg KEY=VALUE`."""

    def __init__(self, env_id: str, path: str, instances: int, folder: str,
                 env_kwargs: dict[str, Any] | None = None) -> None:
        address = f"unix://{folder}/{path}{instances}.sock" if path != "http" and path != "tcp" else "tcp://127.0.0.1:0"
        command = ([sys.executable, "-m", "pzasync.bench.remote_http"] if path == "http" else
                   [sys.executable, "-m", "pzasync.cli", "serve"])
        paced = ["--workers", str(PACED_WORKERS)] if path == "paced" else []
        args = [f"--env-arg={key}={value!r}" for key, value in (env_kwargs or {}).items()]
        self.parallel = path == "parallel"
        self.proc = subprocess.Popen([*command, env_id, "--address", address, "--instances", str(instances), *paced,
                                      *args], stderr=subprocess.PIPE, text=True)
        stderr = self.proc.stderr
        assert stderr is not None, "stderr=PIPE"
        self.stderr = stderr
        line = stderr.readline()
        found = re.search(r" at (\S+) ", line)
        if not found:
            self.proc.kill()
            self.proc.wait()
            rest = stderr.read()
            stderr.close()
            raise RuntimeError(f"the {path} server for {env_id!r} did not start: {line}{rest}")
        self.address = found.group(1)
        self.connection: type[Connection] = HttpConnection if path == "http" else Connection

    def copies(self, instances: int) -> RemoteEnvs:
        return RemoteEnvs(EnvSpec.of(self.address), instances, timeout_s=60, connection=self.connection,
                          parallel=self.parallel)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def local_copies(env_id: str, env_kwargs: dict[str, Any], copies: int, parallel: bool = False) -> LocalEnvs:
    """`copies` copies of the env in this process (through its parallel API with `parallel`)."""
    if parallel:
        return LocalEnvs([make_parallel_env(env_id, **env_kwargs) for _ in range(copies)], parallel=True)
    return LocalEnvs([make_env(env_id, **env_kwargs) for _ in range(copies)])


def remote_overhead(env_id: str = "pettingzoo.classic.connect_four_v3", *, steps: int = 4000, repeats: int = 3,
                    instances: tuple[int, ...] = (1, 8, 16, 32), paths: tuple[str, ...] = DEFAULT_PATHS,
                    actor_copies: int = 16, on_row: Callable[[OverheadRow], None] | None = None,
                    env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure (module docstring); a report: settings, `rows` (one per number of instances and path, the
    in-process ones first), `actor` (None with `actor_copies` 0) and the load average before and after.
    `env_kwargs`: the env's keyword arguments, in process and on the servers."""
    unknown = [p for p in paths if p not in REMOTE_PATHS]
    if unknown or steps < 1 or repeats < 1 or not instances or min(instances) < 1 or actor_copies < 0:
        raise ValueError(f"remote bench: paths must be among {', '.join(REMOTE_PATHS)} (got {unknown or list(paths)}), "
                         f"steps, repeats and instances >= 1, actor_copies >= 0 (got steps={steps}, "
                         f"repeats={repeats}, instances={list(instances)}, actor_copies={actor_copies})")
    kwargs = dict(env_kwargs or {})
    probe = make_env(env_id, **kwargs)
    try:
        layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    finally:
        probe.close()
    parallel = "parallel" in paths
    local_paths = ["local", "local_parallel"] if parallel else ["local"]
    report: dict[str, Any] = {"env": env_id, "env_kwargs": kwargs, "steps": steps, "repeats": repeats,
                              "instances": list(instances), "paths": [*local_paths, *paths],
                              "actor_copies": actor_copies, "load_average_before": list(os.getloadavg()), "rows": [],
                              "actor": None}
    with tempfile.TemporaryDirectory(prefix="pzasync-bench-remote-") as folder:
        for n in instances:
            servers: dict[str, _Server] = {}
            try:
                for path in paths:
                    servers[path] = _Server(env_id, path, n, folder, kwargs)
                runs: dict[str, list[tuple[float, float, float]]] = {p: [] for p in [*local_paths, *paths]}
                for _ in range(repeats):
                    for path in local_paths:
                        runs[path].append(drive(local_copies(env_id, kwargs, n, path == "local_parallel"), layouts,
                                                steps))
                    for path, server in servers.items():
                        runs[path].append(drive(server.copies(n), layouts, steps, server.proc.pid))
            finally:
                for server in servers.values():
                    server.close()
            local_cpu = {p: statistics.median(c for _, c, _ in runs[p]) for p in local_paths}
            for path, measured in runs.items():
                remote = path not in local_paths
                baseline = local_cpu["local_parallel" if path == "parallel" else "local"]
                row = OverheadRow(n, None if path == "paced" else per_frame(n), path,
                                  statistics.median(w for w, _, _ in measured) * 1e6,
                                  statistics.median(c for _, c, _ in measured) * 1e6,
                                  statistics.median(s for _, _, s in measured) * 1e6 if remote else None,
                                  (statistics.median(c + s for _, c, s in measured) - baseline) * 1e6 if remote
                                  else None)
                report["rows"].append(asdict(row))
                if on_row is not None:
                    on_row(row)
        if actor_copies:
            report["actor"] = _actor_comparison(env_id, kwargs, layouts, steps, repeats, actor_copies, folder,
                                                parallel)
    report["load_average_after"] = list(os.getloadavg())
    return report


def _actor_comparison(env_id: str, kwargs: dict[str, Any], layouts: dict, steps: int, repeats: int, copies: int,
                      folder: str, parallel: bool) -> dict[str, Any]:
    """The actor's agent steps per second on `copies` copies in process and over a Unix socket (and, with
    `parallel`, both on the parallel path), medians of `repeats` interleaved runs."""
    servers = {"unix": _Server(env_id, "unix", copies, folder, kwargs)}
    rates: dict[str, list[float]] = {"local": [], "unix": []}
    try:
        if parallel:
            servers["parallel"] = _Server(env_id, "parallel", copies, folder, kwargs)
            rates.update(local_parallel=[], parallel=[])
        for _ in range(repeats):
            for path in rates:
                factory = (servers[path].copies(copies) if path in servers else
                           local_copies(env_id, kwargs, copies, path == "local_parallel"))
                rates[path].append(actor_steps_per_second(factory, layouts, steps))
    finally:
        for server in servers.values():
            server.close()
    rate = {path: statistics.median(values) for path, values in rates.items()}
    actor = {"copies": copies, "local_steps_per_s": rate["local"], "unix_steps_per_s": rate["unix"],
             "ratio": rate["unix"] / rate["local"]}
    if parallel:
        actor.update(local_parallel_steps_per_s=rate["local_parallel"], parallel_steps_per_s=rate["parallel"],
                     parallel_ratio=rate["parallel"] / rate["local_parallel"],
                     parallel_over_aec=rate["parallel"] / rate["unix"])
    return actor


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as plain text: a table of microseconds per agent step, then the actor's throughput."""
    lines = [f"{report['env']}: microseconds per agent step, median of {report['repeats']} runs of {report['steps']} "
             f"agent steps; CPU overhead = client + server CPU less in process",
             f"{'instances':>9} {'per frame':>9} {'path':>14} {'wall':>8} {'CPU client':>10} {'CPU server':>10} "
             f"{'CPU overhead':>12}"]
    for row in report["rows"]:
        server = f"{row['cpu_server_us']:.1f}" if row["cpu_server_us"] is not None else "-"
        overhead = f"{row['cpu_overhead_us']:+.1f}" if row["cpu_overhead_us"] is not None else "-"
        frames = row["per_frame"] if row["per_frame"] is not None else "varies"
        lines.append(f"{row['instances']:>9} {frames:>9} {row['path']:>14} {row['wall_us']:>8.1f} "
                     f"{row['cpu_client_us']:>10.1f} {server:>10} {overhead:>12}")
    actor = report.get("actor")
    if actor:
        lines.append(f"actor, {actor['copies']} copies: {actor['local_steps_per_s']:,.0f} agent steps/s in process, "
                     f"{actor['unix_steps_per_s']:,.0f} over a Unix socket ({actor['ratio']:.2f}x)")
        if "parallel_steps_per_s" in actor:
            lines.append(f"actor on the parallel path, {actor['copies']} copies: "
                         f"{actor['local_parallel_steps_per_s']:,.0f} agent steps/s in process, "
                         f"{actor['parallel_steps_per_s']:,.0f} over a Unix socket through the parallel API "
                         f"({actor['parallel_ratio']:.2f}x; {actor['parallel_over_aec']:.2f}x the AEC protocol's)")
    before, after = report["load_average_before"], report["load_average_after"]
    lines.append(f"load average (1, 5, 15 min): {', '.join(f'{v:.2f}' for v in before)} before, "
                 f"{', '.join(f'{v:.2f}' for v in after)} after")
    return lines
