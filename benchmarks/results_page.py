"""The results page, docs/benchmarks.md: its tables, generated from the JSON reports in docs/bench/.

    python benchmarks/results_page.py            # rewrite every table of the page from its reports
    python benchmarks/results_page.py --check    # exit 1, naming them, if any table differs from its reports

A table sits between `<!-- table:NAME -->` and `<!-- /table -->` on the page; NAME is a key of `TABLES`. Each ends
with the command that reproduces it (its report's "command" key) and links to the reports it was made from. A
report whose "source" key says "transcribed" holds figures copied from an earlier version of the page, whose raw
trials were not kept; its tables say so. Only the standard library and the JSON files: the default test suite
runs `--check` (tests/test_results_page.py).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "bench"
PAGE = ROOT / "docs" / "benchmarks.md"
BLOCK = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.DOTALL)
#: Two-sided 95% quantiles of Student's t by degrees of freedom (intervals over seeds).
T95 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
       10: 2.2281}
LABELS = {"bare_random": "bare, random", "bare_policy": "bare + policies",
          "bare_parallel": "bare parallel API + policies", "async_idle": "async, idle learners",
          "sequential": "sequential", "async_double_buffer": "async double buffer",
          "async_snapshot": "async snapshot", "async_free": "async free-running *"}

_reports: dict[str, Any] = {}


def report(name: str) -> Any:
    """docs/bench/NAME.json, read once."""
    if name not in _reports:
        _reports[name] = json.loads((BENCH / f"{name}.json").read_text())
    return _reports[name]


# ---------------------------------------------------------------------------------------------- formatting
def num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def interval(s: dict | None, digits: int = 1) -> str:
    """A mean over seeds with its 95% interval: "mean [low, high]"."""
    if not s or s.get("mean") is None:
        return "-"
    low, high = s["ci95"]
    return f"{num(s['mean'], digits)} [{num(low, digits)}, {num(high, digits)}]"


def baseline(b: dict | None, digits: int = 1) -> str:
    if not b or b.get("score") is None:
        return "-"
    low, high = b["ci95"]
    return f"{num(b['score'], digits)} [{num(low, digits)}, {num(high, digits)}]"


def steps_range(values: list[float]) -> str:
    low, high = min(values), max(values)
    if high >= 1e6:
        return f"{low / 1e6:.2f}-{high / 1e6:.2f}M"
    return f"{low / 1e3:.0f}-{high / 1e3:.0f}k"


def spread(s: dict | None, fmt: str = "{:,.0f}") -> str:
    """A bench summary figure as "median [min-max]"."""
    if not s or s.get("median") is None:
        return "-"
    text = fmt.format(s["median"])
    several = s["n"] > 1 if "n" in s else s.get("min") != s.get("max")
    return text + (f" [{fmt.format(s['min'])}-{fmt.format(s['max'])}]" if several else "")


def t_interval(values: list[float]) -> dict:
    mean = statistics.fmean(values)
    half = T95[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": mean, "ci95": [mean - half, mean + half], "values": values}


def pm(values: list[float], digits: int = 1) -> str:
    s = t_interval(values)
    return f"{num(s['mean'], digits)} ± {num(s['ci95'][1] - s['mean'], digits)}"


def md_table(columns: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def footer(names: list[str], command: str | list[str] | None = None, plots: list[str] = ()) -> str:
    """The line under a table: the command that reproduces it (the first report's, unless given), its reports and
    plots, and whether its figures were transcribed rather than measured into the report."""
    if command is None:
        command = report(names[0]).get("command")
    commands = [command] if isinstance(command, str) else list(command or [])
    parts = []
    if commands and commands != ["see each row"] and commands != ["see each table"]:
        parts.append("Command: " + "; ".join(f"`{c}`" if "`" not in c else c for c in commands) + ".")
    links = [f"[{n}.json](bench/{n}.json)" + (" (transcribed from the page at 8a06eed; no raw trials kept)"
                                               if "transcribed" in str(report(n).get("source", "")) else "")
             for n in names]
    links += [f"[{p}](bench/{p})" for p in plots]
    parts.append("Data: " + ", ".join(links) + ".")
    return " ".join(parts)


def transcribed(name: str, key: str, plots: list[str] = (), also: list[str] = ()) -> str:
    """A transcribed report's table KEY as it stands, with its own command where it has one."""
    data = report(name)
    t = data["tables"][key]
    return md_table(t["columns"], t["rows"]) + "\n\n" + footer([name, *also], t.get("command", data.get("command")),
                                                                 plots)


# ---------------------------------------------------------------------------------------------- the learning suite
def side(name: str, index: int = 0) -> dict:
    return report(name)["sides"][index]


def recipe_cell(suite: str) -> str:
    recipe = report(suite)["envs"][0]["recipe"]
    text = f"`{recipe['learner']}`"
    if recipe["self_play"]:
        text += ", self-play"
    elif recipe["agent_groups"]:
        text += ", shared by " + " and ".join(recipe["agent_groups"])
    if recipe["envs_per_actor"] != 1:
        text += f", {recipe['envs_per_actor']} copies"
    return text


PUBLISHED_SPREAD = ("MARLlib MAPPO -32.7 (20M agent steps); MAPPO's own code about -22.5 "
                    "([converted](#published-figures))")

#: The suite table's rows: (env, report of pzasync and its peers, suite report, score, digits, peers' columns,
#: published figure).
SUITE = [
    ("simple_spread_v3 (N=3)", "side_by_side_spread_10min_8copies", "suite_simple_spread_10min_8copies",
     "team return", 1, {"SB3": 1, "AgileRL": 2}, PUBLISHED_SPREAD),
    ("simple_speaker_listener_v4", "side_by_side_speaker_listener_10min", "suite_speaker_listener_10min",
     "team return", 1, {"SB3": 1, "AgileRL": "not run: two IPPO groups"}, "not checked"),
    ("pursuit_v5", "side_by_side_pursuit_10min_8copies", "suite_pursuit_10min_8copies",
     "team return (20 episodes)", 1, {"SB3": 1}, ""),
    ("multiwalker_v9", "side_by_side_multiwalker_10min_8copies", "suite_multiwalker_10min_8copies",
     "team return, greedy", 1, {"SB3": 1}, ""),
    ("multiwalker_v9", "side_by_side_multiwalker_10min_8copies_sampled", "suite_multiwalker_10min_8copies",
     "team return, sampled", 1, {"SB3": 1}, ""),
    ("pistonball_v6", "side_by_side_pistonball_10min_bb", "suite_pistonball_10min_bb",
     "team return, greedy", 1, {"SB3": "not run on drawn frames"}, "Butterfly-Baselines: [per piston](#pistonball)"),
    ("knights_archers_zombies_v11", "side_by_side_kaz_10min", "suite_kaz_10min",
     "zombies killed per episode (team)", 2, {"SB3": 1}, ""),
    ("connect_four_v3", "side_by_side_connect_four_10min", "suite_connect_four_10min",
     "win rate per seat vs one_ply", 2, {"SB3": 1}, ""),
    ("leduc_holdem_v4", "side_by_side_leduc_10min", "suite_leduc_10min",
     "big blinds per hand per seat vs random", 2, {"SB3": 1}, "none in these units"),
    ("leduc_holdem_v4", None, "suite_leduc_10min",
     "exploitability, big blinds per hand (lower is better)", 3, {}, "none in these units"),
]


def suite_table() -> str:
    rows = []
    names: list[str] = []
    for env, name, suite, score, digits, peers, published in SUITE:
        peer_cells = {"SB3": "", "AgileRL": ""}
        if name is not None:
            data = report(name)
            names.append(name)
            ours = side(name)["episodes_50"]
            random, untrained = (baseline(data["baselines"][k], digits) for k in ("random", "untrained"))
            for peer, where in peers.items():
                if isinstance(where, int):
                    peer_cells[peer] = interval(side(name, where)["episodes_50"], digits)
                    if "maskable" in side(name, where)["name"].lower():
                        peer_cells[peer] = "MaskablePPO " + peer_cells[peer]
                else:
                    peer_cells[peer] = where
            seeds = len(ours["values"])
            pz = interval(ours, digits)
        else:
            exp = report("leduc_exploitability_10min")
            names.append("leduc_exploitability_10min")
            random, untrained = num(exp["random"]["exploitability"], 3), num(exp["untrained"]["sampled"]["mean"], 3)
            ours = exp["pzasync"]["sampled"]["over_seeds"]
            pz, seeds = interval(ours, digits), len(ours["values"])
            peer_cells["SB3"] = "MaskablePPO " + interval(exp["peer"]["sampled"]["over_seeds"], digits)
        rows.append([env, recipe_cell(suite), score, seeds, random, untrained, pz, peer_cells["SB3"],
                     peer_cells["AgileRL"], published, curves(name, suite)])
    columns = ["env", "recipe", "score", "seeds", "random", "untrained", "pzasync at 10 min",
               "SB3 + SuperSuit at 10 min", "AgileRL IPPO at 10 min", "published", "curves"]
    suites = sorted({row[2] for row in SUITE} | {"suite_leduc_10min_exploitability_1seed"})
    return (md_table(columns, rows) + "\n\n" + footer(
        sorted(set(names)) + suites, ["pzasync suite --minutes 10 --seeds 3 --out suite",
                             "bash benchmarks/peers/suite_row.sh ENV OUT (one row: pzasync, then the SB3 peer; "
                             "PEER=none for pzasync alone)"]))


def curves(name: str | None, suite: str) -> str:
    """Links to a row's plots: pzasync beside the peers, and pzasync's own evaluation curve."""
    links = []
    if name is not None and (BENCH / f"{name}.png").exists():
        links.append(f"[beside the peers](bench/{name}.png)")
    links.append(f"[pzasync](bench/{suite}.png)")
    if suite == "suite_leduc_10min" and name is None:
        links = ["[one seed](bench/suite_leduc_10min_exploitability_1seed.png)"]
    return ", ".join(links)


# ---------------------------------------------------------------------------------------------- env by env
def side_cells(s: dict | None, digits: int = 1, per_seed: bool = True) -> list[str]:
    if s is None:
        return ["", ""] + ([""] if per_seed else [])
    cells = [interval(s.get("at_budget"), digits), interval(s.get("episodes_50"), digits)]
    if per_seed:
        cells.append(", ".join(num(v, digits) for v in s["episodes_50"]["values"]))
    return cells


def steps_of(s: dict) -> str:
    return steps_range([r["agent_steps"] for r in s["runs"]])


def variants_table(rows: list[tuple[str, dict | None, str]], name_list: list[str], first: str, digits: int = 1,
                   baselines: str | None = None, plots: list[str] = ()) -> str:
    """Variants of one env side by side: at the budget, the baseline episodes, per seed, agent steps."""
    base = report(baselines or name_list[0])
    episodes = base.get("baseline_episodes", 50)
    body = [[label, *side_cells(s, digits), steps] for label, s, steps in rows]
    body.append(["random team / untrained network", "", f"{baseline(base['baselines']['random'], digits)} / "
                 f"{baseline(base['baselines']['untrained'], digits)}", "", ""])
    columns = [first, f"at the budget: {base.get('budget_episodes', 10)} episodes, seed 9001 + seed",
               f"{episodes} episodes, seed 10007", f"per seed ({episodes})", "agent steps per run"]
    return md_table(columns, body) + "\n\n" + footer(name_list, None, plots)


def spread_variants() -> str:
    recipe = side("side_by_side_spread_10min_8copies")
    old = report("spread_recipe_10min")["runs"]
    one_copy = {"at_budget": t_interval([r["last"] for r in old]),
                "episodes_50": t_interval([r["episodes50"][0] for r in old])}
    before = report("side_by_side_spread_10min")
    rows = [("the recipe: `mappo,batch_size=4096,minibatch_size=256,epochs=10`, 8 env copies", recipe,
             steps_of(recipe)),
            ("the same learner, one env copy", one_copy, steps_range([r["agent_steps"] for r in old])),
            ("`mappo`'s defaults (batches of 256, 4 epochs), one env copy", before["sides"][0],
             steps_of(before["sides"][0])),
            ("SB3 2.9.2 PPO + SuperSuit, shared", before["sides"][1], steps_of(before["sides"][1])),
            ("AgileRL 2.58.0 IPPO, shared", before["sides"][2], steps_of(before["sides"][2]))]
    return variants_table(rows, ["side_by_side_spread_10min_8copies", "spread_recipe_10min",
                                 "side_by_side_spread_10min", "suite_2min", "peers_sb3_spread"],
                          "simple_spread_v3 (N=3), team return, 10 minutes",
                          plots=["side_by_side_spread_10min.png", "suite_simple_spread_10min.png",
                                 "suite_simple_spread_2min.png", "suite_speaker_listener_2min.png"])


def pursuit_variants() -> str:
    now, before = side("side_by_side_pursuit_10min_8copies"), report("side_by_side_pursuit_10min")["sides"]
    rows = [("the recipe: `ppo`, pursuers shared, 8 env copies", now, steps_of(now)),
            ("the same, one env copy", before[0], steps_of(before[0])),
            ("SB3 2.9.2 PPO + SuperSuit, shared", before[1], steps_of(before[1]))]
    return variants_table(rows, ["side_by_side_pursuit_10min_8copies", "side_by_side_pursuit_10min",
                                 "suite_pursuit_10min"],
                          "pursuit_v5, team return, 10 minutes",
                          plots=["side_by_side_pursuit_10min.png", "suite_pursuit_10min.png"])


def two_ways_table(rows: list[tuple[str, dict | None, dict | None, str]], names: list[str], first: str,
                   greedy_base: dict, sampled_base: dict, plots: list[str] = (), extra: list[list[str]] = ()) -> str:
    """Greedy and sampled scores side by side (Box-action envs)."""
    body = [[label, *side_cells(g, per_seed=False), *side_cells(s, per_seed=False), steps]
            for label, g, s, steps in rows]
    body += extra
    for key, label in (("random", "random team"), ("untrained", "untrained network")):
        body.append([label, "", baseline(greedy_base[key]), "", baseline(sampled_base[key]), ""])
    columns = [first, "greedy: at the budget (10 episodes)", "greedy: 50 episodes", "sampled: at the budget",
               "sampled: 50 episodes", "agent steps per run"]
    return md_table(columns, body) + "\n\n" + footer(names, None, plots)


def multiwalker_variants() -> str:
    g8, s8 = report("side_by_side_multiwalker_10min_8copies"), report("side_by_side_multiwalker_10min_8copies_sampled")
    g1, s1 = report("side_by_side_multiwalker_10min"), report("side_by_side_multiwalker_10min_sampled")
    rows = [("the recipe: `ppo,batch_size=2048,minibatch_size=256`, walkers shared, 8 env copies", g8["sides"][0],
             s8["sides"][0], steps_of(g8["sides"][0])),
            ("`ppo` (batch 512), one env copy", g1["sides"][0], s1["sides"][0], steps_of(g1["sides"][0])),
            ("SB3 2.9.2 PPO + SuperSuit, shared", g1["sides"][1], s1["sides"][1], steps_of(g1["sides"][1]))]
    return two_ways_table(rows, ["side_by_side_multiwalker_10min_8copies",
                                 "side_by_side_multiwalker_10min_8copies_sampled",
                                 "side_by_side_multiwalker_10min", "side_by_side_multiwalker_10min_sampled",
                                 "suite_multiwalker_10min"],
                          "multiwalker_v9, team return, 10 minutes", g8["baselines"], s8["baselines"],
                          ["side_by_side_multiwalker_10min_8copies_sampled.png", "side_by_side_multiwalker_10min.png",
                           "side_by_side_multiwalker_10min_sampled.png", "suite_multiwalker_10min.png"])


def pistonball_variants() -> str:
    """pistonball's 10-minute rows (the recipe, the old recipe, SB3's tutorial, blind players) and its AEC-path
    throughput (examples/pistonball_shared.py; raw frames with env workers) were measured before
    its frames were drawn (PettingZoo 1.27 draws them only with a render mode), so every policy saw one unchanging
    frame: their reports and plots stay linked, their figures are not shown as results."""
    return "Measured on undrawn frames, so not shown as results: " + footer(
        ["side_by_side_pistonball_10min_5seeds", "pistonball_10min_5seeds_sampled_at_budget",
         "side_by_side_pistonball_10min", "side_by_side_pistonball_10min_sampled", "pistonball_peer_tutorial_10min",
         "pistonball_discount_seed1", "pistonball_blind", "pistonball_sight_recipe", "suite_pistonball_10min",
         "suite_pistonball_10min_5seeds", "vector_pistonball", "vector_pistonball_shm", "pistonball_raw_workers_shm",
         "pistonball_raw_workers_pipe"],
        plots=["side_by_side_pistonball_10min.png", "side_by_side_pistonball_10min_sampled.png",
               "suite_pistonball_10min.png", "suite_pistonball_10min_5seeds.png", "vector_pistonball.png"])


def pistonball_seeds() -> str:
    """pistonball's recipe over seeds (benchmarks/pistonball_seeds.py): each seed's greedy rounds per piston at
    their agent steps, its final evaluation, where it first reached the bar, beside Butterfly-Baselines' curve."""
    data = report(PISTONBALL_RECIPE)

    def at(points: list[dict]) -> str:
        return "; ".join(f"{p['per_piston']:.1f} ({p['agent_steps'] / 1e3:.0f}k)" for p in points)

    rows = []
    for run in data["runs"]:
        rounds = [p for p in run["greedy"] if p["source"] != "final evaluation"]
        final = [p for p in run["greedy"] if p["source"] == "final evaluation"]
        first = run["bar_first_reached_at_agent_steps"]
        rows.append([f"seed {run['seed']}", at(rounds),
                     f"{final[0]['per_piston']:.1f} ± {final[0]['ci95'] / run['pistons']:.1f} "
                     f"({final[0]['agent_steps'] / 1e3:.0f}k, {final[0]['episodes']} episodes)" if final else "-",
                     f"{first / 1e3:.0f}k" if first is not None else "not reached",
                     f"{run['agent_steps'] / 1e3:.0f}k in {run['wall_seconds'] / 60:.1f} min"])
    reference, bar = data["reference"], data["bar"]
    shown = [p for p in reference["points"] if p["agent_steps"] <= bar["by_agent_steps"]] + reference["points"][-1:]
    first = min(p["agent_steps"] for p in reference["points"] if p["per_piston"] >= bar["per_piston"])
    rows.append([reference["label"], at(shown), "", f"{first / 1e3:.0f}k (mean of runs)", "SB3, its own hardware"])
    return md_table(["run", "greedy return per piston (agent steps)", "final evaluation", "90 first reached at",
                     "agent steps, wall time"], rows) + "\n\n" + md_table(
        ["PPO settings over seeds", "seeds at 90 greedy by 400k", f"greedy points from {STEADY_FROM // 1000}k "
         "at 90 or more", "lowest of them", "points after a seed's first at 90: at 90 or more", "lowest of them"],
        [*(variant_row(name) for name in PISTONBALL_VARIANTS), reference_row("butterfly_baselines_pistonball_v4")]
    ) + "\n\n" + footer([*PISTONBALL_VARIANTS, *PISTONBALL_IN_TEXT, "pistonball_stalls",
                         "butterfly_baselines_pistonball_v4"],
                        [*report(PISTONBALL_RECIPE)["command"], *report("pistonball_recipe_seeds")["command"],
                         report("butterfly_baselines_pistonball_v4")["command"]],
                        plots=[f"{name}.png" for name in (*PISTONBALL_VARIANTS, *PISTONBALL_IN_TEXT)])


#: pistonball's recipe on 2 cores (the first table), as benchmarks/pistonball_seeds.py reports it.
PISTONBALL_RECIPE = "pistonball_bb_recipe_seeds"
#: The recipe and the settings it was chosen against: its runs on a GPU machine, the earlier recipe and its variants.
PISTONBALL_VARIANTS = (PISTONBALL_RECIPE, "pistonball_bb_recipe_h200_seeds", "pistonball_recipe_seeds",
                       "pistonball_recipe_every_minute_seeds", "pistonball_narrow_gaussian_seeds",
                       "pistonball_std_to_small_seeds", "pistonball_entropy_bonus_seeds",
                       "pistonball_lr_linear_seeds")
#: Single-seed variants the section's text gives in full: their data and plots are linked, not tabled.
PISTONBALL_IN_TEXT = ("pistonball_bb_ent0_h200", "pistonball_bb_buffer4_seed0", "pistonball_std_schedule_seeds")
#: Where a pistonball run's greedy play counts as learned: what it scores from here on shows whether it holds.
STEADY_FROM = 150_000


def steadiness(curves: list[list[tuple[int, float]]], bar: float) -> list[str]:
    """How steady greedy play is once learned, over every seed's (agent steps, per piston) points: those from
    STEADY_FROM agent steps on at the bar or more, and those after the seed's first point at the bar, each with the
    lowest of them."""
    def count(points: list[float]) -> list[str]:
        return [f"{sum(v >= bar for v in points)} of {len(points)}", f"{min(points):.1f}" if points else "-"]
    steady = [v for curve in curves for at, v in curve if at >= STEADY_FROM]
    after = []
    for curve in curves:
        first = next((i for i, (_at, v) in enumerate(curve) if v >= bar), None)
        after += [v for _at, v in curve[first + 1:]] if first is not None else []
    return count(steady) + count(after)


def variant_row(name: str) -> list[str]:
    """One pistonball variant over its seeds: how many reach the bar by 400k agent steps, and how steady greedy
    play is once learned (`steadiness`)."""
    data = report(name)
    curves = [[(p["agent_steps"], p["per_piston"]) for p in run["greedy"]] for run in data["runs"]]
    return [data["label"], f"{data['seeds_reaching_bar_by_400k']} of {data['seeds']}",
            *steadiness(curves, data["bar"]["per_piston"])]


def reference_row(name: str) -> list[str]:
    """Butterfly-Baselines' runs (benchmarks/butterfly_baselines.py) counted as `variant_row` counts our seeds."""
    data = report(name)
    curves = [[(p["agent_steps"], p["per_piston"]) for p in run["curve"]] for run in data["runs"]]
    return ["Butterfly-Baselines' runs (SB3 PPO, 5 episodes a point, every 100k)",
            f"{data['runs_reaching_bar']} of {len(data['runs'])}", *steadiness(curves, data["bar"]["per_piston"])]


def team_learners() -> str:
    rows = []
    for env in ("simple_spread", "speaker_listener"):
        data = report("team_learners")[env]
        quiet = report("team_learners_quiet")["tables"][env]["rows"][0]
        ppo, mappo = data["ppo,lr=1e-3,batch_size=256"], data["mappo"]
        mean, half = data["random"]
        rows.append([env, "180 s, a loaded machine", f"{num(mean)} ± {num(half)}", pm(ppo["final"]),
                     pm(mappo["final"]), f"{steps_range(mappo['agent_steps'])} / {steps_range(ppo['agent_steps'])}"])
        rows.append([env, "120 s, the quiet machine", *quiet])
    return md_table(["env", "3 seeds of", "random team", "`ppo,lr=1e-3,batch_size=256`", "`mappo`",
                     "agent steps per run, mappo / ppo"], rows) + "\n\n" + footer(
        ["team_learners", "team_learners_quiet", "critics_and_memory"], None,
        ["team_learners.png", "team_learners_quiet.png"])


def candidates() -> str:
    """The suite recipes' 2-minute candidates, every team env in one table."""
    data = report("suite_recipe_candidates")
    rows = []
    for env in ("pursuit", "multiwalker", "knights_archers_zombies", "pistonball"):
        t = data["tables"][env]
        rows += [[env if i == 0 else "", *row] for i, row in enumerate(t["rows"])]
    return md_table(["env", "candidate (the agents of a prefix share one policy)", "agent steps",
                     "team return, first fifth -> last quarter (episodes)", "random team", "chosen"], rows) + (
        "\n\n" + footer(["suite_recipe_candidates"]))


# ---------------------------------------------------------------------------------------------- bench reports
def split_label(label: str) -> tuple[str, int, int, int]:
    config, _, rest = label.partition("@")
    rest, _, actors = rest.partition("a")
    envs, _, workers = rest.partition("w")
    return config, int(envs or 1), int(workers or 0), int(actors or 1)


def describe(label: str) -> str:
    config, envs, workers, actors = split_label(label)
    text = LABELS[config] + (f", {envs} env{'s' if envs != 1 else ''}" if label != config else "")
    text += f", {workers} worker{'s' if workers != 1 else ''}" if workers else ""
    return text + (f", {actors} actors" if actors != 1 else "")


def rate(data: dict, config: str) -> float | None:
    return data["summary"].get(config, {}).get("agent_steps_per_s", {}).get("median")


def ratio(a: float | None, b: float | None, fmt: str = "{:.2f}") -> str:
    return fmt.format(a / b) if a is not None and b else "-"


def time_to_target(curve: list[dict], target: float, window: int) -> dict | None:
    """As pzasync.bench.harness.time_to_target: the first point from which the worst agent's score, averaged over
    `window` points, holds the target."""
    worst = [min(p["scores"].values()) if p["scores"] else -math.inf for p in curve]
    for i in range(len(curve) - window + 1):
        if sum(worst[i:i + window]) / window >= target:
            return curve[i]
    return None


def reach(data: dict, config: str, target: float, window: int = 3) -> tuple[str, float | None]:
    """A configuration's time to target over seeds, "median [min-max] (reached/seeds)", and the median where a
    seed that never reached it counts as never (the bench's ratio)."""
    hits = [time_to_target(t["curve"], target, window) for t in data["trials"] if t["config"] == config]
    seconds = [h["seconds"] for h in hits if h]
    median = statistics.median([h["seconds"] if h else math.inf for h in hits])
    text = (f"{statistics.median(seconds):.1f} [{min(seconds):.1f}-{max(seconds):.1f}]" if seconds else "-")
    return f"{text} ({len(seconds)}/{len(hits)})", None if math.isinf(median) else median


def async_vs_sequential() -> str:
    rows = []
    for label, name, target in (
            ("time to 0.92 against random, 1 update per 4 agent steps (5 seeds)", "c4_target_r025", 0.92),
            ("both players learning: time to 0.85, worst player (5 seeds)", "c4_both_r025", 0.85)):
        data = report(name)
        seq, seq_median = reach(data, "sequential", target)
        cells, ratios = [], []
        for config in ("async_double_buffer", "async_snapshot"):
            if any(t["config"] == config for t in data["trials"]):
                text, median = reach(data, config, target)
                cells.append(text)
                ratios.append(ratio(median, seq_median))
            else:
                cells.append("-")
        rows.append([label + ": acting s", seq, *cells, " / ".join(ratios)])
    for label, name in (("agent-steps/s, 1 update per 4 agent steps (5 seeds, 80k steps)", "c4_target_r025"),
                        ("agent-steps/s, 1 update per 4 agent steps (3 seeds, 30k steps)", "c4_throughput"),
                        ("agent-steps/s, 1 update per agent step (5 seeds, 40k steps)", "c4_target_r1"),
                        ("agent-steps/s on one core (`--cores 1`), 1 update per 4 agent steps (3 seeds)", "c4_1core")):
        data = report(name)
        cells = [spread(data["summary"].get(c, {}).get("agent_steps_per_s")) for c in
                 ("sequential", "async_double_buffer", "async_snapshot")]
        walls = [ratio(rate(data, "sequential"), rate(data, c)) for c in ("async_double_buffer", "async_snapshot")
                 if c in data["summary"]]
        rows.append([label, *cells, " / ".join(walls)])
    names = ["c4_target_r025", "c4_both_r025", "c4_throughput", "c4_target_r1", "c4_1core"]
    return md_table(["connect_four (player_1 random unless stated)", "sequential", "async double buffer",
                     "async snapshot", "async / sequential (double buffer / snapshot)"], rows) + "\n\n" + footer(
        names, "bash benchmarks/run_all.sh (each report's own command is its `command` key)",
        [f"{n}.png" for n in names if (BENCH / f"{n}.png").exists()])


def yardstick_table() -> str:
    data, earlier = report("c4_yardstick_mirror"), report("c4_yardstick")
    rows = []
    for target in (0.2, 0.25, 0.3, 0.35, 0.4):
        seq, seq_median = reach(data, "sequential", target)
        asy, asy_median = reach(data, "async_double_buffer", target)
        old = ratio(reach(earlier, "async_double_buffer", target)[1], reach(earlier, "sequential", target)[1])
        rows.append([f"{target:.2f}", seq, asy, ratio(asy_median, seq_median), old])
    rates = [spread(data["summary"][c]["agent_steps_per_s"]) for c in ("sequential", "async_double_buffer")]
    rows.append(["agent-steps/s", *rates, ratio(rate(data, "sequential"), rate(data, "async_double_buffer")), ""])
    columns = ["target (worst seat vs one_ply)", "sequential: acting s (seeds reached)", "async double buffer",
               "async / sequential (median seed)", "the same, earlier learner `dqn,gamma=0.9`"]
    return md_table(columns, rows) + "\n\n" + footer(
        ["c4_yardstick_mirror", "c4_yardstick"], None, ["c4_yardstick_mirror.png", "c4_yardstick.png"])


def vector_rows(data: dict, configs: list[str] | None = None, prefix: str = "", single: str = "async_idle") -> list:
    rows = []
    for config in configs or data["summary"]:
        r = rate(data, config)
        rows.append([prefix + describe(config), spread(data["summary"][config]["agent_steps_per_s"]),
                     ratio(r, rate(data, "bare_policy")), ratio(r, rate(data, "bare_random")),
                     ratio(r, rate(data, single))])
    return rows


def vector_table(name: str, single: str = "async_idle", plots: list[str] = (), also: list[str] = (),
                 configs: list[str] | None = None, more: list[list[str]] = (),
                 command: list[str] | None = None) -> str:
    rows = vector_rows(report(name), configs, single=single) + list(more)
    return md_table(["configuration", "agent-steps/s", "/ bare loop with the same policies", "/ env alone",
                     "/ single-env actor"], rows) + "\n\n" + footer([name, *also], command, plots)


def vector_yardstick() -> str:
    rr005, rr01 = report("vector_yardstick_rr005"), report("vector_yardstick_rr01")
    rows = []
    for target in (0.15, 0.2, 0.25, 0.3):
        cells = []
        for data in (rr005, rr01):
            one, one_median = reach(data, "async_double_buffer", target)
            many, many_median = reach(data, "async_double_buffer@16", target)
            cells += [one, many, ratio(many_median, one_median)]
        rows.append([f"{target:.2f}", *cells])
    rates = []
    for data in (rr005, rr01):
        rates += [spread(data["summary"][c]["agent_steps_per_s"])
                  for c in ("async_double_buffer", "async_double_buffer@16")]
        rates.append(ratio(rate(data, "async_double_buffer@16"), rate(data, "async_double_buffer")))
    rows.append(["agent-steps/s", *rates])
    return md_table(["target (worst seat vs one_ply)", "replay ratio 0.05: 1 copy, acting s (seeds reached)",
                     "16 copies", "16 / 1", "replay ratio 0.1: 1 copy", "16 copies", "16 / 1"], rows) + "\n\n" + footer(
        ["vector_yardstick_rr005", "vector_yardstick_rr01", "vector_yardstick"], None,
        ["vector_yardstick_rr005.png", "vector_yardstick_rr01.png", "vector_yardstick.png"])


def hosts_table() -> str:
    rows, names = [], []
    for n in (2, 4, 8, 16, 32):
        name = f"hosts_n{n}"
        data, names = report(name), names + [name]
        s = data["summary"]
        rows.append([n, f"{data['settings']['agent_steps']:,} x {data['settings']['seeds']}",
                     f"{rate(data, 'sequential'):,.0f}", f"{rate(data, 'async_double_buffer'):,.0f}",
                     ratio(rate(data, "sequential"), rate(data, "async_double_buffer")),
                     f"{s['async_double_buffer']['startup_seconds']['median']:.1f} s",
                     f"{s['async_double_buffer']['peak_rss_mb']['median']:,.0f} / "
                     f"{s['sequential']['peak_rss_mb']['median']:,.0f} MB",
                     f"{s['async_double_buffer']['shm_bytes']['median'] / 2**20:,.0f} MB"])
    for label, wall, rss, startup in report("learner_processes_n8")["tables"]["processes"]["rows"]:
        rows.append([f"8: {label}", "20,000 x 2", "", "", wall, startup, f"{rss} / -", ""])
    d = report("pistonball_learners")
    rows.append([f"pistonball: {d['pistons']} PPO learners (batch 512) in {d['learner_processes']} host",
                 f"{d['agent_steps']:,} in {d['seconds']:.0f} s", "", f"{d['agent_steps_per_s']:,.0f}",
                 f"{d['updates_min_max'][0]} updates each, {d['transitions_dropped']} dropped",
                 f"{d['startup_s']:.1f} s",
                 f"{d['peak_rss_all_processes_mb']:,.0f} / - MB", f"{d['shm_bytes'] / 2**20:,.0f} MB"])
    return md_table(["N agents", "agent steps x seeds", "sequential, agent-steps/s", "async", "async / sequential wall",
                     "async start-up", "peak RSS async / sequential", "shm"], rows) + "\n\n" + footer(
        names + ["learner_processes_n8", "pistonball_learners", "spread_n2", "spread_n4", "spread_n8"],
        "python benchmarks/agent_scaling.py --agents "
        "2,4,16,32; python benchmarks/agent_scaling.py --agents 8 --seeds 5; learner processes: --agents 8 --hosts K; "
        "python benchmarks/pistonball_learners.py --seconds 180",
        ["agent_scaling.png"])


def agent_memory_table() -> str:
    """battle_v4 at 12 to 512 agents in two groups (benchmarks/agent_memory.py): start-up and memory against the
    agent count."""
    data = report("agent_memory")
    rows = [[f"{r['agents']} (map_size {r['map_size']})", r["learning_units"],
             f"{r['startup_s']:.1f} ({r['imports_s']:.1f} + {r['plan_s']:.2f} + {r['run_startup_s']:.1f})",
             f"{r['plan_shm_mb']:,.0f} / {r['shm_mb']:,.0f}",
             f"{r['actor_peak_rss_mb']:,.0f} ({r['actor_peak_rss_mb'] - r['shm_mb']:,.0f})",
             " + ".join(f"{m:,.0f}" for m in r["learner_peak_rss_mb"]) or "-", f"{r['agent_steps_per_s']:,.0f}"]
            for r in data["rows"]]
    note = f"Measured: {data['note']}. " if data.get("note") else ""
    return md_table(["agents", "learning units", "start-up, s (imports + plan + run)", "shm MB, planned / created",
                     "actor peak RSS MB (less shm)", "learner host peak RSS MB", "agent-steps/s"], rows) + "\n\n" + \
        note + footer(["agent_memory"])


def ray_tables() -> str:
    data = report("ray_backend")
    shm = data["one_machine"]["shm"]["agent_steps_per_s"]
    rows = []
    for key, label, transport in (("shm", "`shm` (local process)", "shared memory"),
                                  ("ray", "`ray` (learner on the actor's node)", "shared memory"),
                                  ("ray_object_store", "`ray`, `ray_transport=\"object_store\"`",
                                   "chunks + versioned vectors through Ray")):
        r = data["one_machine"][key]
        rows.append([label, transport, f"{r['agent_steps_per_s']:,.0f}", f"{r['agent_steps_per_s'] / shm:.2f}",
                     f"{r['startup_s']:.1f} s", f"{r['policy_lag_mean']:.0f} / {r['policy_lag_p95']:.0f}",
                     f"{r['actor_rss_mb']:,.0f} / {r['learner_rss_mb']:,.0f} MB"])
    cluster = "; ".join(
        f"{label}: {c['remote']['agent_steps_per_s']:,.0f} against {c['local']['agent_steps_per_s']:,.0f} "
        f"(+{c['extra_us_per_transition']:,.0f} µs of actor time per transition, {c['remote']['dropped']} dropped)"
        for label, c in data["cluster"].items())
    return (md_table(["backend, one machine", "learner transport", "agent-steps/s", "/ shm", "start-up",
                      "policy lag mean / p95", "actor / learner peak RSS"], rows) + "\n\n"
            + "A simulated cluster (its nodes on the same machine), agent-steps/s with the learners on worker nodes "
            "through the object store against learners local over shared memory: " + cluster + ".\n\n"
            + footer(["ray_backend"], None, ["ray_backend.png"]))


#: The peers' throughput rows: (setting, report, its entries shown); ratios are to the group's first entry.
PEERS = [
    ("connect_four, collection, one env", "peers", ["pzasync", "tianshou", "torchrl", "env alone (bare_loop, random)"]),
    ("connect_four, collection, vectorised", "peers_vector",
     ["pzasync vectorised (envs_per_actor=16)", "tianshou vectorised (DummyVectorEnv x8)"]),
    ("", "peers_vector8", ["pzasync vectorised (envs_per_actor=8)", "tianshou vectorised (DummyVectorEnv x8)"]),
    ("simple_spread, collection, 8 env copies each", "peers_spread",
     ["pzasync", "sb3 + supersuit (concat_vec_envs x8)"]),
    ("connect_four, PPO training, one policy per agent", "peers_training", ["pzasync", "rllib"]),
]


def peers_table() -> str:
    rows = []
    for setting, name, keys in PEERS:
        data = report(name)
        first = data["summary"][keys[0]]["median"]
        for i, key in enumerate(keys):
            library = key.split()[0]
            version = data.get("versions", {}).get(library.lower())
            label = key + (f" {version}" if version and library == key else "")
            rows.append([setting if i == 0 else "", label, spread(data["summary"][key]),
                         f"{data['summary'][key]['median'] / first:.2f}"])
    return md_table(["setting", "library", "agent-steps/s", "/ the setting's first row"], rows) + "\n\n" + footer(
        [name for _, name, _ in PEERS], "python benchmarks/peers.py ... (in the peers' virtualenv; each report's "
        "`command` key has its options)")


#: The parallel path's envs (benchmarks/run_parallel.sh): report name, the env as the table names it.
PARALLEL_ENVS = [("spread3", "simple_spread, 3 agents"), ("spread20", "simple_spread, 20 agents"),
                 ("pursuit", "pursuit_v5, 8 pursuers"), ("pistonball", "pistonball_v6, 20 pistons"),
                 ("battle", "battle_v4 (MAgent2), 162 agents")]


def best_actor(data: dict) -> tuple[str, float]:
    """The actor configuration (async, idle learners) with the highest agent-steps/s: (its label, its rate)."""
    rates = {c: rate(data, c) for c in data["summary"] if c.startswith("async_idle")}
    label = max(rates, key=lambda c: rates[c] or 0.0)
    return label, rates[label] or 0.0


def peer_best(name: str, peer: str) -> tuple[str, float | None]:
    """A peer's best row on one env (docs/bench/parallel_NAME_{sb3,pufferlib}.json): "K copies", its rate."""
    path = BENCH / f"parallel_{name}_{'sb3' if peer == 'sb3' else 'pufferlib'}.json"
    if not path.exists():
        return "-", None
    rows = [r for r in report(path.stem)["rows"] if r["peer"] == peer and r.get("agent_steps_per_s")]
    if not rows:
        return "-", None
    row = max(rows, key=lambda r: r["agent_steps_per_s"])
    return f"{row['copies']} cop{'y' if row['copies'] == 1 else 'ies'}", row["agent_steps_per_s"]


def parallel_table() -> str:
    """Per env: the parallel API's loop with batched forwards (the reference), the actor's best configuration and
    its 1-copy figure, the AEC loop with a forward per decision, and the peers' best collection."""
    rows, names = [], []
    for name, label in PARALLEL_ENVS:
        data = report(f"parallel_{name}")
        names.append(f"parallel_{name}")
        bare = rate(data, "bare_parallel")
        best, best_rate = best_actor(data)
        one = rate(data, "async_idle")
        peers = [peer_best(name, peer) for peer in ("sb3", "pufferlib", "pufferlib-loop")]
        names += [n for n in (f"parallel_{name}_sb3", f"parallel_{name}_pufferlib") if (BENCH / f"{n}.json").exists()
                  and n not in names]
        where = describe(best).split(", ", 1)[1] if best != "async_idle" else "1 copy"
        rows.append([label, num(bare, 0), f"{num(best_rate, 0)} ({where.replace('idle learners, ', '')})",
                     ratio(best_rate, bare), f"{num(one, 0)} ({ratio(one, bare)})",
                     num(rate(data, "bare_policy"), 0),
                     *[f"{num(r, 0)} ({k})" if r else "-" for k, r in peers],
                     ratio(best_rate, max((r for _, r in peers[:1] if r), default=None)),
                     ratio(best_rate, max((r for _, r in peers[1:] if r), default=None))])
    return md_table(["env", "parallel API, batched forwards", "pzasync actor, best", "/ parallel API",
                     "actor, 1 copy (/ parallel API)", "AEC loop, a forward per decision", "SB3 + SuperSuit",
                     "PufferLib `evaluate`", "PufferLib minimal loop", "pzasync best / SB3",
                     "pzasync best / PufferLib best"], rows) + "\n\n" + footer(
        names, ["bash benchmarks/run_parallel.sh", "each report's `command` key has its own"])


def battle_table() -> str:
    """Issue 55's table on battle_v4, re-run, less what the parallel table has (the bench, the peers): the loops
    over the env's parallel API and a 3-minute `pzasync train`."""
    run = report("battle_run")
    loops, train = run["loops_agent_steps_per_s"], run["train"]
    rows = [["the env's parallel API, random actions", num(loops["random"], 0)],
            ["the parallel API, one batched forward per team and cycle", num(loops["batched"], 0)],
            ["the parallel API, one forward per agent", num(loops["per_agent"], 0)]]
    rows.append([f"`pzasync train` ({train['minutes']:g} min, learners training): agent-steps/s of the run",
                 num(train["agent_steps_per_s"], 0)])
    rows.append(["evaluation rows written while training (rounds; games per row)",
                 f"{train['eval_rows_while_training']} ({train['eval_rounds_while_training']}; "
                 f"{', '.join(str(g) for g in train['eval_games_per_row'])})"])
    rows.append(["final evaluation: games per side, seconds / the run's",
                 f"{train['final_evaluation_games']}, {train['final_evaluation_s']:.0f} s / "
                 f"{train['wall_s']:.0f} s ({train['final_over_run']:.2f})"])
    return md_table(["loop", "agent-steps/s"], rows) + "\n\n" + footer(
        ["battle_run", "parallel_battle"], [run["command"], report("parallel_battle")["command"]])


#: The reports of `benchmarks/env_api_rows.py` (and, for an env the suite does not hold, of
#: `benchmarks/env_api_train_rows.py`), oldest first: each holds a day's seeds of some envs, every seed trained through
#: both paths on that day (a seed's pair is compared, seeds of different days side by side).
ENV_API_REPORTS = ("suite_env_api_10min", "suite_env_api_10min_spread_seeds12", "suite_env_api_10min_kaz_seeds12",
                   "suite_env_api_10min_speaker_listener", "suite_env_api_10min_speaker_listener_seeds12",
                   "suite_env_api_10min_multiwalker", "suite_env_api_10min_multiwalker_seeds12",
                   "suite_env_api_10min_pistonball_seed0", "suite_env_api_10min_pistonball_seed1",
                   "suite_env_api_10min_pistonball_seed2", "suite_env_api_10min_pursuit_seeds12",
                   "battle_env_api_10min")


def env_api_table() -> str:
    """Learning at equal wall time through the AEC path and the parallel path: `pzasync suite` on the same envs and
    seeds with `--env-api aec` and `--env-api parallel`, each seed's pair on one day; one row per env, its seeds
    from every report in `ENV_API_REPORTS`."""
    envs: dict[str, dict] = {}
    for name in ENV_API_REPORTS:
        for env in report(name)["envs"]:
            row = envs.setdefault(env["short"], {"score": env["score"], "random": env["random"],
                                                 "untrained": env["untrained"], "pairs": {}})
            for api in ("aec", "parallel"):
                path = env[api]
                for seed, score, steps in zip(path["seeds"], path["scores"], path["agent_steps"]):
                    row["pairs"].setdefault(seed, {})[api] = (score, steps)

    def steps_text(steps: float) -> str:
        return f"{steps / 1e6:.2f}M" if steps >= 1e6 else f"{steps / 1e3:.0f}k"

    rows = []
    for short, env in envs.items():
        pairs = [env["pairs"][seed] for seed in sorted(env["pairs"])]
        each = {api: ", ".join(f"{num(pair[api][0], 2)} ({steps_text(pair[api][1])})" for pair in pairs)
                for api in ("aec", "parallel")}
        differences = [pair["parallel"][0] - pair["aec"][0] for pair in pairs]
        rows.append([short, env["score"], ", ".join(str(seed) for seed in sorted(env["pairs"])),
                     num(env["random"], 2), num(env["untrained"], 2), each["aec"], each["parallel"],
                     pm(differences, 2) if len(differences) > 1 else num(differences[0], 2),
                     ", ".join(ratio(pair["parallel"][1], pair["aec"][1]) for pair in pairs)])
    return md_table(["env", "score", "seeds", "random", "untrained", "AEC path, each seed (agent steps)",
                     "parallel path, each seed (agent steps)", "parallel - AEC, mean over seeds",
                     "agent steps, parallel / AEC"], rows) + "\n\n" + footer(
        list(ENV_API_REPORTS), [report(name)["command"] for name in ENV_API_REPORTS],
        plots=[f"{name}.png" for name in ENV_API_REPORTS if (BENCH / f"{name}.png").exists()])


#: Yardsticks beside the pixel configurations: the same env on its vector observations for as many agent steps
#: as its image configuration took in 10 minutes (benchmarks/pixel_defaults.py --configs kaz_vector --steps N).
PIXEL_YARDSTICKS = ("kaz_vector_at_image_steps",)


#: The pixel configurations' reports, in row order; a report's "superseded" configurations (rerun since, its
#: "superseded_why" says why, and said in the text) are not tabled.
PIXEL_REPORTS = ("pixel_defaults_10min", "pixel_defaults_kaz_image_10min",
                 "pixel_defaults_kaz_image_10min_observed_once")


def pixel_defaults_table() -> str:
    """A bare `pzasync train` on pixel env configurations without a recipe for them: each run's final evaluation,
    trained beside its untrained network and random play (docs/bench/pixel_defaults_10min.json); then the
    yardsticks (`PIXEL_YARDSTICKS`), labelled with their budget."""
    names = [*PIXEL_REPORTS, *PIXEL_YARDSTICKS]
    rows = []
    for name in names:
        data = report(name)
        for config in data["configs"]:
            if config["key"] in data.get("superseded", ()):
                continue
            args = ", ".join(f"{k}={v}" for k, v in config["env_args"].items())
            label = (f" (vector observations, {data['budget']}: a yardstick)" if name in PIXEL_YARDSTICKS
                     else f" ({args})" if args else "")
            rows.append(pixel_row(config["env"].rsplit(".", 1)[-1] + label, config["runs"]))
    return md_table(["env (no recipe for its frames)", "learner", "seeds", "agent steps", "episodes",
                     "trained", "untrained", "random", "apart from both"], rows) + "\n\n" + footer(
        names, [report(name)["command"] for name in names], plots=[f"{name}.png" for name in names])


def pixel_row(label: str, runs: list[dict]) -> list[str]:
    """One row of `pixel_defaults_table`: a configuration's runs, one figure a seed, in seed order."""

    def each(key: str) -> str:
        return "; ".join(f"{num(run['final'][key]['mean'], 1)} ± {num(run['final'][key]['ci95'], 1)}" for run in runs)

    return [label, ", ".join(sorted({learner for run in runs for learner in run["learners"]})),
            ", ".join(str(run["seed"]) for run in runs),
            ", ".join(f"{run['agent_steps'] / 1e3:.0f}k" for run in runs),
            ", ".join(str(run["final_episodes"]) for run in runs),
            each("trained"), each("untrained"), each("random"),
            f"{sum(run['passes'] for run in runs)} of {len(runs)}"]


def default_run_table() -> str:
    """The default run's seats against the one-ply player: the seeds transcribed from before issue 54's cleanup
    pass, then a row per checkout of the runs measured since, paired by seed on one machine
    (docs/bench/default_run_c4_cleanup.json, written by `benchmarks/default_run.py --report`)."""
    before, after = report("default_run_c4"), report("default_run_c4_cleanup")
    table = before["tables"]["seeds"]

    def seat(run: dict, agent: str) -> str:
        score = run["scores"][f"{agent} vs one_ply"]
        low, high = score["ci95"]
        return f"{score['win']:.1%} [{low * 100:.0f}-{high * 100:.0f}]"

    rows = list(table["rows"])
    for commit in dict.fromkeys(run["commit"] for run in after["runs"]):
        runs = sorted((run for run in after["runs"] if run["commit"] == commit), key=lambda run: run["seed"])
        steps = [run["agent_steps"] for run in runs]
        updates = [max(run["updates"].values()) for run in runs]
        label = after.get("labels", {}).get(commit, f"at {commit}")  # "labels": how the page names a checkout
        rows.append([f"{label}, seeds {', '.join(str(run['seed']) for run in runs)}: "
                     f"{min(steps) / 1e6:.2f}-{max(steps) / 1e6:.2f}M agent steps, {min(updates) / 1e3:.0f}-"
                     f"{max(updates) / 1e3:.0f}k updates in {runs[0]['minutes']:g} minutes",
                     "; ".join(f"{seat(run, 'player_0')} / {seat(run, 'player_1')}" for run in runs), "", ""])
    return md_table(table["columns"], rows) + "\n\n" + footer(
        ["default_run_c4", "default_run_c4_cleanup"], [table.get("command", before["command"]), after["command"]],
        ["default_train_eval.png"])


def long_runs_table() -> str:
    """Every `pzasync suite --minutes 60` report (docs/bench/suite_60min_*.json, benchmarks/long_runs.py): the
    evaluation curve at 10 and 30 minutes, the suite's final round, and the final checkpoints scored again. A
    report's "variant" names a recipe that has changed since the run (long_runs.py --variant)."""
    names = sorted(path.stem for path in BENCH.glob("suite_60min_*.json"))

    def at(curve: list[dict], seconds: float) -> str:  # the last evaluation round begun by then
        points = [p for p in curve if p["wall_s"] <= seconds + 30 and not p["final"]]
        return num(points[-1]["score"], 2) if points else "-"

    rows = []
    for name in names:
        data = report(name)
        learner, copies = data["settings"].get("learner"), data["settings"].get("envs_per_actor")
        variant = (data.get("variant") or (f"`{learner}`" if learner else "the recipe's")) + (
            f", {copies} env copies" if copies else "")
        for env in data["envs"]:
            for run in env["runs"]:
                rescored = run["rescored"]
                rows.append([env["short"], variant, str(run["seed"]),
                             f"{run['agent_steps'] / 1e6:.1f}M", at(run["curve"], 600), at(run["curve"], 1800),
                             num(run["final"], 2), f"{num(rescored['mean'], 2)} ± {num(rescored['ci95'], 2)}",
                             baseline(env["baselines"]["untrained"], 2), baseline(env["baselines"]["random"], 2)])
    return md_table(["env", "learner", "seed", "agent steps", "10 min", "30 min", "60 min (suite's final round)",
                     "60 min, 50 episodes", "untrained", "random"], rows) + "\n\n" + footer(
        names, [report(name)["command"] for name in names], plots=[f"{name}.png" for name in names])


#: The cleanup pass's paired runs (docs/bench/cleanup_c4_*.json): report suffix, the column it fills.
CLEANUP_RUNS = [("before", "before the pass (8a06eed)"), ("now", "now"), ("plain", "now, `by_hand=False`")]


def cleanup_table() -> str:
    """Issue 54's end-to-end figures before and after the cleanup pass, and with DQN's fast path off: the same
    connect_four bench in each checkout (medians over seeds), and the learner's updates/s in paired rounds."""
    runs = {key: report(f"cleanup_c4_{key}") for key, _ in CLEANUP_RUNS}
    rows = []
    for config, label in (("bare_policy", "bare loop with the same forwards, agent-steps/s"),
                          ("async_idle", "the actor, learners idle, agent-steps/s"),
                          ("sequential", "sequential runner, 1 update per 4 agent steps, agent-steps/s"),
                          ("async_double_buffer", "async runner (double buffer), the same, agent-steps/s")):
        rates = [rate(runs[key], config) for key, _ in CLEANUP_RUNS]
        rows.append([label, *(num(r, 0) for r in rates), ratio(rates[1], rates[0]), ratio(rates[1], rates[2])])
    overhead = [ratio(rate(runs[key], "async_idle"), rate(runs[key], "bare_policy")) for key, _ in CLEANUP_RUNS]
    rows.append(["the actor / the bare loop", *overhead, "-", "-"])
    learner = report("cleanup_learner")
    rows.append([f"learner updates/s, one thread ({learner['rounds']} paired rounds)",
                 *(num(learner["updates_per_s"][key], 0) for key, _ in CLEANUP_RUNS),
                 ratio(learner["updates_per_s"]["now"], learner["updates_per_s"]["before"]),
                 ratio(learner["updates_per_s"]["now"], learner["updates_per_s"]["plain"])])
    return md_table(["connect_four, player_1 random", *(label for _, label in CLEANUP_RUNS), "now / before",
                     "by hand / plain"], rows) + "\n\n" + fused_adam_table() + "\n\n" + footer(
        [f"cleanup_c4_{key}" for key, _ in CLEANUP_RUNS] + ["cleanup_learner", "hot_paths", "actor_and_learners_c4",
                                                           "fused_adam_c4"],
        [runs["now"]["command"] + " (before: in the 8a06eed checkout; plain: `--learner dqn,by_hand=False`)",
         learner["command"], report("fused_adam_c4")["command"]],
        plots=["hot_paths_ab_2026-11-27.txt", "acting_ab_2026-11-27.txt", "time_to_target_acting_2026-11-27.jsonl"])


def fused_adam_table() -> str:
    """DQN's `fused_adam` against torch's loop, paired on one machine (docs/bench/fused_adam_c4.json,
    benchmarks/fused_adam.py): the learner's updates/s, and whole bench runs round by round."""
    data = report("fused_adam_c4")
    learner, bench = data["learner"], data["bench_agent_steps_per_s"]
    rounds = learner["fused_over_loop_per_round"]
    rows = [[f"learner updates/s, one thread ({len(rounds)} paired rounds, fused / loop per round: "
             f"{', '.join(f'{r:.2f}' for r in rounds)})", num(learner["updates_per_s"]["loop"], 0),
             num(learner["updates_per_s"]["fused"], 0), f"{learner['fused_over_loop']:.2f}"]]
    for config, label in (("sequential", "sequential runner, agent-steps/s"),
                          ("async_double_buffer", "async runner (double buffer), agent-steps/s")):
        loop, fused = bench["loop"][config], bench["fused"][config]
        rows.append([f"{label} (each round)", "; ".join(num(x, 0) for x in loop), "; ".join(num(x, 0) for x in fused),
                     "; ".join(ratio(f, x) for f, x in zip(fused, loop))])
    return md_table(["DQN's Adam, connect_four, one machine", "`fused_adam=False` (default: torch's loop)",
                     "`fused_adam=True`", "fused / loop"], rows)


# ---------------------------------------------------------------------------------------------- the registry
TABLES: dict[str, Callable[[], str]] = {
    "suite": suite_table,
    "default_run": default_run_table,
    "c4_yardstick": yardstick_table,
    "candidates": candidates,
    "recipe_connect_four": lambda: transcribed("recipe_choices_c4", "choices", also=["dqn_values", "runtime_costs"]),
    "recipe_tictactoe": lambda: transcribed("tictactoe_perfect", "seeds"),
    "team_learners": team_learners,
    "spread_variants": spread_variants,
    "pursuit_variants": pursuit_variants,
    "multiwalker_variants": multiwalker_variants,
    "pistonball_variants": pistonball_variants,
    "pistonball_seeds": pistonball_seeds,
    "candidates_leduc": lambda: transcribed("suite_recipe_candidates", "leduc", also=["leduc_exploitability_10min"],
                                            plots=["suite_leduc_10min_exploitability_1seed.png"]),
    "async_vs_sequential": async_vs_sequential,
    "cleanup": cleanup_table,
    "vector_c4": lambda: vector_table(
        "vector_c4", plots=["vector_c4.png", "actors_c4.png"],
        also=["actors_c4", "vector_c4_n16_shm", "vector_c4_n16", "vector_c4_n16_repeat"],
        more=vector_rows(report("actors_c4"), ["async_idle@1a2", "async_idle@16a2", "async_idle@64a2"],
                         prefix="(a slower session, its own ratios) "),
        command=[report("vector_c4")["command"], report("actors_c4")["command"]]),
    "vector_yardstick": vector_yardstick,
    "hosts": hosts_table,
    "agent_memory": agent_memory_table,
    "remote": lambda: transcribed("remote_overhead", "quiet"),
    "ray_backend": ray_tables,
    "peers": peers_table,
    "parallel": parallel_table,
    "battle": battle_table,
    "env_api": env_api_table,
    "pixel_defaults": pixel_defaults_table,
    "long_runs": long_runs_table,
    "reliability": lambda: transcribed("reliability", "soak", also=["tests_learning_bars"]),
}


# ---------------------------------------------------------------------------------------------- the page
def render(page: str) -> str:
    """The page with every table block regenerated from its reports."""
    unknown = [name for _, name, _, _ in BLOCK.findall(page) if name not in TABLES]
    if unknown:
        raise SystemExit(f"docs/benchmarks.md names tables no generator makes: {', '.join(unknown)}")
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + "\n" + m.group(4), page)


def stale(page: str) -> list[str]:
    """The tables of `page` that differ from what their reports give."""
    fresh = {m.group(2): m.group(3) for m in BLOCK.finditer(render(page))}
    return [m.group(2) for m in BLOCK.finditer(page) if fresh[m.group(2)] != m.group(3)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation dropped (not `-` or `_`), spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: str) -> set[str]:
    """The anchors of the page's headings (fenced code skipped; a repeated heading gets GitHub's -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in page.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#").replace("`", ""))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table differs from its reports")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    page = args.page.read_text()
    if args.check:
        out_of_date = stale(page)
        if out_of_date:
            print(f"{args.page}: out of date: {', '.join(out_of_date)} "
                  "(python benchmarks/results_page.py rewrites them)", file=sys.stderr)
            return 1
        return 0
    new = render(page)
    if new != page:
        args.page.write_text(new)
        print(f"{args.page}: rewrote {', '.join(stale(page))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
