"""The house rules the code must keep (docs/architecture.md, "Layers"): the import-linter contracts of
pyproject.toml (layers, no cycles), diagnostics through `logging`, and env copies behind their protocol."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pzasync"


@pytest.mark.timeout(120)
def test_the_import_contracts_hold():
    """Every layer imports only from layers below it, and no package's modules import each other in a circle.
    In a process of its own: import-linter disables the loggers that exist where it runs."""
    pytest.importorskip("importlinter")
    run = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                          "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "pzasync layers, top to bottom KEPT" in run.stdout and "no import cycles" in run.stdout


def _library_modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in ("cli.py", "cli")]


def test_library_code_never_prints():
    """Diagnostics go to the `pzasync` logger (pzasync/logs.py); only the command line prints."""
    printing = []
    for path in _library_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                printing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(_library_modules()) > 40
    assert not printing, f"print() in library code: {printing}"


def test_the_actor_never_asks_which_kind_of_env_copies_it_has():
    """The actor drives `EnvCopies` (runtime/copies/protocol.py) and names no implementation of it."""
    source = (PACKAGE / "runtime" / "actor.py").read_text()
    for name in ("WorkerCopies", "EnvWorkers", "LocalCopies"):
        assert name not in source, name
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "isinstance"]
    assert all("copies" not in ast.unparse(c).lower() for c in calls), [ast.unparse(c) for c in calls]


def test_the_logger_prints_pzasync_lines_to_stderr(capfd):
    from pzasync.logs import logger

    logger.warning("a diagnostic")
    assert capfd.readouterr().err == "pzasync: a diagnostic\n"


def test_the_layer_chart_of_the_docs_is_the_import_contract():
    """docs/architecture.md's layer chart names the layers of pyproject.toml's contract, in its order."""
    from pzasync.config.toml import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    expected = [" | ".join(part.strip().removeprefix("pzasync.") for part in layer.split("|")) for layer in layers]
    text = (ROOT / "docs" / "architecture.md").read_text()
    chart = text.split("## Layers", 1)[1].split("```", 2)[1]
    charted = [line[1:].split("  ")[0].strip() for line in chart.splitlines()
               if line.startswith(" ") and line[1] != " "]
    assert charted == expected
