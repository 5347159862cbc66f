"""Showing a `pzasync bench` report: the summary table, the headline ratios, and the PNG plots."""

from __future__ import annotations

from typing import Any

import numpy as np

from pzasync.bench.harness import SAME_ALGORITHM, split_label
from pzasync.bench.settings import BARE_CONFIGS

LABELS = {
    "bare_random": "bare, random",
    "bare_policy": "bare + policies",
    "bare_parallel": "parallel API + batched policies",
    "async_idle": "async, idle learners",
    "sequential": "sequential",
    "async_double_buffer": "async double buffer",
    "async_snapshot": "async snapshot",
    "async_free": "async free-running *",
}
COLORS = {"sequential": "#d62728", "async_double_buffer": "#1f77b4", "async_snapshot": "#2ca02c",
          "async_free": "#9467bd",
          "bare_random": "#7f7f7f", "bare_policy": "#bcbd22", "bare_parallel": "#8c564b", "async_idle": "#17becf"}


def describe(label: str) -> str:
    """A configuration label (`config` or `config@N`) in words."""
    config, envs, workers, actors = split_label(label)
    copies = f", {envs} env{'s' if envs != 1 else ''}" if label != config else ""
    return (LABELS[config] + copies + (f", {workers} worker{'s' if workers != 1 else ''}" if workers else "")
            + (f", {actors} actors" if actors != 1 else ""))


def color(label: str) -> str:
    return COLORS[split_label(label)[0]]


def format_spread(s: dict | None, fmt: str = "{:,.0f}") -> str:
    """A `summarize` figure as "median [min-max]" (the median alone for one seed, "-" for none)."""
    if not s or s.get("median") is None:
        return "-"
    text = fmt.format(s["median"])
    if s["n"] > 1:
        text += f" [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"
    return text


def _per_agent(values: dict[str, dict], fmt: str) -> str:
    return " / ".join(fmt.format(v["median"]) for v in values.values() if v.get("median") is not None) or "-"


def summary_tables(report: dict[str, Any]) -> list[Any]:
    """Rich tables, one row per configuration: medians over seeds, [min-max] where there are several seeds.

    The first holds speed and learning figures, the second resources and (with a target) time to target.
    """
    from rich.table import Table

    settings = report["settings"]
    title = (f"{settings['env']}: {settings['agent_steps']:,} agent steps x {settings['seeds']} seed(s), "
             f"replay ratio {settings['replay_ratio']:g}")
    speed = Table(title=title, title_justify="left")
    for column in ("configuration", "agent-steps/s", "updates/s", "updates/step", "lag mean/p95"):
        speed.add_column(column, justify="left" if column == "configuration" else "right", overflow="fold")
    target = settings.get("target")
    columns = ["configuration", "CPU cores", "RSS MB", "shm MB", "start-up s"]
    if target is not None:
        columns += [f"s to {target:g} (reached)", "steps to target"]
    resources = Table(title="resources" + (" and time to target (acting seconds)" if target is not None else ""),
                      title_justify="left")
    for column in columns:
        resources.add_column(column, justify="left" if column == "configuration" else "right", overflow="fold")
    for config, s in report["summary"].items():
        rows = [t for t in report["trials"] if t["config"] == config]
        cpu = np.median([sum(p["cpu_fraction"] for p in t["processes"]) for t in rows])
        lag = " ".join(f"{m['median']:.0f}/{p['median']:.0f}" for m, p in
                       zip(s["policy_lag_mean"].values(), s["policy_lag_p95"].values())) or "-"
        speed.add_row(describe(config), format_spread(s["agent_steps_per_s"]),
                      _per_agent(s["updates_per_s"], "{:,.0f}"),
                      _per_agent(s["updates_per_agent_step"], "{:.3f}"), lag)
        cells = [describe(config), f"{cpu:.2f}", f"{s['peak_rss_mb']['median']:,.0f}",
                 f"{s['shm_bytes']['median'] / 2**20:.1f}",
                 format_spread(s["startup_seconds"], "{:.1f}") if config not in BARE_CONFIGS else "-"]
        if target is not None:
            ttt = s.get("time_to_target")
            cells += (["-", "-"] if ttt is None else
                      [f"{format_spread(ttt['seconds'], '{:.1f}')} ({ttt['reached']}/{s['seeds']})",
                       format_spread(ttt["agent_steps"])])
        resources.add_row(*cells)
    return [speed, resources]


def headline_lines(report: dict[str, Any]) -> list[str]:
    """The ratios, in words (they carry across machines; absolute rates do not)."""
    h = report["headline"]
    lines = []
    if h.get("actor_over_bare_policy") is not None:
        lines.append(f"actor / bare loop with the same policies: {h['actor_over_bare_policy']:.2f}x the rate "
                     "(the runtime's own overhead, learners idle)")
    if h.get("actor_over_bare_parallel") is not None:
        lines.append(f"actor / the parallel API's loop with one batched forward per policy and cycle: "
                     f"{h['actor_over_bare_parallel']:.2f}x the rate")
    if h.get("bare_policy_over_bare_random") is not None:
        lines.append(f"bare loop with policies / env alone: {h['bare_policy_over_bare_random']:.2f}x the rate")
    for mode, value in h.get("async_over_sequential_wall", {}).items():
        if value is not None:
            lines.append(f"async ({mode}) / sequential, wall time for the same agent steps: {value:.2f}x")
    for mode, value in h.get("async_overlap", {}).items():
        if value is not None:
            limit = h.get("async_limit", {}).get(mode, "?")
            source = h.get("async_learner_alone_from", {}).get(mode, "?")
            lines.append(f"async ({mode}) overlap: {value:.2f} of the better of its two limits "
                         f"(max(actor alone, learner alone) / async wall; learner alone from {source}; "
                         f"{limit}-bound)")
    for mode, value in h.get("async_over_sequential_time_to_target", {}).items():
        lines.append(f"async ({mode}) / sequential, median time to target: "
                     + (f"{value:.2f}x" if value is not None else "n/a (a median seed did not reach it)"))
    for label, v in (h.get("vector") or {}).items():
        parts = [f"{what}: {v[key]:.2f}x" for key, what in (
            ("over_bare_policy", "single-env bare loop with the same policies"), ("over_bare_random", "env alone"),
            ("over_one_env", "one env copy")) if v.get(key) is not None]
        if parts:
            lines.append(f"{describe(label)} / " + "; / ".join(parts))
    free = h.get("async_free_updates_per_agent_step")
    if free:
        lines.append("* async free running is a different algorithm: it reached "
                     + ", ".join(f"{a} {v:.3f}" for a, v in free.items() if v is not None)
                     + " updates per agent step; never quoted as a speed-up")
    startup = report["summary"].get("async_double_buffer", {}).get("startup_seconds")
    if startup and startup.get("median") is not None:
        lines.append(f"process start-up (async, not in any rate or time above): {startup['median']:.1f}s median")
    return lines


def _step_values(grid: np.ndarray, xs: list[float], ys: list[float]) -> np.ndarray:
    """The value of the last point at or before each grid x (the first point's value before it)."""
    index = np.searchsorted(np.asarray(xs), grid, side="right") - 1
    return np.asarray(ys)[np.clip(index, 0, len(ys) - 1)]


def plot_report(report: dict[str, Any], path: str) -> str:
    """Throughput bars (median, min-max whiskers) and, with a target, learning curves against wall seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, trials = report["summary"], report["trials"]
    curves = [t for t in trials if t.get("curve")]
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(13 if curves else 7, 4.8), squeeze=False)
    ax = axes[0][0]
    configs = list(summary)
    medians = [summary[c]["agent_steps_per_s"]["median"] for c in configs]
    lows = [m - summary[c]["agent_steps_per_s"]["min"] for c, m in zip(configs, medians)]
    highs = [summary[c]["agent_steps_per_s"]["max"] - m for c, m in zip(configs, medians)]
    ax.barh(range(len(configs)), medians, xerr=[lows, highs], color=[color(c) for c in configs], capsize=3)
    ax.set_yticks(range(len(configs)), [describe(c) for c in configs])
    ax.invert_yaxis()
    ax.set_xlabel("agent steps per second (median over seeds, min-max whiskers)")
    ax.set_title("Throughput")
    for i, (m, high) in enumerate(zip(medians, highs)):
        ax.annotate(f"{m:,.0f}", (m + high, i), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(0, max(m + h for m, h in zip(medians, highs)) * 1.18)
    if curves:
        ax = axes[0][1]
        learning = ("sequential",) + SAME_ALGORITHM + ("async_free",)
        for config in [c for c in summary if split_label(c)[0] in learning]:
            rows = [t["curve"] for t in curves if t["config"] == config]
            if not rows:
                continue
            end = max(p["seconds"] for curve in rows for p in curve)
            grid = np.linspace(0, end, 100)
            # Each seed's worst agent, held from one snapshot to the next (a step function), then bands over seeds.
            ys = np.array([_step_values(grid, [p["seconds"] for p in c], [min(p["scores"].values()) for p in c])
                           for c in rows])
            style = "-" if split_label(config)[0] == config else ":"
            ax.plot(grid, np.median(ys, axis=0), color=color(config), ls=style, label=describe(config))
            ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=color(config), alpha=0.15)
        target = report["settings"].get("target")
        if target is not None:
            ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:g}")
        ax.set_xlabel("seconds of acting (start-up excluded)")
        score, versus = report['settings']['score'].replace('_', ' '), report['settings'].get('versus', 'random')
        ax.set_ylabel(f"{score} vs {versus} (worst learning agent)")
        ax.set_title(f"Learning curves: median and min-max over {report['settings']['seeds']} seed(s)")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"pzasync bench: {report['settings']['env']} on {report['machine']['cores_used']} core(s)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
