"""Experiment trackers (RunConfig.tracker, docs/running.md "Trackers"): the seam (base.py) and one module per
tracker, each imported only when a run opens it: TensorBoard (tensorboard.py), Weights & Biases (wandb.py),
MLflow (mlflow.py). `check_trackers` checks their extras before a run starts; `open_trackers` opens a run's."""

from __future__ import annotations

import importlib
from typing import Any, Sequence

from pzasync.errors import ConfigError
from pzasync.extras import missing, require
from pzasync.logs import logger
from pzasync.runtime.trackers.base import FAILED, FINISHED, KILLED, TrackedRun, Tracker, Trackers

__all__ = ["FAILED", "FINISHED", "KILLED", "TRACKER_CLASSES", "TrackedRun", "Tracker", "Trackers",
           "check_trackers", "open_trackers"]

#: Each built-in tracker (config.groups.TRACKERS): its class as "module:Class", and the extra it needs.
TRACKER_CLASSES: dict[str, tuple[str, str]] = {
    "tensorboard": ("pzasync.runtime.trackers.tensorboard:TensorBoardTracker", "tensorboard"),
    "wandb": ("pzasync.runtime.trackers.wandb:WandbTracker", "wandb"),
    "mlflow": ("pzasync.runtime.trackers.mlflow:MlflowTracker", "mlflow"),
}


def _load(name: str) -> Any:
    """The tracker class of `name`: a built-in one, or "module:Class" of the user's (ConfigError naming it)."""
    path = TRACKER_CLASSES[name][0] if name in TRACKER_CLASSES else name
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"option tracker={name!r}: cannot load it ({type(exc).__name__}: {exc})") from None


def check_trackers(names: Sequence[str]) -> None:
    """Before a run starts: each built-in tracker named has its extra installed (one line with the pip command
    otherwise), and each "module:Class" imports."""
    for name in names:
        if name in TRACKER_CLASSES:
            require(TRACKER_CLASSES[name][1], f"tracker {name!r}")
        else:
            _load(name)


def open_trackers(names: Sequence[str], run: TrackedRun) -> Trackers:
    """A run's trackers: TensorBoard wherever its extra is installed (as every run directory had it, named or
    not), then those named. One that fails to open is one warning line; the run goes on without it."""
    chosen = list(names)
    if "tensorboard" not in chosen and not missing("tensorboard"):
        chosen.insert(0, "tensorboard")
    opened: dict[str, Tracker] = {}
    for name in chosen:
        try:
            opened[name] = _load(name)(run)
        except Exception as exc:  # noqa: BLE001 - a tracker never stops the run
            logger.warning(f"tracker {name!r} did not start ({type(exc).__name__}: {exc}); the run goes on without "
                           f"it")
    return Trackers(opened)
