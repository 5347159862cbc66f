"""`pzasync sweep`: a search over run and learner options with Optuna (the `sweep` extra), trials trained side by
side and pruned on their evaluation rounds (docs/sweeps.md).

- `settings`: the [sweep] table (`SweepSettings`);
- `space`: the [space] table, the options searched and their distributions (`Param`);
- `file`: a sweep file read and checked as a whole before any trial starts (`SweepFile`);
- `trial`: one trial, a `pzasync train --config` run in a process of its own, and its evaluation rounds;
- `study`: `run_sweep`, the Optuna study, trials side by side, pruning;
- `report`: sweep.json, sweep.png, best.toml and the table of trials.
"""

from pzasync.sweep.file import SweepFile
from pzasync.sweep.settings import SweepSettings
from pzasync.sweep.space import Param
from pzasync.sweep.study import SweepReport, TrialRecord, run_sweep

__all__ = ["Param", "SweepFile", "SweepReport", "SweepSettings", "TrialRecord", "run_sweep"]
