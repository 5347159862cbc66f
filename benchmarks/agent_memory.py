"""Memory and start-up against the agent count: magent2 battle_v4, two groups (red, blue) sharing one DQN each.

    python benchmarks/agent_memory.py [--map-sizes 16,36,45,80] [--steps 50000] [--note "how it was measured"]
    python benchmarks/agent_memory.py --table-only        # the table of docs/bench/agent_memory.json
    python benchmarks/results_page.py                     # its table on docs/benchmarks.md ("Hundreds of agents")

battle_v4's `map_size` sets the agent count: 16 -> 12 agents, 36 -> 98, 45 -> 162 (the default map), 80 -> 512.
For each map size a fresh process runs the async runner (`AsyncRunner`, as `pzasync train
magent2.environments.battle_v4 --env-arg map_size=M --learner dqn,torso=mlp --group red=red_* --group
blue=blue_*` builds it: learners free-running, default learner processes, no evaluation, nothing written) for
the same --steps agent steps at every size (so every run writes, and its learners read, as many buffer rows),
and reports:

- start-up: seconds from the process's start (measured by this script, before it starts the process) to the
  actor's first decision, and its parts: interpreter and imports, the plan (`RunPlan`: env probes, learners,
  layouts, sizes), and the run's own start-up (`RunResult.startup_seconds`: shared memory, learner processes,
  the actor and its env);
- memory: the shared memory the plan sizes (`plan.shm_bytes`) and the run created (`RunResult.shm_bytes`), and
  the peak resident memory of the actor's process (`process_peak_rss_mb`) and of each learner process
  (`learner_peak_rss_mb`; a learner host process holding both groups' learners counts once). Resident memory
  includes the shared-memory pages a process touched: the actor's process creates every buffer and fills it
  with the sentinel byte, so its figure holds all of the shared memory, and the table also gives it less the
  shared memory (its own memory); a learner's holds the rows it sampled;
- agent-steps/s while acting (`RunResult.actor_steps_per_second`).

Learning units (one buffer, one learner, one policy slot each) are 2 at every size; what grows with the agent
count is the env, the observations in flight and the per-agent counters. Writes docs/bench/agent_memory.json
(with the command that made it) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

OUT = Path("docs/bench/agent_memory.json")
ENV = "magent2.environments.battle_v4"
LEARNER = "dqn,torso=mlp"
GROUPS = {"red": ["red_*"], "blue": ["blue_*"]}


def one(map_size: int, steps: int, seed: int) -> dict:
    """In the measured process: plan and run one battle of `map_size`; the figures (times in this machine's
    monotonic clock, which the parent shares)."""
    from pzasync import AsyncRunner, RunConfig
    from pzasync.core.environments import EnvSpec
    from pzasync.specs import parse_learner_spec

    imported = time.monotonic()
    config = RunConfig(seed=seed, agent_groups=GROUPS, out_dir=None, progress=False, checkpoint_every_s=0.0)
    runner = AsyncRunner(EnvSpec.of(ENV, map_size=map_size), parse_learner_spec(LEARNER), config)
    planned = time.monotonic()
    plan = runner.plan
    agents = len(plan.agents)
    running = time.monotonic()
    result = runner.run(agent_steps=steps)
    learners = {r.learner_pid: r.learner_peak_rss_mb for r in result.agents.values()
                if r.learner_peak_rss_mb is not None}
    return {"map_size": map_size, "agents": agents, "units": len(plan.units), "learning_units": len(plan.learning),
            "envs_per_actor": plan.envs_per_actor, "env_api": plan.env_api,
            "buffer_capacity": {u.agent: u.capacity for u in plan.learning},
            "agent_steps": result.agent_steps, "episodes": result.episodes,
            "imported_at": imported, "planned_at": planned,
            "run_at": running, "run_startup_s": result.startup_seconds,
            "plan_shm_mb": plan.shm_bytes / 2**20, "shm_mb": result.shm_bytes / 2**20,
            "actor_peak_rss_mb": result.process_peak_rss_mb,
            "learner_processes": len(learners), "learner_peak_rss_mb": sorted(learners.values()),
            "agent_steps_per_s": result.actor_steps_per_second, "acting_s": result.acting_seconds,
            "stopped_because": result.stopped_because}


def measure(map_size: int, steps: int, seed: int) -> dict:
    """`one` in a fresh process; start-up counted from just before that process starts."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    command = [sys.executable, __file__, "--one", str(map_size), "--steps", str(steps), "--seed", str(seed)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    imported = row.pop("imported_at")
    row["imports_s"] = imported - started  # the interpreter's start and pzasync's (and torch's) imports
    row["plan_s"] = row.pop("planned_at") - imported
    run_at = row.pop("run_at")
    row["startup_s"] = run_at - started + row["run_startup_s"]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| agents (map_size) | learning units | start-up s (imports + plan + run) | plan shm MB | shm MB "
             "created | actor peak RSS MB (less shm) | learner peak RSS MB | agent-steps/s |", "|" + " --- |" * 8]
    for r in rows:
        learners = " + ".join(f"{m:,.0f}" for m in r["learner_peak_rss_mb"]) or "-"
        lines.append(f"| {r['agents']} ({r['map_size']}) | {r['learning_units']} | {r['startup_s']:.1f} "
                     f"({r['imports_s']:.1f} + {r['plan_s']:.2f} + {r['run_startup_s']:.1f}) | "
                     f"{r['plan_shm_mb']:,.0f} | {r['shm_mb']:,.0f} | {r['actor_peak_rss_mb']:,.0f} "
                     f"({r['actor_peak_rss_mb'] - r['shm_mb']:,.0f}) | {learners} | {r['agent_steps_per_s']:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--map-sizes", default="16,36,45,80", help="battle_v4 map sizes (16: 12 agents, 36: 98, "
                                                                  "45: 162, 80: 512)")
    parser.add_argument("--steps", type=int, default=50_000, help="agent steps of each run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--note", default="", help="what the JSON should say about how it was measured")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.steps, args.seed)))
        return
    if args.table_only:
        print(table(json.loads(args.out.read_text())["rows"]))
        return
    from pzasync.bench.harness import machine_info

    command = shlex.join(["python", "benchmarks/agent_memory.py", "--map-sizes", args.map_sizes, "--steps",
                          str(args.steps), "--seed", str(args.seed)])
    rows = []
    for map_size in (int(m) for m in args.map_sizes.split(",")):
        rows.append(measure(map_size, args.steps, args.seed))
        print(f"map_size {map_size}: {rows[-1]['agents']} agents, start-up {rows[-1]['startup_s']:.1f}s", flush=True)
    report = {"command": command, **({"note": args.note} if args.note else {}),
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "env": ENV, "learner": LEARNER,
              "agent_groups": GROUPS, "agent_steps": args.steps, "machine": machine_info(), "rows": rows}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(rows))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
