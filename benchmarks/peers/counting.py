"""Live-agent decisions of PettingZoo parallel envs, counted the same way under every peer (parallel_collection.py).

A module of its own so that copies of a counted env stay counted into this process's one count: SuperSuit's
`concat_vec_envs_v1` copies the env with cloudpickle, which pickles what lives in a script's `__main__` (an
attribute holding a counter included) by value, and what lives in an importable module by reference.
"""

from __future__ import annotations

from typing import Any

from pettingzoo.utils import BaseParallelWrapper

#: Decisions of every `Counted` env in this process; callers take differences around what they time.
decisions = 0


class Counted(BaseParallelWrapper):
    """A parallel env that adds to `decisions` the agents alive at each `step()`, one decision each (a reset adds
    nothing)."""

    def step(self, actions: dict[Any, Any]) -> Any:
        global decisions
        decisions += len(self.env.agents)
        return self.env.step(actions)
