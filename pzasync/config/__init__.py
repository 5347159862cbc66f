"""Run options: `RunConfig`, one flat set of options declared once each, in groups (docs/running.md, RunConfig).

- `declare`: how an option is declared (`option`, `Check`) and checked (`OptionGroup`);
- `groups`: the option groups, each option with its default, doc, check and command-line form;
- `run`: `RunConfig`, the groups combined, with the checks between options, run.json's dict and TOML;
- `toml`: the TOML file, one table per group.
"""

from pzasync.config.declare import NONE, Check, OptionGroup, OptionSpec, declared, option, spec_of
from pzasync.config.groups import (
                                   AUTO,
                                   AUTO_ENVS_PER_ACTOR,
                                   BACKENDS,
                                   GROUPS,
                                   RAY_TRANSPORTS,
                                   SCORING_MODES,
                                   TRACKERS,
                                   ActingOptions,
                                   EvaluationOptions,
                                   LeagueOptions,
                                   LearningOptions,
                                   RayOptions,
                                   ReliabilityOptions,
                                   RunOptions,
)
from pzasync.config.run import RunConfig

__all__ = ["AUTO", "AUTO_ENVS_PER_ACTOR", "BACKENDS", "GROUPS", "NONE", "RAY_TRANSPORTS", "SCORING_MODES",
           "TRACKERS", "ActingOptions", "Check",
           "EvaluationOptions", "LeagueOptions", "LearningOptions", "OptionGroup", "OptionSpec", "RayOptions",
           "ReliabilityOptions", "RunConfig", "RunOptions", "declared", "option", "spec_of"]
