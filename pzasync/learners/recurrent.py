"""Training a recurrent policy on sequences: chunks of each trajectory, started from the memory the actor
stored, never crossing an episode's end.

The actor stores with every transition the memory its policy was given at that decision (the `memory` extra,
zeros at the agent's episode start: runtime/actor.py). An on-policy chunk holds every env copy's and group
member's rows interleaved (`trajectory_ids`); `sequence_chunks` cuts each trajectory at every episode end and
then into pieces of `seq_len` rows. A piece starts from the memory stored with its first row (R2D2's and
Sample Factory's "stored state"); with `burn_in` > 0 it starts up to that many rows earlier in the same
episode, from the memory stored there, and those rows only refresh the memory with the current network (no
loss, no gradient). `sequence_outputs` runs the recurrent core over a set of chunks in one batched loop over
time steps and returns the core's output for each trained row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Chunk:
    """Batch rows run in order from the memory stored with `rows[0]`; the first `context` only refresh it."""

    rows: np.ndarray
    context: int = 0

    @property
    def trained(self) -> np.ndarray:
        return self.rows[self.context:]


def sequence_chunks(track: np.ndarray | None, done: np.ndarray, seq_len: int, burn_in: int = 0) -> list[Chunk]:
    """Chunks covering every row exactly once as a trained row, in each trajectory's order (track None: one
    trajectory), cut after every row that ends an episode (`done`) and every `seq_len` trained rows."""
    n = len(done)
    trajectories = [np.arange(n)] if track is None else [np.flatnonzero(track == t) for t in np.unique(track)]
    chunks: list[Chunk] = []
    for rows in trajectories:
        ends = np.flatnonzero(done[rows]) + 1
        for episode in np.split(rows, ends):
            for start in range(0, len(episode), seq_len):
                first = max(0, start - burn_in)
                chunks.append(Chunk(episode[first:start + seq_len], start - first))
    return chunks


def sequence_outputs(core: torch.nn.Module, features: torch.Tensor, memory: torch.Tensor,
                     chunks: list[Chunk]) -> tuple[np.ndarray, torch.Tensor]:
    """The core's output at every trained row of `chunks`: (the rows, their outputs in that order).

    `features[i]` is the encoded observation of batch row i and `memory[i]` the memory stored with it. All
    chunks advance together, one time step per iteration; a finished chunk's memory is held, and memory
    entering the first trained step of a chunk with burn-in is detached (burn-in rows carry no gradient)."""
    length = max(len(c.rows) for c in chunks)
    index = np.zeros((len(chunks), length), np.int64)
    valid = np.zeros((len(chunks), length), bool)
    trained = np.zeros((len(chunks), length), bool)
    for i, c in enumerate(chunks):
        index[i, :len(c.rows)] = c.rows
        valid[i, :len(c.rows)] = True
        trained[i, c.context:len(c.rows)] = True
    device = features.device
    index_t = torch.as_tensor(index, device=device)
    valid_t = torch.as_tensor(valid, device=device)
    detach_at = [c.context for c in chunks]
    h = memory[index_t[:, 0]]
    outputs = []
    for t in range(length):
        if any(d == t and d > 0 for d in detach_at):
            at = torch.as_tensor([d == t for d in detach_at], device=device)[:, None]
            h = torch.where(at, h.detach(), h)
        step = core(features[index_t[:, t]], h)
        h = torch.where(valid_t[:, t, None], step, h)
        outputs.append(step)
    stacked = torch.stack(outputs, dim=1)
    mask = torch.as_tensor(trained, device=device)
    return index[trained], stacked[mask]


def gru_core(in_dim: int, size: int) -> torch.nn.GRUCell:
    """The recurrent core of a policy with `memory="gru"`: a GRU cell over the encoded observation."""
    return torch.nn.GRUCell(in_dim, size)


def memory_tensor(batch: dict[str, Any], device: torch.device) -> torch.Tensor:
    """The stored memory column of a batch as a float32 tensor."""
    return torch.as_tensor(np.asarray(batch["memory"], dtype=np.float32), device=device)
