"""PettingZoo's `aec_to_parallel` conversion with each observation computed once a cycle, not twice.

Every PettingZoo 1.27 env module outside MAgent2 (butterfly, sisl, mpe2) offers `parallel_env()` through
`parallel_wrapper_fn`, so the parallel path gets `aec_to_parallel_wrapper(aec_env)`; SuperSuit's observation
lambdas wrap a parallel env the same way, as `aec_to_parallel(wrapper(parallel_to_aec(env)))`. The conversion's
`step` calls `aec_env.last()` before each agent's move and drops what it returns, then observes every agent at the
cycle's end: every observation is computed twice. Where `observe` costs (knights_archers_zombies measures every
entity, pistonball crops its screen, SuperSuit's `color_reduction` and `resize` redo their work), that waste is
much of a cycle. `observed_once` builds the same conversion over `LastWithoutObservation`, whose `last()` leaves
the observation out: the conversion returns the same values (tests/test_observed_once.py compares them field by
field) and computes each observation once.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import aec_to_parallel_wrapper
from pettingzoo.utils.wrappers import BaseWrapper


class LastWithoutObservation(BaseWrapper):
    """An AEC env whose `last()` returns None for the observation, for a caller that drops it
    (`aec_to_parallel_wrapper.step`); `observe(agent)` is unchanged."""

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.env.last(observe=False)


def observed_once(env: ParallelEnv) -> ParallelEnv:
    """`env` itself, unless it is PettingZoo's `aec_to_parallel` conversion (the exact class: a subclass may use
    what `last()` returns); then the same conversion of the same AEC env that observes each agent once a cycle."""
    if type(env) is aec_to_parallel_wrapper and not isinstance(env.aec_env, LastWithoutObservation):
        return aec_to_parallel_wrapper(LastWithoutObservation(env.aec_env))
    return env
