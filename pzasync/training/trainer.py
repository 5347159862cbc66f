"""`Trainer` and `train`: what `pzasync train ENV` does, as a library: the env's recipe (or one chosen from its
spaces) under the options given, learners fitted to the spaces, the run, and its final evaluation (and, on leduc,
its exact exploitability). The command line is a thin layer over it (pzasync/cli/train.py)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping, Sequence

from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.core.envset_env import EnvSetSource
from pzasync.core.envset_spec import EnvSet
from pzasync.core.groups import members_label, units_in_order
from pzasync.errors import ConfigError, UserInputError
from pzasync.extras import install_line, missing
from pzasync.logs import logger
from pzasync.recipes import TRAIN_ENV, recipe_for
from pzasync.runners import AsyncRunner, SequentialRunner
from pzasync.runtime.trackers import FAILED, FINISHED, KILLED
from pzasync.training import learner_file
from pzasync.training.choices import TrainChoices, train_choices

#: The final evaluation unless `final_episodes` says: FINAL_EPISODES games per scored unit and opponent, or as many
#: as fit where they would take more than FINAL_SHARE of the training time (`Trainer.final_episodes_for`).
FINAL_EPISODES, FINAL_SHARE = 400, 0.25
#: The final evaluation's seed, after the run's own.
FINAL_SEED_OFFSET = 777
RUNNERS = {"async": AsyncRunner, "sequential": SequentialRunner}
#: The final evaluation in the run directory (`Trainer.finish`): `pzasync eval --json`'s document.
FINAL_EVALUATION_FILE = "final_evaluation.json"
#: What the final evaluation's games are counted per, by scoring mode (its note: "40 games per team and policy").
GAMES_PER = {"seats": "seat and opponent", "team": "team and policy", "sides": "side and policy"}
#: The run options `train` takes as keywords (RunConfig's fields; `dataset` is also an argument of `Trainer`, to
#: the same effect).
RUN_OPTIONS = frozenset(f.name for f in fields(RunConfig))


@dataclass
class TrainResult:
    """A `Trainer.run`: the run's `RunResult`, the final evaluation (`pzasync.evaluate`'s `Evaluation`; None when
    skipped, stopped, or when nothing learns), leduc's exact exploitability reports, and the notes said on the
    way (what was chosen and why)."""

    run: Any
    evaluation: Any = None
    exploitability: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: The signal (SIGINT, SIGTERM) that stopped the run early, or None.
    stop_signal: int | None = None

    @property
    def run_dir(self) -> str | None:
        return self.run.run_dir


class Trainer:
    """`pzasync train ENV`, built from its options: every choice is made and checked on construction (nothing
    runs yet, nothing is written), then `run` trains and scores.

    `learner` (a spec such as "ppo,lr=3e-4"; default: the recipe's, fitted to the spaces) and `learner_for`
    ({agent or group: spec}, or "AGENT=SPEC" texts) choose the learners; `env_args` and `wrappers` go over the
    recipe's; `steps` or `minutes` bound the run (default: the recipe's minutes); `self_play` forces self-play on
    or off; `final_episodes` sets the final evaluation's games (default: up to FINAL_EPISODES within a quarter of
    the training time; 0 skips it); `dataset` is RunConfig.dataset, recorded transitions the learners load
    (docs/running.md, "Recorded data"); `options` are run options by RunConfig field name (over `file_options`, those
    of a TOML file, which may also name learners); `run_defaults` are the run options taken where neither gives
    one. `say` gets each note (what was chosen and why) as it is made.
    """

    def __init__(self, env: str | None = None, *, learner: str | None = None,
                 learner_for: Mapping[str, str] | Sequence[str] = (), env_args: Mapping[str, Any] | None = None,
                 wrappers: Sequence[str] | None = None, runner: str = "async", steps: int | None = None,
                 minutes: float | None = None, self_play: bool | None = None, final_episodes: int | None = None,
                 options: Mapping[str, Any] | None = None, file_options: Mapping[str, Any] | None = None,
                 file_learners: Mapping[str, Any] | None = None, dataset: str | os.PathLike | None = None,
                 run_defaults: Mapping[str, Any] = {"out_dir": "runs"},  # noqa: B006 - read, never changed
                 say: Callable[[str], None] | None = None) -> None:
        self.say = say or logger.info
        self.notes: list[str] = []
        #: The timed round of the final evaluation, where it is all that fits (`final_episodes_for`).
        self._timed_round: Any = None
        #: The seconds the final evaluation may take after its timed round, where the share bounds it.
        self._final_seconds: float | None = None
        options, file_options = dict(options or {}), dict(file_options or {})
        if dataset is not None:
            options["dataset"] = str(dataset)
        _check_arguments(runner, steps, minutes, final_episodes, options)
        if isinstance(learner_for, Mapping):
            learner_for = [f"{name}={spec}" for name, spec in learner_for.items()]
        self.learner_for = learner_for = tuple(learner_for)
        self.runner_kind, self.steps, self.final_episodes = runner, steps, final_episodes
        #: The env set the run plays (RunConfig.env_set, docs/running.md "Env sets"), or None; its first env's
        #: recipe stands for the set's.
        self.env_set = _env_set({**file_options, **options}.get("env_set"), env, env_args)
        env = self.env_set.first.env if self.env_set is not None else env or TRAIN_ENV
        base = None
        if recipe_for(env) is None:  # no recipe: one chosen from the env's spaces, said at the start
            from pzasync.learners.space_defaults import recipe_from_spaces

            base, notes = recipe_from_spaces(self._env_spec(env, wrappers or (), env_args or {}))
            self._note(*notes)
        self.choices: TrainChoices = train_choices(
            env, learner=learner, learner_for=learner_for, steps=steps, minutes=minutes, self_play=self_play,
            options=options, file_options=file_options, env_args=env_args,
            wrappers=None if wrappers is None else tuple(wrappers), base=base, file_learners=file_learners)
        if base is None and wrappers is None and not self.choices.wrappers and self.env_set is None:
            # A recipe measured without frames, on an env made to show them: the frame rule of the spaces' defaults.
            from pzasync.learners.space_defaults import frame_wrappers

            frames, notes = frame_wrappers(self._env_spec(env, (), self.choices.env_kwargs))
            self.choices = replace(self.choices, wrappers=frames)
            self._note(*[f"{env}'s recipe gives no frame preprocessing; {note}" for note in notes])
        self.env = self._env_spec(env, self.choices.wrappers, self.choices.env_kwargs)
        self.minutes = self.choices.minutes
        self.learners = self.choices.learners
        #: Whether the learners are the recipe's (fitted to the spaces), not the user's.
        self.recipe_learners = learner is None and not file_learners
        #: Units given another learner than the recipe's, because it refuses their spaces (one note each).
        self.fitted: list[str] = []
        if self.recipe_learners:  # the recipe's learner: where it refuses an agent's spaces, one that fits
            from pzasync.learners.fitting import fit_learners

            chosen = {item.partition("=")[0] for item in learner_for}
            self.learners, self.fitted = fit_learners(self.env, self.learners, self.choices.config["agent_groups"],
                                                      chosen=chosen)
            self._note(*self.fitted)
        values = {**run_defaults, **file_options, **options, **self.choices.config,
                  "eval_vs": self.choices.yardstick if self.choices.evaluate else None}
        if values.get("eval_every_s") == 0:
            del values["eval_every_s"]
        self.config = RunConfig(**values)
        _check_runner(runner, self.config)
        self.config.validate()
        if self.config.out_dir is not None and missing("plot"):
            self._note(f"the run's plots (eval.png, returns.png) are not drawn: the 'plot' extra is not installed "
                       f"({install_line('plot')})")
        self.runner: Any = None

    def _env_spec(self, env: str, wrappers: Sequence[str], env_args: Mapping[str, Any]) -> EnvSpec:
        """The env the run plays: `env` with its arguments, or the env set (its envs' arguments are its own)."""
        if self.env_set is not None:
            return EnvSpec(EnvSetSource(self.env_set), {}, None, tuple(wrappers))
        return EnvSpec.of(env, tuple(wrappers), **dict(env_args))

    def _note(self, *notes: str) -> None:
        for note in notes:
            self.notes.append(note)
            self.say(note)

    # ------------------------------------------------------------------------------------------ configuration
    def to_toml(self, header: str = "", unset: Mapping[str, str] | None = None) -> str:
        """Every run option and every learner option, resolved, as a TOML file `file_options` and
        `file_learners` (the command line's --config) read back to the same run."""
        return self.config.to_toml(header, unset) + learner_file.dumps(self.learners)

    # ------------------------------------------------------------------------------------------ the run
    def build(self) -> Any:
        """The runner (its plan checked, its env probed), then the folder of run directories (made, and checked
        to be writable): nothing is written before every option is checked."""
        from pzasync.runtime.rundir import check_out_dir

        runner = RUNNERS[self.runner_kind](self.env, self.learners, self.config)
        if self.config.out_dir is not None:
            check_out_dir(self.config.out_dir)
        self.runner = runner
        return runner

    def describe(self) -> list[str]:
        """What is about to train, one line (one entry per learning unit: `player_0=dqn`, or a group's
        `red_0..red_80 (81 agents): dqn, group red`), then one per "auto" option with its choice (after `build`)."""
        plan, chosen, config = self.runner.plan, self.choices, self.runner.plan.config
        trainee = config.league_trainee_weights
        units = units_in_order({a: p.unit for a, p in plan.agents.items()})
        # One entry per learning unit: an agent on its own as agent=learner, a group as its members' short name.
        entries = [f"{unit}={plan.agents[unit].learner_name}" if members == [unit] else
                   f"{members_label(members)}: {plan.units[unit].learner_name}, group {unit}"
                   for unit, members in units.items()]
        line = (f"training {self.env.name} with the {self.runner_kind} runner: "
                + ("; " if plan.groups else ", ").join(entries)
            + (f"; learner {chosen.learner}" if not self.learner_for and not self.fitted else "")
            + (f"; league {chosen.league}" if config.league else "")
            + (" (trainee weights " + ", ".join(f"{k}={v:g}" for k, v in trainee.items()) + ")" if trainee else "")
            + (f"; {plan.envs_per_actor} env copies" if plan.envs_per_actor > 1 else "")
            + (f" per actor, {plan.actors} actor processes" if plan.actors > 1 else "")
            + (f", {config.env_workers} env workers" if config.env_workers else "")
            + (f"; env wrappers {' | '.join(self.env.wrappers)}" if self.env.wrappers else "")
            + (f"; {_set_text(self.env_set)}" if self.env_set is not None else "")
            + f"; scored against {chosen.yardstick}"
            + (f"; recorded data {plan.dataset.path}: " + ", ".join(
                f"{rows:,} transitions of {agent}" for agent, rows in plan.dataset_rows.items())
               if plan.dataset is not None else ""))
        return [line] + [f"  {option}=auto: {choice}" for option, choice in plan.auto.items()]

    def train(self, hold_trackers: bool = False) -> Any:
        """Train (building the runner first if `build` was not called); the `RunResult`. A SIGINT or SIGTERM
        stops the run gracefully (`runner.stop_signal` says which). `hold_trackers`: a run that finishes keeps its
        experiment trackers open for the final evaluation, and `finish` closes them."""
        runner = self.runner or self.build()
        runner.hold_trackers = hold_trackers
        return runner.run(agent_steps=self.steps, seconds=self.minutes * 60 if self.minutes is not None else None)

    def finish(self, evaluation: Any = None, status: str = FINISHED) -> None:
        """After `train(hold_trackers=True)`: the final evaluation (when there is one) into the run directory as
        final_evaluation.json (`pzasync eval --json`'s document) and into the run's trackers, its scores as
        `final/UNIT/POLICY/win_rate` (or `mean_return`, `_vs_OPPONENT` against any other than the first) at the
        run's agent steps; then the trackers are closed (`status`: how it ended)."""
        runner = self.runner
        run_dir = runner.run_directory if runner is not None else None
        try:
            if evaluation is not None and run_dir is not None:
                run_dir.write_json(FINAL_EVALUATION_FILE, evaluation.to_json())
                run_dir.tracker.log_metrics("final", runner.actor.total_steps if runner.actor is not None else 0,
                                            final_scores(evaluation))
                run_dir.tracker.log_file(run_dir.path / FINAL_EVALUATION_FILE)
        finally:
            if runner is not None:
                runner.close_trackers(status)

    @property
    def learned(self) -> bool:
        """Whether any agent of the run learns (else there is no trained policy to score)."""
        return any(p.learns for p in self.runner.plan.agents.values())

    def final_episodes_for(self, result: Any) -> int:
        """Games per scored unit of the final evaluation: `final_episodes`, or FINAL_EPISODES unless one round of
        every evaluation it plays (`eval_copies` games each of the trained policies and of the baselines, timed)
        says the whole would take more than FINAL_SHARE of the run: then as many as fit in what the round left of
        that share, with a note, and the evaluation keeps to what is left of it (`evaluate(seconds=...)`: a game
        that runs longer than the round's cuts the games after it, rather than the share). The baselines are timed
        too because their games can last far longer than the trained policies' (on battle, random teams fight to
        the step limit where a trained team wins early).
        Where no more games than the round's fit (a 162-agent battle after a short run), the timed round is the
        final evaluation (`final_evaluation` returns it)."""
        self._timed_round, self._final_seconds = None, None
        if self.final_episodes is not None:
            return self.final_episodes
        if not result.run_dir or not self.learned:
            return 0
        from pzasync.evaluation.episodes import eval_copies
        from pzasync.evaluation.report import evaluate

        plan = self.runner.plan
        round_games = eval_copies(len(plan.agents), plan.env_api)  # what a game costs when copies play side by side
        start = time.monotonic()
        measured = evaluate(result.run_dir, env=self._final_env(), vs=self.choices.yardstick, episodes=round_games,
                            seed=self._final_seed, scoring=self.config.eval_scoring, learners=self.learners)
        spent = time.monotonic() - start
        per_game = spent / round_games  # every unit, every evaluation, baselines included
        full, budget = per_game * FINAL_EPISODES, FINAL_SHARE * result.wall_seconds
        if full + spent <= budget:
            return FINAL_EPISODES
        episodes = int((budget - spent) / per_game)
        per = GAMES_PER[measured.scoring]
        why = (f"{FINAL_EPISODES} would take about {full:.0f} s, more than a quarter of the {result.wall_seconds:.0f} "
               f"s run; --final-episodes N chooses")
        if episodes <= round_games:  # the timed round already played these games (the same seeds): keep it
            self._timed_round = measured
            self._note(f"final evaluation: the {round_games} game(s) per {per} that timed it ({why})")
            return round_games
        self._final_seconds = budget - spent
        self._note(f"final evaluation: up to {episodes} games per {per}, in the {budget - spent:.0f} s the timed "
                   f"round left of the quarter ({why})")
        return episodes

    @property
    def _final_seed(self) -> int:
        return self.config.seed + FINAL_SEED_OFFSET

    def final_evaluation(self, result: Any, episodes: int,
                         progress: Callable[[str], None] | None = None) -> Any:
        """The trained greedy policies in the scoring mode that fits the env, beside untrained networks and random
        play (`pzasync.evaluate`), `episodes` games per scored unit; `progress` is called after each game."""
        from pzasync.evaluation.report import evaluate

        timed = self._timed_round
        if timed is not None and timed.episodes == episodes:
            if progress is not None:
                progress("the timed round")
            return timed
        return evaluate(result.run_dir, env=self._final_env(), vs=self.choices.yardstick, episodes=episodes,
                        seed=self._final_seed, scoring=self.config.eval_scoring, learners=self.learners,
                        progress=progress, seconds=self._final_seconds)

    def _final_env(self) -> Any:
        """The env the final evaluation plays: the run's; on an env set, read from run.json as `pzasync eval`
        does (its test split where it has one, else the curriculum stage the run reached)."""
        plan = self.runner.plan
        return None if plan.env_set is not None else plan.env_spec

    def exploitability(self, result: Any) -> dict[str, Any] | None:
        """On leduc, exact exploitability reports (docs/league.md, "Exploitability"); None elsewhere. Where a policy
        gives no action probabilities (DQN), a note says why there are none."""
        from pzasync.evaluation.exploitability import applies_to, exploitability

        if not applies_to(self.env.base_name) or not result.run_dir:
            return None
        try:
            return exploitability(result.run_dir, acting="sampled", seed=self._final_seed)
        except (ConfigError, NotImplementedError) as exc:
            self._note(f"exact exploitability not computed: {exc}")
            return None

    def run(self, progress: Callable[[str], None] | None = None) -> TrainResult:
        """Train, then score: the final evaluation (unless skipped, stopped, or nothing learns) and, on leduc, the
        exact exploitability; the final evaluation goes to the run directory and its trackers too (`finish`)."""
        result = self.train(hold_trackers=True)
        out = TrainResult(result, notes=self.notes, stop_signal=self.runner.stop_signal)
        status = FAILED
        try:
            if out.stop_signal is None and result.run_dir and self.learned:
                episodes = self.final_episodes_for(result)
                if episodes:
                    out.evaluation = self.final_evaluation(result, episodes, progress)
                    out.exploitability = self.exploitability(result)
            status = FINISHED
        except KeyboardInterrupt:
            status = KILLED
            raise
        finally:
            self.finish(out.evaluation if status == FINISHED else None, status)
        return out


def train(env: str | None = None, **arguments: Any) -> TrainResult:
    """`pzasync train ENV` from Python: `Trainer(env, **arguments).run()` (see `Trainer` for its arguments). A
    keyword naming a run option (a RunConfig field: `tracker="mlflow"`, `seed=1`) is taken as one, as if it were
    in `options`."""
    run_options = {name: arguments.pop(name) for name in list(arguments) if name in RUN_OPTIONS}
    if run_options:
        arguments["options"] = {**dict(arguments.get("options") or {}), **run_options}
    return Trainer(env, **arguments).run()


def _env_set(value: Any, env: str | None, env_args: Mapping[str, Any] | None) -> EnvSet | None:
    """The env set of RunConfig.env_set (a TOML file, or its table), checked against the other arguments: the set
    names the envs and their arguments, so ENV and --env-arg are refused beside it."""
    if value is None:
        return None
    if env is not None:
        raise UserInputError(f"--env-set {value if isinstance(value, str) else '(a table)'}: the env set names the "
                             f"envs; give no ENV ({env!r}) beside it")
    if env_args:
        raise UserInputError(f"--env-arg {', '.join(env_args)}: an env set's arguments are in its file (args = "
                             f"{{...}} of each env)")
    return EnvSet.of(value)


def _set_text(envset: EnvSet) -> str:
    """The env set on the start line: its name and structure."""
    drawn = " with args drawn per episode" if any(m.drawn for m in envset.train) else ""
    parts = [f"{len(envset.train)} train env(s){drawn}"] if envset.train else []
    if envset.test:
        parts.append(f"{len(envset.test)} test")
    if envset.curriculum:
        parts.append(f"a curriculum of {len(envset.curriculum)} steps, from {envset.stage_label(0)}")
    return f"env set {envset.name}: " + ", ".join(parts)


def _check_arguments(runner: str, steps: int | None, minutes: float | None, final_episodes: int | None,
                     options: Mapping[str, Any]) -> None:
    """The trainer's own arguments: budgets a run can meet, a known runner, evaluation settings (one line each)."""
    if runner not in RUNNERS:
        raise UserInputError(f"runner {runner!r}: must be one of {sorted(RUNNERS)}")
    if steps is not None and steps < 1:
        raise UserInputError(f"--steps {steps}: must be >= 1 agent steps")
    if minutes is not None and not minutes > 0:
        raise UserInputError(f"--minutes {minutes:g}: must be > 0")
    if final_episodes is not None and final_episodes < 0:
        raise UserInputError(f"--final-episodes {final_episodes}: must be >= 0")
    every = options.get("eval_every_s")
    if every is not None and every < 0:
        raise UserInputError(f"--eval-every {every:g}: must be >= 0 seconds (0: no evaluation while training)")


def _check_runner(runner: str, config: RunConfig) -> None:
    """Run options that need the async runner's learner processes."""
    if config.backend == "ray" and runner != "async":
        raise UserInputError("--backend ray: only the async runner has learners apart from the actor; drop "
                             "--runner sequential")
    if config.learner_processes is not None and (runner != "async" or config.backend != "shm"):
        raise UserInputError("--learner-processes: learner host processes are the async runner's on shared "
                             "memory; drop it with --runner sequential or --backend ray")


def final_scores(evaluation: Any) -> dict[str, float]:
    """A final evaluation's scores as tracker scalars: UNIT/POLICY/win_rate where games are won or lost, else
    UNIT/POLICY/mean_return, with `_vs_OPPONENT` for every opponent but the first (the yardstick)."""
    first = evaluation.results[0].opponent if evaluation.results else None
    scores: dict[str, float] = {}
    for r in evaluation.results:
        suffix = "" if r.opponent == first else f"_vs_{r.opponent}"
        name, value = ("win_rate", r.win_rate) if r.outcomes else ("mean_return", r.mean)
        scores[f"{r.agent}/{r.policy}/{name}{suffix}"] = float(value)
    return scores
