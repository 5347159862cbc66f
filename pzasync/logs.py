"""Diagnostics go to the `pzasync` logger (`logger`), never to `print`.

By default they reach stderr as `pzasync: message` lines, for the command line and for Python users alike
(a crashed learner, a stuck env, a restart must not pass silently). Configure them as any logger:
`logging.getLogger("pzasync").setLevel(logging.ERROR)` to quiet them, or `use_default_handler(False)` to
send them through your own handlers (the root logger's, for one) instead."""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("pzasync")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time (so redirections and captures see the lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("pzasync: %(message)s"))

    @property
    def stream(self):  # noqa: ANN201 - StreamHandler's attribute
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001 - StreamHandler sets it in __init__
        pass


_default_handler = _StderrHandler()


def use_default_handler(on: bool = True) -> None:
    """Whether `pzasync` diagnostics go to stderr by this module's handler (the default) or only to the
    handlers you configure (propagating to the root logger)."""
    if on and _default_handler not in logger.handlers:
        logger.addHandler(_default_handler)
    elif not on and _default_handler in logger.handlers:
        logger.removeHandler(_default_handler)
    logger.propagate = not on


if not logger.handlers:
    logger.setLevel(logging.INFO)
    use_default_handler(True)
