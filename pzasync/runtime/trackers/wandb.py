"""Weights & Biases (the `wandb` extra): the run's parameters as its config, learner metrics and evaluation scores
as its history, the plots as images; offline in the run directory unless the user configured W&B otherwise."""

from __future__ import annotations

import netrc
import os
import shutil
from pathlib import Path
from typing import Any, Literal, Mapping
from urllib.parse import urlsplit

from pzasync.runtime.trackers.base import FINISHED, TrackedRun, eval_scalars, metric_scalars

#: The W&B project of a run unless WANDB_PROJECT names one.
PROJECT = "pzasync"
#: Where W&B is served unless WANDB_BASE_URL says: the host of the API key `wandb login` keeps in ~/.netrc.
DEFAULT_HOST = "https://api.wandb.ai"


def has_api_key() -> bool:
    """Whether the user has a W&B API key here: WANDB_API_KEY, or the one `wandb login` keeps in the netrc file
    (NETRC, else ~/.netrc) for the W&B host (WANDB_BASE_URL, else api.wandb.ai)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST).netloc
    try:
        return bool(host) and netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def mode() -> Literal["offline"] | None:
    """The W&B mode of a run: None (W&B's own choice) where WANDB_MODE is set or an API key is there
    (`has_api_key`), else "offline": nothing leaves the machine unless the user set W&B up to send it."""
    return None if os.environ.get("WANDB_MODE") or has_api_key() else "offline"


class WandbTracker:
    """A W&B run named as the run directory, its config the run's parameters (run.json), in project
    WANDB_PROJECT or "pzasync", its files in RUN_DIR/wandb/. Learner metrics are logged as `UNIT/METRIC` beside
    `UNIT/updates`, their step axis; evaluation scores as `eval/...` beside `agent_steps`, theirs; plots as the
    images `plots/NAME`. The console is not captured (the live table would fill it). Closing finishes the run and
    ends W&B's service process (`wandb.teardown`)."""

    def __init__(self, run: TrackedRun) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=None if os.environ.get("WANDB_PROJECT") else PROJECT, name=run.name,
                              dir=str(run.directory), config=dict(run.params), mode=mode(),
                              settings=wandb.Settings(console="off"))
        self.run.define_metric("agent_steps")
        self.run.define_metric("eval/*", step_metric="agent_steps")
        self._units: set[str] = set()

    def log_metrics(self, unit: str, step: int, metrics: Mapping[str, Any]) -> None:
        """`UNIT/METRIC` values with `UNIT/updates` = `step`, the axis they are drawn against."""
        if unit not in self._units:
            self._units.add(unit)
            self.run.define_metric(f"{unit}/updates")
            self.run.define_metric(f"{unit}/*", step_metric=f"{unit}/updates")
        self.run.log({**metric_scalars(unit, metrics), f"{unit}/updates": step})

    def log_eval(self, row: Mapping[str, Any]) -> None:
        """The row's scores with `agent_steps`, their axis."""
        self.run.log({**eval_scalars(row), "agent_steps": row["agent_steps"]})

    def log_file(self, path: Path) -> None:
        """A PNG plot as the image `plots/NAME`; another file copied to the run's files and saved."""
        if path.suffix.lower() == ".png":
            self.run.log({f"plots/{path.stem}": self.wandb.Image(str(path))})
        else:  # a copy among the run's files (saving a file from elsewhere links it there, with a warning)
            copy = Path(self.run.dir) / path.name
            shutil.copyfile(path, copy)
            self.run.save(str(copy), base_path=self.run.dir, policy="now")

    def close(self, status: str = FINISHED) -> None:
        """Finish the run (exit code 1 unless it finished) and end W&B's service process."""
        try:
            self.run.finish(exit_code=0 if status == FINISHED else 1)
        finally:
            self.wandb.teardown()
