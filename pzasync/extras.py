"""The optional extras of pyproject.toml that commands need, checked before a command starts: a missing one is one
line naming the extra, what needs it and the pip command that installs it (not a traceback after the work)."""

from __future__ import annotations

import importlib.util

from pzasync.errors import UserInputError

#: Each extra and the modules it provides (pyproject.toml, [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "plot": ("matplotlib",),
    "tensorboard": ("tensorboard",),
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
    "ray": ("ray",),
    "envs": ("supersuit", "mpe2"),
    "sweep": ("optuna",),
    "export": ("onnx", "onnxscript"),
}


def missing(extra: str) -> list[str]:
    """The modules of `extra` that are not installed here."""
    return [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]


def install_line(extra: str) -> str:
    """The command that installs an extra."""
    return f'pip install "pzasync[{extra}]"'


def require(extra: str, what: str) -> None:
    """UserInputError unless `extra` is installed: "`what` needs the 'plot' extra (matplotlib is not installed):
    pip install "pzasync[plot]"."""
    absent = missing(extra)
    if absent:
        raise UserInputError(f"{what} needs the {extra!r} extra ({', '.join(absent)} "
                             f"{'is' if len(absent) == 1 else 'are'} not installed): {install_line(extra)}")
