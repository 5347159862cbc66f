"""The package, its benchmark scripts and its tests pass the linter, the package its type checker, with the settings in
pyproject.toml ([tool.ruff], [tool.mypy]), run from the repository root whatever the working directory."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_ruff_passes_on_the_package_benchmarks_and_tests():
    done = _run("ruff", "check", "pzasync", "benchmarks", "tests", timeout=120)
    assert done.returncode == 0, f"ruff check pzasync benchmarks tests failed:\n{done.stdout}{done.stderr}"


@pytest.mark.slow
def test_mypy_passes_on_the_package():
    done = _run("mypy", "pzasync", timeout=600)
    assert done.returncode == 0, f"mypy pzasync failed:\n{done.stdout}{done.stderr}"
