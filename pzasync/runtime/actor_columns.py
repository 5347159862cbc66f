"""The actor's side of the parallel path in columns (core/parallel_columns.py): each unit's decisions of every copy's
`CycleBlock` answered by one forward with arrays, and each unit's completed transitions kept as columns for the
round's `write_rows`. The same counts, schedules, waits, stored extras and NaN reports as the reference path
(`Actor.decide`, `Actor.emit`), which `Actor` keeps beside it; tests/test_parallel_columns.py compares the two."""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, Sequence, cast

import numpy as np

from pzasync.core.parallel_columns import ColumnSink, CycleBlock, Rows, UnitAnswer, UnitDecisions, columns_apply
from pzasync.core.spaces import AgentLayout
from pzasync.core.stepper import PendingDecision
from pzasync.runtime.acting import ActingAgent, ActorContext
from pzasync.runtime.copies import EnvCopiesFactory
from pzasync.transport.protocols import TransitionWriter


class ColumnActing:
    """`Actor`'s methods for copies stepped in columns (mixed into `Actor`, whose state they share)."""

    context: ActorContext
    factory: EnvCopiesFactory
    agents: dict[str, ActingAgent]
    layouts: dict[str, AgentLayout]
    league: Any
    n_copies: int
    total_steps: int
    _waits: dict[str, bool]
    _track_base: list[int] | None
    _unit_buffer: dict[int, TransitionWriter | None]
    _emitted_rows: dict[int, list[tuple[Rows, np.ndarray]]]
    _emitted_to: dict[int, TransitionWriter]
    _room_for: dict[int, ActingAgent]
    _before_forward: Callable[[ActingAgent, list[ActingAgent]], None]
    _count_decisions: Callable[[ActingAgent, list[ActingAgent], Iterable[ActingAgent]], None]
    _nonfinite: Callable[[str, str], None]
    _check_finite: Callable[[dict[str, np.ndarray], tuple[str, ...], Sequence[PendingDecision | str]], None]

    def _column_sink(self) -> ColumnSink | None:
        """Columns for parallel copies in this process, where they apply: every agent's observation one array and
        no action mask (`columns_apply`), no recurrent policy, no league (whose opponents take seats per
        episode), buffers that take rows (`write_rows`); else None (the reference path)."""
        if not (self.context.columns and self.factory.steps_columns):
            return None
        if self.league is not None or not columns_apply(self.layouts):
            return None
        if any(a.policy.memory_size or (a.buffer is not None and not hasattr(a.buffer, "write_rows"))
               for a in self.agents.values()):
            return None
        return ColumnSink({agent: id(a.local) for agent, a in self.agents.items()}, self.emit_rows)

    def decide_blocks(self, blocks: list[CycleBlock]) -> list[tuple[CycleBlock, dict[Hashable, UnitAnswer], dict]]:
        """`decide` for parallel copies stepped in columns: each unit's decisions of every block in one forward,
        answered with arrays (the same counts, schedules and stored extras as `_answer`)."""
        parts: dict[Hashable, list[tuple[CycleBlock, UnitDecisions]]] = {}
        for block in blocks:
            for unit, decisions in block.units.items():
                parts.setdefault(unit, []).append((block, decisions))
        answers: dict[int, dict[Hashable, UnitAnswer]] = {id(block): {} for block in blocks}
        for unit, rows in parts.items():
            for (block, _), answer in zip(rows, self._answer_unit(rows)):
                answers[id(block)][unit] = answer
        return [(block, answers[id(block)], {}) for block in blocks]

    def _answer_unit(self, parts: list[tuple[CycleBlock, UnitDecisions]]) -> list[UnitAnswer]:
        """One unit's decisions (of several copies' blocks) answered by one forward of its policy."""
        agents = self.agents
        names = parts[0][1].agents if len(parts) == 1 else [a for _, d in parts for a in d.agents]
        first = agents[names[0]]
        seats = [agents[a] for a in dict.fromkeys(names)] if len(parts) > 1 else [agents[a] for a in names]
        self._before_forward(first, seats)
        obs = parts[0][1].obs if len(parts) == 1 else np.concatenate([d.obs for _, d in parts])
        if first.float_keys:
            self._check_finite({"obs": obs}, first.float_keys, names)
        actions, extras = first.policy.act({"obs": obs}, None, True)
        n = len(names)
        self.total_steps += n
        self._count_decisions(first, seats, seats if len(parts) == 1 else (agents[name] for name in names))
        stored: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in extras.items()}
        stored["policy_version"] = np.full(n, first.local.version, np.int64)
        if first.member is not None:
            members = np.fromiter((agents[name].member or 0 for name in names), np.int64, n)
            stored["member"] = members
        track_of = self._track_base
        if track_of is not None:
            per_copy = first.tracks // self.n_copies
            base = np.repeat([track_of[block.copy] * per_copy for block, _ in parts], [len(d.agents) for _, d in parts])
            stored["track"] = base + (stored["member"] if first.member is not None else 0)
        if len(parts) == 1:
            return [(actions, stored)]
        out, start = [], 0
        for _, d in parts:
            end = start + len(d.agents)
            out.append((actions[start:end], {k: v[start:end] for k, v in stored.items()}))
            start = end
        return out

    def emit_rows(self, copy: int, unit: Hashable, agents: list[str], rows: Rows, follows: np.ndarray) -> None:
        """`emit` for transitions completed in columns (one unit's, in order): rewards and final observations
        checked for NaN and inf, written with the rest of the round (`flush`)."""
        reward = rows["reward"]
        bad = ~np.isfinite(reward)
        for i in np.flatnonzero(bad):
            self._nonfinite(agents[int(i)], f"its reward, {float(reward[i])!r}")
        first = self.agents[agents[0]]
        if first.float_keys:
            final = np.flatnonzero((rows["terminated"] | rows["truncated"]) & ~bad)
            if final.size:
                nonfinite = ~np.isfinite(rows["next_obs"][final].reshape(final.size, -1)).all(axis=1)
                for row in final[nonfinite]:
                    self._nonfinite(agents[int(row)], "its final observation")
        buffer = self._unit_buffer[cast(int, unit)]
        if buffer is not None or first.buffer is None:
            self._keep_rows(first, buffer, rows, follows, agents)
            return
        by_buffer: dict[int, list[int]] = {}
        for j, name in enumerate(agents):
            by_buffer.setdefault(id(self.agents[name].buffer), []).append(j)
        for index in by_buffer.values():
            who = [agents[i] for i in index]
            a = self.agents[who[0]]
            self._keep_rows(a, a.buffer, {k: v[index] for k, v in rows.items()}, follows[index], who)

    def _keep_rows(self, a: ActingAgent, buffer: TransitionWriter | None, rows: Rows, follows: np.ndarray,
                   agents: list[str]) -> None:
        if buffer is None:
            return
        key = id(buffer)
        kept = self._emitted_rows.get(key)
        if kept is None:
            kept = self._emitted_rows[key] = []
            self._emitted_to[key] = buffer
            if a.on_policy and self._waits[a.agent]:
                self._room_for[key] = a
        kept.append((rows, follows))
        by_name = self.agents
        for name in agents:
            by_name[name].count.written += 1

