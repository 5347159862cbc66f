"""Markdown tables of the bench reports in docs/bench/ (the page's own tables: benchmarks/results_page.py).

Usage: python benchmarks/tables.py [DIR]   (default docs/bench; reports written by benchmarks/run_all.sh)
Time to target is re-scored from the stored learning curves with TARGETS below (no trial is run again).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pzasync.bench.harness import rescore
from pzasync.bench.report import LABELS
from pzasync.bench.report import format_spread as spread

DIR = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench")
#: report -> (target, window) used in the docs.
TARGETS = {"c4_target_r025": (0.92, 3), "c4_target_r1": (0.92, 3), "c4_both_r025": (0.85, 3)}


def load(name: str) -> dict | None:
    path = DIR / f"{name}.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    if name in TARGETS:
        report = rescore(report, *TARGETS[name])
    return report


def throughput_table(report: dict) -> str:
    rows = ["| configuration | agent-steps/s | updates/s | updates per agent step | lag mean / p95 | CPU (cores) "
            "| peak RSS MB (all processes) | shm MB | start-up s |", "|" + " --- |" * 9]
    for config, s in report["summary"].items():
        trials = [t for t in report["trials"] if t["config"] == config]
        cpu = sorted(sum(p["cpu_fraction"] for p in t["processes"]) for t in trials)[len(trials) // 2]
        per_agent = " / ".join(f"{v['median']:,.0f}" for v in s["updates_per_s"].values()) or "-"
        ratio = " / ".join(f"{v['median']:.3f}" for v in s["updates_per_agent_step"].values()) or "-"
        lag = " / ".join(f"{m['median']:.0f} / {p['median']:.0f}" for m, p in
                         zip(s["policy_lag_mean"].values(), s["policy_lag_p95"].values())) or "-"
        startup = spread(s["startup_seconds"], "{:.1f}") if not config.startswith("bare") else "-"
        rows.append(f"| {LABELS[config]} | {spread(s['agent_steps_per_s'])} | {per_agent} | {ratio} | {lag} | "
                    f"{cpu:.2f} | {s['peak_rss_mb']['median']:,.0f} | {s['shm_bytes']['median'] / 2**20:.1f} | "
                    f"{startup} |")
    return "\n".join(rows)


def target_table(report: dict) -> str:
    target, window = report["settings"]["target"], report["settings"]["target_window"]
    rows = [f"| configuration | agent-steps/s | acting s to {target:g} (window {window}) | seeds reached | "
            "agent steps to target |", "|" + " --- |" * 5]
    for config, s in report["summary"].items():
        ttt = s.get("time_to_target")
        if ttt is None:
            continue
        rows.append(f"| {LABELS[config]} | {spread(s['agent_steps_per_s'])} | {spread(ttt['seconds'], '{:.1f}')} | "
                    f"{ttt['reached']}/{s['seeds']} | {spread(ttt['agent_steps'])} |")
    return "\n".join(rows)


def headline(report: dict) -> str:
    h = report["headline"]
    parts = [f"{k} = {v:.2f}" for k, v in h.items() if isinstance(v, float)]
    for key in ("async_over_sequential_wall", "async_over_sequential_time_to_target"):
        parts += [f"{key}[{mode}] = {v:.2f}" if v is not None else f"{key}[{mode}] = n/a"
                  for mode, v in h[key].items()]
    return "; ".join(parts)


def sensitivity(name: str, targets: list[float], window: int = 3) -> str:
    raw = json.loads((DIR / f"{name}.json").read_text())
    rows = ["| target (window 3) | sequential s | async double buffer s | async snapshot s | ratio db / snap |",
            "|" + " --- |" * 5]
    for target in targets:
        r = rescore(raw, target, window)
        cells = []
        for config in ("sequential", "async_double_buffer", "async_snapshot"):
            ttt = r["summary"].get(config, {}).get("time_to_target")
            cells.append(f"{spread(ttt['seconds'], '{:.1f}')} ({ttt['reached']}/5)" if ttt else "-")
        ratios = r["headline"]["async_over_sequential_time_to_target"]
        text = " / ".join(f"{v:.2f}" if v is not None else "n/a" for v in ratios.values())
        rows.append(f"| {target:g} | {' | '.join(cells)} | {text} |")
    return "\n".join(rows)


def main() -> None:
    for name in ("c4_throughput", "c4_target_r025", "c4_target_r1", "c4_both_r025", "spread_n2", "spread_n4",
                 "spread_n8", "c4_1core"):
        report = load(name)
        if report is None:
            continue
        print(f"\n### {name}: {report['settings']['env']} {report['settings']['env_kwargs'] or ''}, "
              f"{report['settings']['agent_steps']:,} agent steps x {report['settings']['seeds']} seeds, "
              f"cores used {report['machine']['cores_used']}\n")
        print(throughput_table(report))
        if report["settings"].get("target") is not None:
            print()
            print(target_table(report))
        print(f"\nheadline: {headline(report)}")
    if (DIR / "c4_target_r025.json").exists():
        print("\n### sensitivity of c4_target_r025 to the target\n")
        print(sensitivity("c4_target_r025", [0.88, 0.9, 0.92, 0.93, 0.94]))


if __name__ == "__main__":
    main()
