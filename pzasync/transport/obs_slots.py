"""Shared-memory slots that carry observations from env workers to their actor (runtime/copies/workers.py).

Each env copy has a pending slot: the observation and action mask of the decision it waits on (a copy waits
on at most one at a time on the AEC path); on the parallel path (`per_agent`), where a copy waits on every live
agent's decision of its cycle, each (copy, agent) has one. Each (copy, agent) also has a final slot: an
observation that ends the agent's transition without being a decision the actor saw (the last one of an
episode). A worker writes a slot and
names it in its next answer on the pipe; the actor copies it out as soon as that answer arrives, before it
sends the group its next message. Only then may the worker write that slot again, so the pipe's send and
receive order every write before its read. A final slot is named at most once per answer (the worker checks).

A slot holds one agent's record: each observation leaf in its storage dtype and shape, then the mask, each
64-byte aligned. What does not match the agent's layout (an env that returns another shape or dtype than its
space says) is sent through the pipe instead, so the slots speed things up and never decide what arrives.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from pzasync.core.spaces import AgentLayout, leaf_value
from pzasync.transport.shm import ArraySpec, Segment, carve, packed_size

#: Final slots (copies x agents records) are left out above this size; their observations then use the pipe.
FINAL_SLOTS_MAX_BYTES = 64 << 20
_serial = itertools.count()  # several sets of slots may live in one process (each run of an actor has its own)


def _record_specs(layout: AgentLayout) -> list[ArraySpec]:
    specs = [ArraySpec(f"leaf{i}", leaf.shape, leaf.dtype.str) for i, leaf in enumerate(layout.obs_leaves)]
    if layout.mask_shape is not None:
        specs.append(ArraySpec("mask", layout.mask_shape, np.dtype(bool).str))
    return specs


class ObservationSlots:
    """The pending and final slots of `copies` env copies whose agents have `layouts`, in one segment; with
    `per_agent`, a pending slot per (copy, agent) (the parallel path)."""

    def __init__(self, segment: Segment, layouts: dict[str, AgentLayout], copies: int,
                 per_agent: bool = False) -> None:
        self.segment = segment
        self.layouts = layouts
        self.copies = copies
        self.agent_index = {agent: i for i, agent in enumerate(layouts)}
        self.specs = {agent: _record_specs(layout) for agent, layout in layouts.items()}
        self.record_bytes, self.has_final_slots = self.sizes(layouts, copies)
        #: Pending slots, one per copy or per (copy, agent); the final slots follow them.
        self.per_agent = per_agent
        self.pending_slots = copies * (len(layouts) if per_agent else 1)
        #: (slot, agent) -> the leaves' views and the mask's view (None without a mask), made on first use.
        self._views: dict[tuple[int, str], tuple[list[np.ndarray], np.ndarray | None]] = {}

    @staticmethod
    def sizes(layouts: dict[str, AgentLayout], copies: int) -> tuple[int, bool]:
        """Bytes of one slot, and whether the final slots fit under FINAL_SLOTS_MAX_BYTES."""
        record = max((packed_size(_record_specs(layout)) for layout in layouts.values()), default=64)
        return record, copies * len(layouts) * record <= FINAL_SLOTS_MAX_BYTES

    @classmethod
    def nbytes(cls, layouts: dict[str, AgentLayout], copies: int, per_agent: bool = False) -> int:
        record, finals = cls.sizes(layouts, copies)
        return record * copies * ((len(layouts) if per_agent else 1) + (len(layouts) if finals else 0))

    @classmethod
    def create(cls, run_id: str, layouts: dict[str, AgentLayout], copies: int,
               per_agent: bool = False) -> ObservationSlots:
        """A new segment, owned (and unlinked, `unlink`) by this process: the actor's."""
        return cls(Segment.create(run_id, f"envobs{next(_serial)}", cls.nbytes(layouts, copies, per_agent)),
                   layouts, copies, per_agent)

    @classmethod
    def attach(cls, name: str, layouts: dict[str, AgentLayout], copies: int,
               per_agent: bool = False) -> ObservationSlots:
        """The segment `create` made, seen from an env worker."""
        return cls(Segment.attach(name), layouts, copies, per_agent)

    def pending_slot(self, copy: int, agent: str | None = None) -> int:
        """Where the decision `agent` of `copy` waits on is put: the copy's slot, or with `per_agent` the
        (copy, agent)'s."""
        if agent is None or not self.per_agent:
            return copy
        return copy * len(self.layouts) + self.agent_index[agent]

    def final_slot(self, copy: int, agent: str) -> int | None:
        """Where `agent` of `copy` gets an episode's last observation (None: no final slots, or an unknown agent)."""
        index = self.agent_index.get(agent)
        if index is None or not self.has_final_slots:
            return None
        return self.pending_slots + copy * len(self.layouts) + index

    def _views_of(self, slot: int, agent: str) -> tuple[list[np.ndarray], np.ndarray | None]:
        views = self._views.get((slot, agent))
        if views is None:
            start = slot * self.record_bytes
            carved = carve(self.segment.view[start:start + self.record_bytes], self.specs[agent])
            mask = carved.pop("mask", None)
            views = self._views[(slot, agent)] = (list(carved.values()), mask)
        return views

    def put(self, slot: int, agent: str, obs: Any, mask: np.ndarray | None) -> bool:
        """Write `agent`'s observation and mask into `slot` (worker side); False, writing nothing the actor
        will read, when they do not match the agent's layout and must go through the pipe."""
        layout = self.layouts.get(agent)
        if layout is None:
            return False
        leaf_views, mask_view = self._views_of(slot, agent)
        if (mask is None) != (mask_view is None):
            return False
        try:
            values = [obs] if not layout.nested_obs else [leaf_value(obs, leaf.path) for leaf in layout.obs_leaves]
        except (KeyError, IndexError, TypeError):
            return False
        if mask is not None and mask_view is not None:  # both or neither (checked above)
            values.append(mask)
            leaf_views = [*leaf_views, mask_view]
        for value, view in zip(values, leaf_views):
            if type(value) is not np.ndarray or value.dtype != view.dtype or value.shape != view.shape:
                return False
        for value, view in zip(values, leaf_views):
            view[...] = value
        return True

    def take(self, slot: int, agent: str) -> tuple[Any, np.ndarray | None]:
        """A private copy of the observation and mask `put` wrote into `slot` (actor side)."""
        leaf_views, mask_view = self._views_of(slot, agent)
        layout = self.layouts[agent]
        if not layout.nested_obs:
            obs = leaf_views[0].copy()
        else:
            obs = layout.nest({leaf.name: view.copy() for leaf, view in zip(layout.obs_leaves, leaf_views)})
        return obs, None if mask_view is None else mask_view.copy()

    @property
    def name(self) -> str:
        return self.segment.name

    def close(self) -> None:
        """Unmap the segment from this process."""
        self._views.clear()
        self.segment.close()

    def unlink(self) -> None:
        """Remove the segment's name (the owner, once its workers are gone)."""
        self.segment.unlink()
