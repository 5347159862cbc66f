"""Every exception pzasync raises on purpose, in one place.

`PzasyncError` is the root. `UserInputError` and its subclasses mean the user gave something we cannot
use (a mistyped env id, an unsupported space, an option out of range); the CLI prints their message without
a traceback. The others report failures of the runtime itself.
"""

from __future__ import annotations


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


class NonFiniteError(PzasyncError, FloatingPointError):
    """NaN or inf in an observation or reward while RunConfig.nonfinite == "raise"."""


class LearnerStartupError(PzasyncError):
    """A learner process failed before publishing its first policy."""
