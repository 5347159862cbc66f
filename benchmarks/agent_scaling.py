"""Scaling with agents on few cores: simple_spread, every agent its own DQN, learner hosts (docs/benchmarks.md).

    python benchmarks/agent_scaling.py [--agents 2,4,8,16,32] [--hosts auto] [--steps-per-agent 2500] [--seeds 2]
    python benchmarks/agent_scaling.py --table-only       # table and plot from the reports already written

For each N it runs `pzasync bench mpe2.simple_spread_v3 --env-arg N=<N> --learner dqn` for max(20,000, N x
--steps-per-agent) agent steps (each agent must pass DQN's 1,000 learning starts by enough to have updates to
overlap) with the bare loop, the sequential runner and the async runner at the same replay ratio (0.25), the async
learners in `--hosts` learner host processes ("auto": the default, one per core beyond the actor's), and writes
docs/bench/hosts_n<N>.json. Then it prints the scaling table and plots async/sequential wall time, start-up and peak
memory of all processes against N (docs/bench/agent_scaling.png), beside the reports measured with one process per
learner (docs/bench/spread_n<N>.json, written by benchmarks/run_all.sh before learner hosts existed), where present.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path("docs/bench")


def run(n: int, hosts: str, steps_per_agent: int, seeds: int) -> None:
    steps = max(20_000, n * steps_per_agent)
    command = ["pzasync", "bench", "mpe2.simple_spread_v3", "--env-arg", f"N={n}", "--learner", "dqn",
               "--steps", str(steps), "--seeds", str(seeds), "--configs", "bare_policy,sequential,async_double_buffer",
               "--json", str(BENCH / f"hosts_n{n}.json")]
    if hosts != "auto":
        command += ["--learner-processes", hosts]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def row(report: dict) -> dict:
    s = report["summary"]
    seq, asy = s["sequential"], s["async_double_buffer"]
    learners = [p for t in report["trials"] if t["config"] == "async_double_buffer" for p in t["processes"]
                if p["name"].startswith("learner")]
    trials = sum(1 for t in report["trials"] if t["config"] == "async_double_buffer")
    return {"n": report["settings"]["env_kwargs"]["N"], "steps": report["settings"]["agent_steps"],
            "seeds": report["settings"]["seeds"],
            "bare": s["bare_policy"]["agent_steps_per_s"]["median"],
            "sequential": seq["agent_steps_per_s"]["median"], "async": asy["agent_steps_per_s"]["median"],
            "ratio": seq["agent_steps_per_s"]["median"] / asy["agent_steps_per_s"]["median"],
            "startup": asy["startup_seconds"]["median"], "rss_async": asy["peak_rss_mb"]["median"],
            "rss_sequential": seq["peak_rss_mb"]["median"], "learner_processes": len(learners) // max(1, trials),
            "shm_mb": asy["shm_bytes"]["median"] / 2**20}


def load(prefix: str) -> list[dict]:
    rows = []
    for path in sorted(BENCH.glob(f"{prefix}_n*.json"), key=lambda p: int(p.stem.split("_n")[1])):
        rows.append(row(json.loads(path.read_text())))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| N agents | agent steps x seeds | learner processes | bare + policies | sequential | async | "
             "async / sequential wall | async start-up | peak RSS async / sequential | shm |", "|" + " --- |" * 10]
    for r in rows:
        lines.append(f"| {r['n']} | {r['steps']:,} x {r['seeds']} | {r['learner_processes']} | {r['bare']:,.0f} | "
                     f"{r['sequential']:,.0f} | {r['async']:,.0f} | **{r['ratio']:.2f}** | {r['startup']:.1f} s | "
                     f"{r['rss_async']:,.0f} / {r['rss_sequential']:,.0f} MB | {r['shm_mb']:,.0f} MB |")
    return "\n".join(lines)


def plot(hosts: list[dict], separate: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("ratio", "async / sequential wall time"), ("startup", "async start-up (s)"),
              ("rss_async", "peak RSS, all processes (MB)")]
    for ax, (key, title) in zip(axes, panels):
        for rows, label, style in ((separate, "one process per learner", "s--"),
                                   (hosts, "learner hosts (cores - 1)", "o-")):
            if rows:
                ax.plot([r["n"] for r in rows], [r[key] for r in rows], style, label=label)
        if key == "rss_async" and hosts:
            ax.plot([r["n"] for r in hosts], [r["rss_sequential"] for r in hosts], "^:", label="sequential runner")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("agents (each its own DQN)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[2].legend(fontsize=8)
    fig.suptitle("simple_spread, 2 cores: scaling with agents")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="2,4,8,16,32")
    parser.add_argument("--hosts", default="auto", help="learner host processes: auto, or a number")
    parser.add_argument("--steps-per-agent", type=int, default=2_500)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    if not args.table_only:
        for n in (int(x) for x in args.agents.split(",")):
            run(n, args.hosts, args.steps_per_agent, args.seeds)
    hosts, separate = load("hosts"), load("spread")
    if not hosts:
        sys.exit("no docs/bench/hosts_n*.json yet")
    print(table(hosts))
    if separate:
        print("\none process per learner (earlier reports):\n")
        print(table(separate))
    plot(hosts, separate, BENCH / "agent_scaling.png")
    print(f"\nplot: {BENCH / 'agent_scaling.png'}")


if __name__ == "__main__":
    main()
