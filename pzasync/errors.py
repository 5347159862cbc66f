"""Every exception pzasync raises on purpose, in one place.

`PzasyncError` is the root. `UserInputError` and its subclasses mean the user gave something we cannot
use (a mistyped env id, an unsupported space, an option out of range); the CLI prints their message without
a traceback. The others report failures of the runtime itself.
"""

from __future__ import annotations

import signal
from multiprocessing.process import BaseProcess
from typing import TypeVar, cast

from pzasync.logs import logger


class PzasyncError(Exception):
    """Base class of all pzasync errors."""


class UserInputError(PzasyncError, ValueError):
    """Bad input from the user: printed without a traceback by the CLI."""


class EnvSpecError(UserInputError):
    """An environment spec that cannot be turned into an AEC env."""


class UnsupportedSpaceError(UserInputError):
    """An observation or action space that pzasync cannot store, named with its agent."""


class ConfigError(UserInputError):
    """An option out of range or of the wrong kind, named with the option."""


class DatasetError(UserInputError):
    """Recorded transitions (a dataset directory, core/dataset.py) that cannot be read, or do not fit the run's
    agents: the message names the dataset, the agent and the field."""


class InsufficientSharedMemoryError(UserInputError):
    """A shared-memory allocation that does not fit in free /dev/shm (bytes needed and available)."""

    def __init__(self, what: str, needed: int, available: int) -> None:
        self.needed = needed
        self.available = available
        super().__init__(
            f"{what} needs {needed:,} bytes of shared memory but only {available:,} bytes are free in "
            f"/dev/shm; lower RunConfig.buffer_capacity (off-policy learners) or onpolicy_buffer_batches "
            f"(on-policy), shrink large observations first (e.g. supersuit.resize_v1), or enlarge /dev/shm"
        )


class SlotReadTimeout(PzasyncError, TimeoutError):
    """A policy slot could not be read consistently within the timeout (a publisher never paused)."""


class RewardConservationError(PzasyncError, AssertionError):
    """The rewards assigned to transitions do not add up to what the environment paid."""


class LearnerCrashedError(PzasyncError):
    """A learner kept crashing (or hanging) past its restart budget; carries its last traceback."""


class EnvCrashedError(PzasyncError):
    """The environment raised; the message names the env, the agent, the episode and the step."""


class RemoteEnvError(EnvCrashedError):
    """An env served by another process (pzasync.remote) failed: its server died, hung past the deadline or
    answered with an error; the message names the server, the instances, and what is known of its end."""


class RemoteProtocolError(RemoteEnvError):
    """A remote env endpoint broke the protocol (docs/remote.md): a malformed frame, another protocol version."""


class RemoteSpaceError(RemoteProtocolError):
    """A remote env's spaces cannot be carried, or disagree with the data or the record sizes stated."""


class NonFiniteError(PzasyncError, FloatingPointError):
    """NaN or inf in an observation or reward while RunConfig.nonfinite == "raise"."""


class LearnerStartupError(PzasyncError):
    """A learner process failed before publishing its first policy."""


class RemoteTraceback(Exception):
    """The formatted traceback of an error raised in another process; set as the `__cause__` of the error
    raised again here, so Python prints where it really happened (as `concurrent.futures` does)."""

    def __init__(self, traceback_text: str) -> None:
        super().__init__(traceback_text)
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        return f'\n"""\n{self.traceback_text}"""'


def error_type_path(cls: type[BaseException]) -> str:
    """`module:qualname` of an exception type: what crosses a process boundary instead of the type."""
    return f"{cls.__module__}:{cls.__qualname__}"


_Error = TypeVar("_Error", bound=PzasyncError)


def remote_error(base: type[_Error], type_path: str, text: str, traceback_text: str) -> _Error:
    """An error raised in another process, raised again here as its own type and as `base`.

    The result is an instance of both `base` (e.g. EnvCrashedError) and the type the other process raised
    (`except ValueError` catches it), its `__cause__` carries that process's traceback, and `original_type`
    names the type. A type that cannot be imported here, or combined, gives a plain `base` with the same
    message.
    """
    import importlib

    cls: type[_Error] = base
    try:
        module_name, _, name = type_path.rpartition(".") if ":" not in type_path else type_path.partition(":")
        original = getattr(importlib.import_module(module_name), name)
        if isinstance(original, type) and issubclass(original, Exception) and not issubclass(base, original):
            # The plain message whatever the type (KeyError, for one, would quote it).
            cls = cast("type[_Error]", type(original.__name__, (base, original),
                                            {"__module__": original.__module__, "__str__": BaseException.__str__}))
    except Exception:  # noqa: BLE001 - a type we cannot rebuild still gives the message and traceback
        cls = base
    try:
        error = cls.__new__(cls)
        Exception.__init__(error, text)
    except Exception:  # noqa: BLE001
        error = base(text)
    error.original_type = type_path  # type: ignore[attr-defined]
    error.__cause__ = RemoteTraceback(traceback_text) if traceback_text else None
    return error


def learner_error(type_path: str, message: str, traceback_text: str, note: str) -> LearnerCrashedError:
    """The error that ends a run whose learner kept failing, raised again as the learner's own exception type
    (`remote_error` with LearnerCrashedError)."""
    return remote_error(LearnerCrashedError, type_path, f"{note}; last failure: {message}", traceback_text)


def exit_description(exitcode: int | None) -> str:
    """How a child process ended, for messages: 'exit code 1', 'signal SIGABRT', or 'no exit code yet'."""
    if exitcode is None:
        return "no exit code yet"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def report_unclean_exit(what: str, process: BaseProcess) -> None:
    """Say on stderr that a child process whose work was complete did not exit cleanly (a C++ runtime's
    `std::terminate` at exit, say): its results stand, but the line names which process it was."""
    if process.exitcode not in (0, None):
        logger.warning(f"{what} (pid {process.pid}) ended with {exit_description(process.exitcode)} "
              f"after finishing its work; its results are kept")
