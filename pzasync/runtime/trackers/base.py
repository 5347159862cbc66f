"""The tracker seam: what a run mirrors to experiment trackers beside its run directory's own files.

A tracker gets four things, each from the actor's process (runtime/monitor.py and the runner's end of run): a
learning unit's learner metrics at its update count, an evaluation row (metrics.jsonl's `"kind": "eval"`), a
finished file (the plots, result.json) and the close. Every tracker names them alike: learner metrics
`UNIT/METRIC` against the unit's updates, evaluation scores `eval/AGENT/win_rate` (or `mean_return`, with
`_vs_PLAYER` for a yardstick other than random; `eval/AGENT/exploitability` on leduc) against agent steps
(`metric_scalars`, `eval_scalars`). `Trackers` hands each event to every tracker of a run; a tracker that raises is
one warning line, closed and dropped, and the run goes on without it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from pzasync.logs import logger

#: How a run ended, as `Tracker.close` is told: it trained to its end (a graceful stop included), it raised, or it
#: was interrupted (a stop signal, Ctrl-C).
FINISHED, FAILED, KILLED = "finished", "failed", "killed"


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is opened with: the run directory (a tracker's own files go inside it unless the user points
    the tracker elsewhere), the run's name (the directory's), and its parameters: run.json (the env, each agent's
    learner and options, every RunConfig option)."""

    directory: Path
    name: str
    params: Mapping[str, Any]


class Tracker(Protocol):
    """One experiment tracker of a run. A class with this interface and a constructor taking a `TrackedRun` is a
    tracker: RunConfig(tracker="module:Class") names one of your own."""

    def log_metrics(self, unit: str, step: int, metrics: Mapping[str, Any]) -> None:
        """A learning unit's learner metrics, at `step` (its updates so far); `metric_scalars` names them."""

    def log_eval(self, row: Mapping[str, Any]) -> None:
        """One evaluation row (metrics.jsonl's `"kind": "eval"`); `eval_scalars` names its scores."""

    def log_file(self, path: Path) -> None:
        """A finished file of the run directory: a plot (PNG, shown as an image where the tracker can) or
        another file (result.json)."""

    def close(self, status: str = FINISHED) -> None:
        """End the tracker's run (`status`: FINISHED, FAILED or KILLED) and release what it started."""


def is_number(value: Any) -> bool:
    """A real number (bools and numpy scalars included): what trackers take as a scalar."""
    return isinstance(value, numbers.Real)


def metric_scalars(unit: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    """A learner report's metrics as tracker scalars: `UNIT/METRIC` -> value (values that are not numbers are left
    out)."""
    return {f"{unit}/{key}": float(value) for key, value in metrics.items() if is_number(value)}


def tag_part(text: str) -> str:
    """`text` as one part of a scalar's name: letters, digits, '-', '_' and '.' kept, anything else '_'."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


def eval_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """An evaluation row's scores, by name (against the row's `agent_steps`): `eval/AGENT/win_rate` for game
    results, else `eval/AGENT/mean_return`, with `_vs_PLAYER` when the yardstick is not random; on leduc also
    `eval/AGENT/exploitability`."""
    score = "win_rate" if row.get("outcomes") else "mean_return"
    against = "" if row.get("opponent", "random") == "random" else f"_vs_{tag_part(row['opponent'])}"
    scalars = {f"eval/{row['agent']}/{score}{against}": float(row[score])}
    if "exploitability" in row:  # leduc: the round's exact exploitability (evaluation/exploitability.py)
        scalars[f"eval/{row['agent']}/exploitability"] = float(row["exploitability"])
    return scalars


def flat_params(params: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """Nested parameters flattened for trackers whose parameters are flat: {"config": {"seed": 0}} ->
    {"config.seed": 0}; an empty dict stays one entry ({})."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping) and value:
            flat.update({f"{key}{sep}{k}": v for k, v in flat_params(value, sep).items()})
        else:
            flat[str(key)] = value
    return flat


class Trackers:
    """Every tracker of a run, each event handed to each in turn. A tracker that raises is one warning line; it
    is closed (as FAILED) and dropped, and the run goes on without it."""

    def __init__(self, trackers: Mapping[str, Tracker] | None = None) -> None:
        self._trackers: dict[str, Tracker] = dict(trackers or {})

    @property
    def names(self) -> list[str]:
        """The trackers still open, by name."""
        return list(self._trackers)

    def log_metrics(self, unit: str, step: int, metrics: Mapping[str, Any]) -> None:
        """A learning unit's learner metrics at its update count `step`, to every tracker."""
        self._each("log metrics", lambda t: t.log_metrics(unit, step, metrics))

    def log_eval(self, row: Mapping[str, Any]) -> None:
        """An evaluation row, to every tracker."""
        self._each("log an evaluation row", lambda t: t.log_eval(row))

    def log_file(self, path: str | Path) -> None:
        """A finished file of the run directory (a plot, result.json), to every tracker."""
        self._each(f"log {Path(path).name}", lambda t: t.log_file(Path(path)))

    def close(self, status: str = FINISHED) -> None:
        """Close every tracker (a failure to close is one warning line); later calls do nothing."""
        trackers, self._trackers = self._trackers, {}
        for name, tracker in trackers.items():
            try:
                tracker.close(status)
            except Exception as exc:  # noqa: BLE001 - a tracker never stops the run
                logger.warning(f"tracker {name!r} failed to close ({type(exc).__name__}: {exc})")

    def _each(self, what: str, call: Callable[[Tracker], None]) -> None:
        for name, tracker in list(self._trackers.items()):
            try:
                call(tracker)
            except Exception as exc:  # noqa: BLE001 - a tracker never stops the run
                del self._trackers[name]
                logger.warning(f"tracker {name!r} failed to {what} ({type(exc).__name__}: {exc}); the run goes on "
                               f"without it")
                try:
                    tracker.close(FAILED)
                except Exception:  # noqa: BLE001,S110 - already reported; what it started is released if it can be
                    pass
