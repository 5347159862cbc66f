"""The learning suite (`pzasync suite`, docs/benchmarks.md "Learning suite"): each suite env trained with its
recipe for a fixed wall budget per seed, its score against wall time, beside random play and an untrained
network, in one JSON report (docs/suite-schema.json), one PNG per env and a summary table.

Each run is what `pzasync train ENV` runs without options (the env's recipe: learner, agent groups, league, env
arguments and wrappers, env copies), on the async runner, with the evaluator scoring the newest published
policies every `eval_every_s` against the recipe's yardstick; its rows (metrics.jsonl, and TensorBoard with the
extra) are the curve. The evaluator scores units in the mode that fits the game (docs/league.md: each learning
seat, the team, or each side); a round's score is the mean over the scored units of each unit's win rate (game
results) or mean return (anything else), the same score `score_units` gives the baselines: the same units played
by random players, and by untrained networks of the recipe's learners, against the same yardstick.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from pzasync.bench.harness import jsonable
from pzasync.core.environments import ENV_APIS
from pzasync.errors import ConfigError

#: The report's format; docs/suite-schema.json describes it.
SCHEMA = "pzasync-suite/1"
#: Two-sided 95% t quantiles by degrees of freedom (the interval over seeds).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
#: Seed of the baselines' episodes and untrained networks, the same for every env and run.
BASELINE_SEED = 10_007


@dataclass
class SuiteSettings:
    """What one `pzasync suite` invocation runs."""

    #: Env ids (any form `pzasync train` takes); empty: every env of `recipes.SUITE`.
    envs: list[str] = field(default_factory=list)
    #: Wall-clock minutes of training per env and seed.
    minutes: float = 10.0
    #: Seeds per env (first_seed .. first_seed + seeds - 1).
    seeds: int = 3
    #: The first seed: more seeds for an earlier suite's envs without training its seeds again.
    first_seed: int = 0
    #: Where the report, the plots and the runs (runs/ENV/) go.
    out: str = "suite"
    #: Seconds between two evaluations while training; None: a tenth of the budget, at least 5 s.
    eval_every_s: float | None = None
    #: Episodes per scored unit (seat, team or side) in each evaluation while training.
    eval_episodes: int = 10
    #: Episodes per scored unit of each baseline (random, untrained).
    baseline_episodes: int = 50
    #: The env API the actor steps (RunConfig.env_api): "auto", "aec" or "parallel" (the paths side by side).
    env_api: str = "auto"
    #: Runs (an env's seed each) trained side by side, each in a process of its own on an equal share of the
    #: cores (bench/side_by_side.py); 1: one after the other in this process.
    parallel: int = 1
    #: A learner spec ("mappo,lr_schedule=linear") every env trains with in place of its recipe's learner, as
    #: `pzasync train ENV --learner SPEC` takes it: the recipe's groups, wrappers and env copies stay. None: the
    #: recipe's learner.
    learner: str | None = None
    #: Env copies every run's actor steps in place of its recipe's (`pzasync train ENV --envs-per-actor N`); None:
    #: the recipe's.
    envs_per_actor: int | None = None

    @property
    def seed_list(self) -> list[int]:
        """The seeds every env trains with, in order."""
        return list(range(self.first_seed, self.first_seed + self.seeds))

    def validate(self) -> None:
        """ConfigError naming the setting at fault."""
        if not self.minutes > 0:
            raise ConfigError(f"suite: minutes={self.minutes}: must be > 0")
        for name in ("seeds", "eval_episodes", "baseline_episodes", "parallel"):
            if getattr(self, name) < 1:
                raise ConfigError(f"suite: {name}={getattr(self, name)}: must be >= 1")
        if self.first_seed < 0:
            raise ConfigError(f"suite: first_seed={self.first_seed}: must be >= 0")
        if self.envs_per_actor is not None and self.envs_per_actor < 1:
            raise ConfigError(f"suite: envs_per_actor={self.envs_per_actor}: must be >= 1")
        if self.eval_every_s is not None and not self.eval_every_s > 0:
            raise ConfigError(f"suite: eval_every_s={self.eval_every_s}: must be > 0")
        if self.env_api not in ENV_APIS:
            raise ConfigError(f"suite: env_api={self.env_api!r}: must be one of {', '.join(ENV_APIS)}")
        if self.learner is not None:  # refused before any env trains: its name, an option or a value at fault
            from pzasync.learners import resolve_learner
            from pzasync.specs import parse_learner_spec

            learner_class, options = resolve_learner(parse_learner_spec(self.learner), "suite --learner")
            learner_class.validate_config("suite --learner", options)

    @property
    def every_s(self) -> float:
        """Seconds between evaluations: `eval_every_s`, else a tenth of the budget, at least 5 s."""
        return self.eval_every_s if self.eval_every_s is not None else max(5.0, self.minutes * 6.0)


@dataclass
class SuiteRun:
    """What a suite env trains with: its recipe resolved as `pzasync train ENV` resolves it without options."""

    env: Any
    learners: Any
    config: dict[str, Any]
    yardstick: str
    recipe: Any
    notes: list[str]


def suite_run(env_id: str, env_api: str = "auto", learner: str | None = None,
              envs_per_actor: int | None = None) -> SuiteRun:
    """The env, learners and run options of `pzasync train ENV` without options (a `Trainer`'s): the env's recipe,
    or the one chosen from its spaces, with learners fitted to the spaces; `env_api` as RunConfig takes it;
    `learner` (a spec) in place of the recipe's learner, as `--learner` takes it; `envs_per_actor` in place of the
    recipe's env copies, as `--envs-per-actor` takes it."""
    from pzasync.training import Trainer

    options: dict[str, Any] = {"out_dir": None, "env_api": env_api}
    if envs_per_actor is not None:
        options["envs_per_actor"] = envs_per_actor
    trainer = Trainer(env_id, learner=learner, options=options, say=lambda note: None)
    # The recipe's run options, and the API asked for: the suite builds each run's RunConfig from these alone.
    config = {**trainer.choices.config, "env_api": trainer.config.env_api}
    return SuiteRun(trainer.env, trainer.learners, config, trainer.choices.yardstick, trainer.choices.recipe,
                    trainer.notes)


def settings_run(env_id: str, settings: SuiteSettings) -> SuiteRun:
    """`suite_run` with the overrides a suite's settings give every env (API, learner, env copies)."""
    return suite_run(env_id, settings.env_api, settings.learner, settings.envs_per_actor)


def seat_score(result: Any, metric: str) -> float:
    """One seat's score: its win rate or its mean return (an EvalResult, or an evaluator row)."""
    if isinstance(result, dict):
        return float(result["win_rate"] if metric == "win_rate" else result["mean_return"])
    return float(result.win_rate if metric == "win_rate" else result.mean)


def over_seeds(values: list[float], bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """Mean over seeds with its 95% t interval (None for one seed) and the values; the interval cut to `bounds`
    where the score cannot leave them (a win rate: (0, 1))."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": None, "values": values}
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    low, high = bounds if bounds is not None else (-math.inf, math.inf)
    return {"mean": mean, "ci95": [max(low, mean - half), min(high, mean + half)], "values": values}


def score_bounds(metric: str) -> tuple[float, float] | None:
    """The range a score of `metric` cannot leave: (0, 1) for a win rate, none for a return."""
    return (0.0, 1.0) if metric == "win_rate" else None


def curve_of(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Evaluator rows (metrics.jsonl, "kind": "eval") -> one point per round: wall seconds, agent steps, the score
    (mean over the scored units: seats, the team or the sides) and each unit's."""
    rounds: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        rounds.setdefault(row["round"], []).append(row)
    points = []
    for index in sorted(rounds):
        units = rounds[index]
        scores = {row["agent"]: seat_score(row, metric) for row in units}
        points.append({"round": index, "wall_s": max(r["wall_s"] for r in units),
                       "agent_steps": max(r["agent_steps"] for r in units),
                       "score": statistics.fmean(scores.values()), "scores": scores,
                       "final": any(r.get("final", False) for r in units)})
        exact = [r["exploitability"] for r in units if "exploitability" in r]
        if exact:  # leduc: the round's exact exploitability, the same on every unit's row
            points[-1]["exploitability"] = exact[0]
    return points


def team_returns(rows: list[dict[str, Any]], seconds: float, bins: int = 10) -> list[dict[str, Any]]:
    """Training episodes (episodes.jsonl) -> the mean team return (every agent's return summed; actions sampled)
    of the episodes that ended in each tenth of the budget."""
    points = []
    for b in range(bins):
        lo, hi = seconds * b / bins, seconds * (b + 1) / bins
        team = [sum(r["returns"].values()) for r in rows
                if lo <= r["wall_s"] < hi or (b == bins - 1 and r["wall_s"] >= hi)]
        if team:
            points.append({"wall_s": hi, "team_return": statistics.fmean(team), "episodes": len(team)})
    return points


def train_one(run: SuiteRun, seed: int, seconds: float, out: Path, settings: SuiteSettings) -> dict[str, Any]:
    """One seed of one env: `seconds` of async training with the evaluator on; its curve from metrics.jsonl."""
    from pzasync.config import RunConfig
    from pzasync.runners import EVAL_SEED_OFFSET, AsyncRunner
    from pzasync.runtime.rundir import RunDirectory

    config = RunConfig(**run.config, seed=seed, out_dir=str(out), progress=False, eval_vs=run.yardstick,
                       eval_every_s=settings.every_s, eval_episodes=settings.eval_episodes)
    runner = AsyncRunner(run.env, run.learners, config)
    result = runner.run(seconds=seconds)
    if runner.stop_signal is not None:  # the runner stopped itself gracefully on SIGINT/SIGTERM: so does the suite
        raise KeyboardInterrupt
    assert result.run_dir is not None, "a run with out_dir has its run directory"
    rd = RunDirectory(result.run_dir, create=False)
    evaluations = rd.evaluation_rows()
    evaluations += final_round(result, run, settings.eval_episodes, seed + EVAL_SEED_OFFSET,
                               1 + max((r["round"] for r in evaluations), default=-1))
    return {"seed": seed, "run_dir": str(result.run_dir), "agent_steps": result.agent_steps,
            "wall_seconds": result.wall_seconds, "episodes": result.episodes, "evaluations": evaluations,
            "training_return": team_returns(rd.read_jsonl("episodes.jsonl"), seconds)}


def final_round(result: Any, run: SuiteRun, episodes: int, seed: int, round_index: int) -> list[dict[str, Any]]:
    """The policies at the budget, scored as an evaluator round scores them (its yardstick, episodes and seed) from
    the run's last checkpoint once training has stopped: rows for the curve's last point, at the run's wall time.

    The evaluator's rounds run beside training at low priority, so its last round may have begun long before the
    budget ran out: on pistonball, 10 episodes of 20 pistons took 338 s beside training, and the 10-minute run
    recorded no round after the one at 0 s."""
    from pzasync.evaluation.report import evaluate

    report = evaluate(result.run_dir, vs=run.yardstick, episodes=episodes, seed=seed, baselines=False)
    return [{"kind": "eval", "round": round_index, "wall_s": round(result.wall_seconds, 3),
             "agent_steps": result.agent_steps, "agent": r.agent, "members": list(r.members),
             "scoring": report.scoring, "opponent": r.opponent, **r.summary(), "final": True}
            for r in report.results if r.policy == "trained"]


def baselines(run: SuiteRun, units: dict[str, list[str]], episodes: int, seed: int) -> dict[str, list[Any]]:
    """The scored units (as the evaluator scored them: seats, the team or the sides, with their members) played
    by random players and by untrained networks of the recipe's learners, every other agent the yardstick:
    {"random": [EvalResult per unit], "untrained": [...]}."""
    from pzasync.core.groups import resolve_groups
    from pzasync.evaluation.evaluate import fresh_policies, score_units

    probe = run.env.make()
    try:
        agents = list(probe.possible_agents)
    finally:
        probe.close()
    per_agent = run.learners if isinstance(run.learners, dict) else {"*": run.learners}
    groups = {a: g for g, members in resolve_groups(dict(run.config["agent_groups"]), agents).items() for a in members}
    members = sorted({a for m in units.values() for a in m})
    learners = {a: per_agent.get(groups.get(a, a), per_agent.get(a, per_agent.get("*"))) for a in members}
    spec, fresh = fresh_policies(run.env, learners, seed)
    return {"random": score_units(run.env, "random", units, run.yardstick, episodes, seed, policy="random"),
            "untrained": score_units(spec, fresh, units, run.yardstick, episodes, seed, policy="untrained")}


def env_report(env_id: str, settings: SuiteSettings, out: Path,
               on_run: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Train `env_id` for every seed, score the baselines, and return the env's part of the report."""
    run = settings_run(env_id, settings)
    runs = []
    for seed in settings.seed_list:
        if on_run is not None:
            on_run(env_id, seed)
        runs.append(train_one(run, seed, settings.minutes * 60, runs_dir(out, run), settings))
    return env_entry(run, runs, settings)


def runs_dir(out: Path, run: SuiteRun) -> Path:
    """Where an env's run directories go: OUT/runs/SHORT/."""
    return out / "runs" / short_name(run)


def short_name(run: SuiteRun) -> str:
    """An env's short name: its plot is OUT/SHORT.png, its runs OUT/runs/SHORT/."""
    from pzasync.runtime.rundir import safe_name

    return safe_name(run.env.name.rsplit(".", 1)[-1])


def env_entry(run: SuiteRun, runs: list[dict[str, Any]], settings: SuiteSettings) -> dict[str, Any]:
    """An env's part of the report from its trained runs (`train_one`'s, in seed order): the baselines scored,
    each run's curve, the score at the budget over seeds."""
    rows = [row for r in runs for row in r["evaluations"]]
    units = {row["agent"]: list(row.get("members") or [row["agent"]]) for row in rows}
    scoring = next((row["scoring"] for row in rows if row.get("scoring")), None)
    scored_base = baselines(run, units, settings.baseline_episodes, seed=BASELINE_SEED) if units else {}
    outcomes = all(row["outcomes"] for row in rows) and all(r.outcomes for v in scored_base.values() for r in v)
    metric = "win_rate" if rows and outcomes else "mean_return"
    for r in runs:
        r["curve"] = curve_of(r.pop("evaluations"), metric)
        r["final"] = r["curve"][-1]["score"] if r["curve"] else None
    finals = [r["final"] for r in runs if r["final"] is not None]
    recipe = run.recipe
    from pzasync.evaluation.exploitability import applies_to

    extra = {"exploitability": exploitability_figures(runs)} if applies_to(run.env.name) and runs else {}
    return {
        "env": run.env.name, "short": short_name(run), "metric": metric, "yardstick": run.yardstick,
        "scoring": scoring, "scored_units": dict(sorted(units.items())),
        "recipe": {"learner": recipe.learner_spec, "learners": jsonable(run.learners),
                   "agent_groups": run.config["agent_groups"], "self_play": recipe.self_play, "league": recipe.league,
                   "env_kwargs": dict(recipe.env_kwargs), "wrappers": list(recipe.wrappers),
                   "envs_per_actor": run.config["envs_per_actor"], "backpressure": run.config["backpressure"],
                   "onpolicy_buffer_batches": run.config.get("onpolicy_buffer_batches"), "reason": recipe.reason,
                   "evidence": recipe.evidence, "notes": run.notes},
        "baselines": {name: baseline_json(results, metric) for name, results in scored_base.items()},
        "runs": runs,
        "final": over_seeds(finals, score_bounds(metric)) if finals else None,
        **extra,
    }


def side_by_side(envs: list[str], settings: SuiteSettings, out: Path,
                 on_run: Callable[[str, int], None] | None = None) -> Iterator[dict[str, Any]]:
    """`env_report` for every env, the runs (every env's seeds) trained `settings.parallel` at a time, each in a
    process of its own on its share of the cores; yields each env's entry, in the order of `envs`, once its runs
    have ended. A failed run raises its error here (the others are stopped first); Ctrl-C or SIGTERM stops every
    run gracefully and raises KeyboardInterrupt once they have ended."""
    from pzasync.bench.side_by_side import SideBySide
    from pzasync.runtime.stop_signals import StopSignals

    suite_runs = {env_id: settings_run(env_id, settings) for env_id in envs}
    queue = [(env_id, seed) for env_id in envs for seed in settings.seed_list]
    done: dict[tuple[str, int], dict[str, Any]] = {}
    stop: list[int] = []
    with StopSignals(stop.append), SideBySide(settings.parallel, name="suite run") as jobs:
        next_env = 0
        while next_env < len(envs):
            while queue and jobs.free and not stop:
                env_id, seed = queue.pop(0)
                if on_run is not None:
                    on_run(env_id, seed)
                run = suite_runs[env_id]
                # What train_one reads travels (a recipe's read-only mappings do not pickle; the entry reads it here)
                travels = replace(run, recipe=None, notes=[])
                jobs.start((env_id, seed), train_one, travels, seed, settings.minutes * 60, runs_dir(out, run),
                           settings)
            if stop:
                jobs.close()
                raise KeyboardInterrupt
            for outcome in jobs.poll(0.5):
                if outcome.status == "error":
                    jobs.close()
                    raise outcome.error  # type: ignore[misc]
                if outcome.status == "stopped":  # a run that stopped itself (its parent's signal): so does the suite
                    stop.append(0)
                    continue
                done[outcome.key] = outcome.value  # type: ignore[index]
            while next_env < len(envs) and all((envs[next_env], s) in done for s in settings.seed_list):
                env_id = envs[next_env]
                yield env_entry(suite_runs[env_id], [done.pop((env_id, s)) for s in settings.seed_list], settings)
                next_env += 1


def exploitability_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Leduc's exact exploitability (sampled; docs/league.md, "Exploitability") of each run's final policies, set
    on each run as "exploitability", and over seeds beside untrained networks (seeded as the suite's baselines)
    and random play."""
    from pzasync.evaluation.exploitability import exploitability

    values, untrained, random = [], None, None
    for r in runs:
        reports = exploitability(r["run_dir"], acting="sampled", baselines=untrained is None, seed=BASELINE_SEED)
        r["exploitability"] = reports["trained"].exploitability
        values.append(r["exploitability"])
        if r.get("curve") and r["curve"][-1]["final"]:  # the final round scored the same last checkpoint
            r["curve"][-1]["exploitability"] = r["exploitability"]
        if untrained is None:
            untrained, random = reports["untrained"].exploitability, reports["random"].exploitability
    return {"acting": "sampled", "unit": "big blinds a hand, lower is better", "final": over_seeds(values),
            "untrained": untrained, "random": random}


def score_label(entry: dict[str, Any]) -> str:
    """What an env's score is, in words: "team return" for a team, else each seat's or side's win rate or mean
    return against the yardstick."""
    if entry.get("scoring") == "team":
        return "team win rate" if entry["metric"] == "win_rate" else "team return"
    unit = "side" if entry.get("scoring") == "sides" else "seat"
    what = "win rate" if entry["metric"] == "win_rate" else "mean return"
    return f"{what} per {unit} vs {entry['yardstick']}"


def baseline_json(results: list[Any], metric: str) -> dict[str, Any]:
    """A baseline's results (one `EvalResult` per unit) as the report gives them: per unit its score and 95%
    interval, and their mean over units."""
    units = {}
    for r in results:
        lo, hi = r.win_rate_ci95 if metric == "win_rate" else (r.mean - r.mean_ci95, r.mean + r.mean_ci95)
        units[r.agent] = {"score": seat_score(r, metric), "ci95": [lo, hi], "episodes": r.episodes}
    return {"score": statistics.fmean(u["score"] for u in units.values()),
            "ci95": [statistics.fmean(u["ci95"][0] for u in units.values()),
                     statistics.fmean(u["ci95"][1] for u in units.values())],
            "units": units}


def run_suite(settings: SuiteSettings, on_run: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Run the suite and write `out`/suite.json and `out`/ENV.png; returns the report. A KeyboardInterrupt
    keeps the envs that finished (the report says `interrupted`)."""
    import os

    from pzasync.bench.harness import machine_info
    from pzasync.recipes import SUITE

    settings.validate()
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    envs = list(settings.envs) or list(SUITE)
    from importlib.metadata import version

    report: dict[str, Any] = {
        "schema": SCHEMA, "pzasync_version": version("pzasync"), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": asdict(settings),
        "machine": {**machine_info(), "load_average_start": list(os.getloadavg())}, "envs": [], "interrupted": False}
    report["settings"]["envs"] = envs
    report["settings"]["eval_every_s"] = settings.every_s
    entries = (side_by_side(envs, settings, out, on_run) if settings.parallel > 1
               else (env_report(env_id, settings, out, on_run) for env_id in envs))
    try:
        for entry in entries:
            entry["plot"] = plot_env(entry, str(out / f"{entry['short']}.png"), settings.minutes * 60,
                                     settings.learner, settings.envs_per_actor)
            report["envs"].append(entry)
            write_report(report, out)
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["machine"]["load_average_end"] = list(os.getloadavg())
    write_report(report, out)
    return report


def write_report(report: dict[str, Any], out: Path) -> str:
    """suite.json in `out`, replaced atomically."""
    import json
    import os

    path, tmp = out / "suite.json", out / ".suite.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str))
    os.replace(tmp, path)
    return str(path)


def plot_title(entry: dict[str, Any], learner: str | None = None, envs_per_actor: int | None = None,
               width: int = 70) -> str:
    """The env plot's title: the env, its learner spec (the recipe's, or the suite's `--learner`) and the env
    copies the suite set, on lines of at most `width` characters (a long spec breaks after its commas), so that
    matplotlib, which does not wrap, shows all of it."""
    import textwrap

    spec = (learner or entry["recipe"]["learner"]).replace(",", ", ")
    copies = f", {envs_per_actor} env copies" if envs_per_actor is not None else ""
    return textwrap.fill(f"{entry['short']}: {spec}{copies}", width=width, break_long_words=False,
                         break_on_hyphens=False)


def plot_env(entry: dict[str, Any], path: str, seconds: float | None = None, learner: str | None = None,
             envs_per_actor: int | None = None) -> str | None:
    """One env's PNG: the evaluator's score against wall seconds (0 to the budget, `seconds`) for every seed, with
    the random and untrained baselines as bands (95% intervals); beside it the training team return. Its title
    names the recipe's learner, or `learner` where the suite trained another (`--learner`), and the env copies
    where the suite set them (`--envs-per-actor`). None without matplotlib."""
    from pzasync.runtime.rundir import pyplot

    plt = pyplot()
    if plt is None:
        return None
    fig, (ax, side) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1.3]})
    exact = entry.get("exploitability")
    for i, run in enumerate(entry["runs"]):
        xs = [p["wall_s"] for p in run["curve"]]
        ax.plot(xs, [p["score"] for p in run["curve"]], "o-", markersize=3, color=f"C{i}", label=f"seed {run['seed']}")
        if exact is not None:
            points = [p for p in run["curve"] if "exploitability" in p]
            side.plot([p["wall_s"] for p in points], [p["exploitability"] for p in points], "o-", markersize=3,
                      color=f"C{i}", label=f"seed {run['seed']}")
        else:
            side.plot([p["wall_s"] for p in run["training_return"]],
                      [p["team_return"] for p in run["training_return"]], color=f"C{i}", label=f"seed {run['seed']}")
    for name, style in (("random", ":"), ("untrained", "--")):
        base = entry["baselines"].get(name)
        if base is not None:
            ax.axhline(base["score"], color="grey" if name == "random" else "black", linestyle=style, label=name)
            ax.axhspan(*base["ci95"], color="grey" if name == "random" else "black", alpha=0.08)
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel(score_label(entry))
    ax.set_title(plot_title(entry, learner, envs_per_actor), fontsize="medium")
    if entry["metric"] == "win_rate":
        ax.set_ylim(-0.02, 1.02)
    if exact is not None:  # leduc: exact exploitability instead of the training returns
        for name, style in (("random", ":"), ("untrained", "--")):
            side.axhline(exact[name], color="grey" if name == "random" else "black", linestyle=style, label=name)
        side.set_title("exact exploitability (sampled): lower is better", fontsize="small")
        side.set_ylabel("exploitability, big blinds a hand")
    else:
        if entry["recipe"]["self_play"]:
            side.set_title("self-play: the seats' returns cancel out", fontsize="small")
        side.set_ylabel("training team return (sampled actions)")
    side.set_xlabel("wall-clock seconds")
    for a in (ax, side):
        if seconds:
            a.set_xlim(0, seconds * 1.02)
        a.grid(alpha=0.3)
        a.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """The summary table's rows: env, metric and yardstick, random, untrained, pzasync at the budget (mean over
    seeds, 95% interval), seeds, agent steps per run."""
    def fmt(value: float | None, metric: str) -> str:
        return "-" if value is None else f"{value:.1%}" if metric == "win_rate" else f"{value:.4g}"

    rows = []
    for e in report["envs"]:
        m = e["metric"]
        final = e["final"]
        score = "-" if final is None else fmt(final["mean"], m) + (
            "" if final["ci95"] is None else f" [{fmt(final['ci95'][0], m)}, {fmt(final['ci95'][1], m)}]")
        steps = [r["agent_steps"] for r in e["runs"]]
        rows.append([e["short"], score_label(e),
                     fmt(e["baselines"].get("random", {}).get("score"), m),
                     fmt(e["baselines"].get("untrained", {}).get("score"), m), score, str(len(e["runs"])),
                     f"{statistics.fmean(steps):,.0f}" if steps else "-"])
        exploit = e.get("exploitability")
        if exploit is not None:
            final = exploit["final"]
            score = f"{final['mean']:.3f}" + ("" if final["ci95"] is None else
                                              f" [{final['ci95'][0]:.3f}, {final['ci95'][1]:.3f}]")
            rows.append([e["short"], "exploitability, sampled (lower is better)", f"{exploit['random']:.3f}",
                         f"{exploit['untrained']:.3f}", score, str(len(e["runs"])), rows[-1][-1]])
    return rows


#: The summary table's columns, in the order of `summary_rows`' cells.
SUMMARY_COLUMNS = ("env", "metric", "random", "untrained", "pzasync at the budget", "seeds", "agent steps/run")
