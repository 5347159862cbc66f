"""`pzasync export`: a run's policies as files that act with torch alone or onnxruntime
(pzasync/evaluation/export.py; docs/export.md)."""

from __future__ import annotations

import json

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from pzasync.cli.common import console, errors
from pzasync.extras import require


@click.command(name="export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "file_format", type=click.Choice(["pt2", "onnx"]), default="pt2", show_default=True,
              help="pt2: torch.export's archive, acted with torch.export.load(FILE).module(); onnx: an ONNX model "
                   "for onnxruntime (the 'export' extra).")
@click.option("--out", "out", default=None, metavar="DIR", help="Where the files go [default: RUN_DIR/export].")
def export_cmd(run_dir: str, file_format: str, out: str | None) -> None:
    """Write one file per learning unit of RUN_DIR that acts with torch alone (or onnxruntime), no pzasync
    import: observation (and action mask, and memory for a recurrent policy) in, action out, greedy or sampled;
    beside each, a JSON sidecar with its calling convention (docs/export.md)."""
    from pzasync.evaluation.export import export

    require("torch", "pzasync export")
    if file_format == "onnx":
        require("export", "pzasync export --format onnx")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=errors,
                  transient=True) as progress:
        task = progress.add_task(f"exporting {run_dir}", total=None)

        def advance(unit: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total, description=f"exported {unit}")

        files = export(run_dir, out, file_format, progress=advance)
    table = Table(title=f"{run_dir}: {len(files)} file(s), {file_format}", title_justify="left")
    for column in ("unit", "agents", "file", "inputs", "outputs"):
        table.add_column(column, overflow="fold")
    for path in files:
        about = json.loads(path.with_suffix(".json").read_text())
        table.add_row(about["unit"], ", ".join(about["agents"]), str(path),
                      ", ".join(i["name"] for i in about["inputs"]), ", ".join(o["name"] for o in about["outputs"]))
    console.print(table)
    console.print("each file's calling convention: the .json beside it", highlight=False)
