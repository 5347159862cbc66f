"""MLflow (the `mlflow` extra, mlflow-skinny: the tracking client without the server): the run's parameters,
learner metrics, evaluation scores and files, to a file store in the run directory unless MLFLOW_TRACKING_URI
points elsewhere."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

from pzasync.runtime.trackers.base import (
    FAILED,
    FINISHED,
    KILLED,
    TrackedRun,
    eval_scalars,
    flat_params,
    metric_scalars,
)

#: The MLflow experiment of a run unless MLFLOW_EXPERIMENT_NAME names one.
EXPERIMENT = "pzasync"
#: MLflow's limits: parameters per batch, a parameter value's length, a key's length.
PARAMS_PER_BATCH, PARAM_VALUE_CHARS, KEY_CHARS = 100, 6000, 250
_STATUS = {FINISHED: "FINISHED", FAILED: "FAILED", KILLED: "KILLED"}


def store_uri(run_dir: Path) -> str | None:
    """Where the run is tracked: None (MLflow's MLFLOW_TRACKING_URI) where that is set, else a file store in
    RUN_DIR/mlruns (`mlflow ui --backend-store-uri RUN_DIR/mlruns` shows it)."""
    return None if os.environ.get("MLFLOW_TRACKING_URI") else (run_dir / "mlruns").resolve().as_uri()


def key(name: str) -> str:
    """A metric or parameter name as MLflow takes it: letters, digits and `_-. /:` kept, anything else '_'."""
    return "".join(c if c.isalnum() or c in "_-. /:" else "_" for c in name)[:KEY_CHARS]


def param_text(value: Any) -> str:
    """A parameter's value as MLflow keeps it: text, JSON for lists and dicts, at most PARAM_VALUE_CHARS."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:PARAM_VALUE_CHARS]


class MlflowTracker:
    """An MLflow run named as the run directory, in experiment MLFLOW_EXPERIMENT_NAME or "pzasync": the run's
    parameters (run.json, flattened: `config.seed`, `learners.player_0.options.lr`), learner metrics `UNIT/METRIC`
    at the unit's updates, evaluation scores `eval/...` at agent steps, plots under the artifacts' plots/ and other
    files at their root. Closing ends the run as FINISHED, FAILED or KILLED.

    Since MLflow 3 a file store is refused unless MLFLOW_ALLOW_FILE_STORE=true: for the run directory's own store,
    this process sets it where the user has not."""

    def __init__(self, run: TrackedRun) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = store_uri(run.directory)
        if uri is not None:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment_id, run_name=run.name,
                                             tags={"pzasync.run_dir": str(run.directory)}).info.run_id
        params = [Param(key(k), param_text(v)) for k, v in flat_params(run.params).items()]
        for start in range(0, len(params), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[start:start + PARAMS_PER_BATCH], synchronous=True)

    def _log(self, scalars: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key(k), v, now, int(step)) for k, v in scalars.items()],
                              synchronous=True)

    def log_metrics(self, unit: str, step: int, metrics: Mapping[str, Any]) -> None:
        """`UNIT/METRIC` at step `step` (the unit's updates)."""
        self._log(metric_scalars(unit, metrics), step)

    def log_eval(self, row: Mapping[str, Any]) -> None:
        """The row's scores at step = its agent steps."""
        self._log(eval_scalars(row), row["agent_steps"])

    def log_file(self, path: Path) -> None:
        """A PNG plot as an artifact under plots/, another file at the artifacts' root."""
        self.client.log_artifact(self.run_id, str(path), "plots" if path.suffix.lower() == ".png" else None)

    def close(self, status: str = FINISHED) -> None:
        """End the run: FINISHED, FAILED or KILLED."""
        self.client.set_terminated(self.run_id, _STATUS.get(status, "FINISHED"))
