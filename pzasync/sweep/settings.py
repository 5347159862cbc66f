"""The `[sweep]` table of a sweep file: what is searched, how long each trial trains, how trials are scored,
run side by side and pruned. Declared as run options are (`option`, config/declare.py), so one validator checks
them and an error names the setting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pzasync.config.declare import Check, OptionGroup, option
from pzasync.recipes import TRAIN_ENV

#: Each trial's budget where the file gives neither minutes nor steps.
DEFAULT_MINUTES = 2.0
#: The scores a trial can be judged by: "score" is the evaluator's figure (each scored unit's win rate where
#: the results are game outcomes, else its mean return; the mean over the units: seats, the team or the sides).
METRICS = ("score", "win_rate", "mean_return")
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random")
#: Built-in pruners; "module:callable" names a function returning an Optuna pruner.
PRUNERS = ("median", "none")
#: "auto" trials side by side: one per this many usable cores (an actor and a learner host each).
CORES_PER_TRIAL = 2
AUTO = "auto"


def _pruner(value: Any) -> str | None:
    if value in PRUNERS or (isinstance(value, str) and ":" in value.strip(":")):
        return None
    return f"must be one of {PRUNERS!r} or 'module:callable' (a function returning an Optuna pruner)"


@dataclass(kw_only=True)
class SweepSettings(OptionGroup):
    """A sweep's own settings (`[sweep]` of the file); the run and learner options it searches are in `[space]`,
    those it keeps fixed in the tables `pzasync train --config` reads."""

    TABLE = "sweep"
    TITLE = "Sweep settings"
    PREFIX = "[sweep]"

    env: str = option(TRAIN_ENV, "The env every trial trains (an env id, as `pzasync train` takes it).",
                      Check(str, what="an env id"))
    minutes: float | None = option(None, f"Wall-clock minutes of training per trial (default {DEFAULT_MINUTES:g} "
                                         f"where neither minutes nor steps is given).",
                                   Check(float, gt=0, finite=True, optional=True))
    steps: int | None = option(None, "Agent steps of training per trial (with minutes too: whichever comes first).",
                               Check(int, ge=1, optional=True))
    trials: int = option(12, "Trials in all.", Check(int, ge=1))
    parallel: int | str = option(AUTO, f"Trials trained side by side, each in a process of its own on an equal share "
                                       f"of the cores; 'auto': one per {CORES_PER_TRIAL} usable cores.",
                                 Check(int, ge=1, also=(AUTO,)))
    metric: str = option("score", "What a trial is scored by: 'score' (the evaluator's figure: win rate for game "
                                  "results, else mean return), 'win_rate' or 'mean_return'.",
                         Check(str, choices=METRICS))
    direction: str = option("maximize", "Whether a higher or a lower metric is better.", Check(str, choices=DIRECTIONS))
    sampler: str = option("tpe", "Optuna's sampler: 'tpe' (Tree-structured Parzen Estimator) or 'random'.",
                          Check(str, choices=SAMPLERS))
    seed: int = option(0, "The sampler's seed (each trial's run seed is the run option `seed`, the same for all).",
                       Check(int, ge=0))
    pruner: str = option("median", "Stops a trial whose evaluation rounds fall below the median of earlier trials' "
                                   "at the same round: 'median', 'none', or 'module:callable' returning an Optuna "
                                   "pruner.", Check(str), validator=_pruner)
    prune_startup_trials: int = option(2, "Trials that finish before the median pruner stops any.", Check(int, ge=0))
    prune_warmup_rounds: int = option(1, "Evaluation rounds of a trial before the median pruner may stop it.",
                                      Check(int, ge=0))
    baseline: bool = option(True, "Trial 0 trains with the options as the file and the env's recipe give them (each "
                                  "searched option at its unsearched value, where the space can draw it), so that "
                                  "the best trial is judged against the setting the sweep started from.", Check(bool))
    final_episodes: int = option(100, "Games (episodes) per scored unit of each trial's final evaluation, the "
                                      "trial's score.", Check(int, ge=1))

    def budget(self) -> tuple[float | None, int | None]:
        """Each trial's (minutes, steps): as given, or DEFAULT_MINUTES where neither is."""
        if self.minutes is None and self.steps is None:
            return DEFAULT_MINUTES, None
        return self.minutes, self.steps

    def trials_at_once(self, cores: int) -> int:
        """Trials side by side: `parallel`, or for 'auto' one per CORES_PER_TRIAL of `cores`; never more than
        `trials`."""
        wanted = max(1, cores // CORES_PER_TRIAL) if self.parallel == AUTO else int(self.parallel)
        return min(wanted, self.trials)
