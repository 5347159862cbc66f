"""TensorBoard: scalars, and the run's plots as images, in the run directory's tb/ (the `tensorboard` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pzasync.runtime.trackers.base import FINISHED, TrackedRun, eval_scalars, metric_scalars


class TensorBoardTracker:
    """Learner metrics against updates and evaluation scores against agent steps as TensorBoard scalars (the
    names of `metric_scalars` and `eval_scalars`), the plots as images `plots/NAME`, in RUN_DIR/tb."""

    def __init__(self, run: TrackedRun) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run.directory / "tb"))

    def log_metrics(self, unit: str, step: int, metrics: Mapping[str, Any]) -> None:
        """Each metric as the scalar `UNIT/METRIC` at `step` updates."""
        for tag, value in metric_scalars(unit, metrics).items():
            self.writer.add_scalar(tag, value, step)

    def log_eval(self, row: Mapping[str, Any]) -> None:
        """The row's scores as scalars at its agent steps."""
        for tag, value in eval_scalars(row).items():
            self.writer.add_scalar(tag, value, row["agent_steps"])

    def log_file(self, path: Path) -> None:
        """A PNG plot as the image `plots/NAME`; TensorBoard keeps no other files."""
        if path.suffix.lower() == ".png":
            from matplotlib.image import imread  # a plot was drawn, so the `plot` extra is there

            self.writer.add_image(f"plots/{path.stem}", imread(str(path))[..., :3], dataformats="HWC")

    def close(self, status: str = FINISHED) -> None:
        """Flush and close the event file."""
        self.writer.close()
