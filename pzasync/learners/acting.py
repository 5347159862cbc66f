"""A policy's acting as one plain torch module, the piece `pzasync export` writes to a file (docs/export.md).

`ActingModule` holds copies of a policy's encoder, recurrent core and head, and its forward is what the policy's
`act` computes, with torch operations only, so that `torch.export` (or the ONNX exporter) can trace it into a
file that acts with torch (or onnxruntime) alone. Its calling convention, positional tensors:

    action[, next_memory] = module(*observation_leaves, [action_mask], [memory], greedy)

- one tensor per observation leaf, in the layout's order (`inputs()` names them: "obs" for a flat observation,
  "obs/<leaf>" for a nested one), a batch of what the env returns (the action mask taken out), in the leaf's
  storage dtype (a Box's own dtype, int64 for a Discrete): an exported program checks each input's dtype;
- `action_mask` where the agent's env gives one: (rows, actions) bool, True where the action is legal;
- `memory` for a recurrent policy: (rows, memory_size) float32, zeros at each agent's episode start, then what
  the previous call returned for that agent;
- `greedy`: a bool scalar tensor. True: the action pzasync's greedy evaluation takes (`act(..., explore=False)`);
  False: drawn as the policy draws in training (a categorical policy from its masked distribution, a Gaussian one
  with its noise, DQN epsilon-greedy over the legal actions at its final epsilon, `epsilon_end`), from torch's
  global generator (`torch.manual_seed` makes it repeatable).

`action` is int64 (rows,) for a Discrete space (its `start` added), or the Box's shape per row, clipped to the
space's bounds in its dtype, as the actor clips before `env.step`. A masked action is never chosen, greedy or
sampled (unless a row has no legal action at all, where the greedy choice is action 0, as in pzasync).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.core.spaces import AgentLayout
from pzasync.learners.networks import Encoder, obs_keys

#: How an `ActingModule` turns the head's output into actions.
RULES = ("q", "categorical", "gaussian")
#: What masked logits and Q-values become (networks.masked_logits).
_MASKED = -1e9


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (a leaf's storage dtype)."""
    return torch.from_numpy(np.zeros(1, dtype)).dtype


class ActingModule(nn.Module):
    """A policy's acting in plain torch (module docstring): `rule` "q" (a Q-network: argmax of the masked values,
    epsilon-greedy when sampled), "categorical" (log-softmax of the masked logits: argmax, or a Gumbel-max draw)
    or "gaussian" (the mean, or the mean plus noise of std exp(log_std); clipped to the Box)."""

    # buffers of the Gaussian rule (`register_buffer`): None for the others
    log_std: torch.Tensor | None
    low: torch.Tensor | None
    high: torch.Tensor | None

    def __init__(self, layout: AgentLayout, encoder: Encoder, head: nn.Module, rule: str, *,
                 core: nn.GRUCell | None = None, epsilon: float = 0.0, log_std: torch.Tensor | None = None) -> None:
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        space = layout.action_space
        self.layout, self.rule, self.epsilon = layout, rule, float(epsilon)
        self.encoder = copy.deepcopy(encoder)
        self.core = copy.deepcopy(core)
        self.head = copy.deepcopy(head)
        dtypes = dict(zip(obs_keys(layout), (leaf.dtype for leaf in layout.obs_leaves)))
        shapes = dict(zip(obs_keys(layout), (leaf.shape for leaf in layout.obs_leaves)))
        #: The observation leaves the policy reads, in order: (input name, storage dtype, shape per row).
        self.leaves = [(key, dtypes[key], shapes[key]) for key in self.encoder.keys]
        self.has_mask = layout.has_mask
        self.action_shape: tuple[int, ...] = ()
        for name in ("log_std", "low", "high"):  # a Gaussian rule's, below
            self.register_buffer(name, None)
        self.memory_size = int(core.hidden_size) if core is not None else 0
        if isinstance(space, spaces.Discrete):
            if rule == "gaussian":
                raise ValueError(f"agent {layout.agent!r}: a Gaussian rule needs a Box action space, got {space}")
            self.start, self.action_dtype = int(space.start), np.dtype(np.int64)
        elif isinstance(space, spaces.Box) and rule == "gaussian" and log_std is not None:
            self.start, self.action_shape, self.action_dtype = 0, tuple(space.shape), np.dtype(space.dtype)
            self.register_buffer("log_std", log_std.detach().clone().float())
            self.register_buffer("low", torch.tensor(np.broadcast_to(space.low, space.shape), dtype=torch.float32))
            self.register_buffer("high", torch.tensor(np.broadcast_to(space.high, space.shape), dtype=torch.float32))
        else:
            raise ValueError(f"agent {layout.agent!r}: rule {rule!r} does not act in {space}")
        self.requires_grad_(False)
        self.eval()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        leaves = len(self.leaves)
        obs = {key: x for (key, _dtype, _shape), x in zip(self.leaves, inputs[:leaves])}
        at = leaves
        mask = None
        if self.has_mask:
            mask, at = inputs[at], at + 1
        features = self.encoder(obs)
        if self.core is not None:
            features = self.core(features, inputs[at])
            at += 1
        greedy = inputs[at]
        action = self._choose(self.head(features), mask, greedy)
        return action if self.core is None else (action, features)

    def _choose(self, out: torch.Tensor, mask: torch.Tensor | None, greedy: torch.Tensor) -> torch.Tensor:
        if self.log_std is not None and self.low is not None and self.high is not None:  # the Gaussian rule
            sample = out + torch.randn_like(out) * self.log_std.exp()
            action = torch.where(greedy, out, sample).reshape(-1, *self.action_shape)
            return torch.minimum(torch.maximum(action, self.low), self.high).to(torch_dtype(self.action_dtype))
        scores = out if mask is None else out.masked_fill(~mask, _MASKED)
        if self.rule == "q":
            best = scores.argmax(dim=1)
            draws = torch.rand_like(out)  # a uniform legal action: the largest uniform score among the legal ones
            if mask is not None:
                legal = mask | ~mask.any(dim=1, keepdim=True)  # a row without a legal action draws among all
                draws = draws.masked_fill(~legal, -1.0)
            explore = torch.rand(out.shape[:1], dtype=out.dtype, device=out.device) < self.epsilon
            chosen = torch.where(greedy | ~explore, best, draws.argmax(dim=1))
        else:
            log_probs = torch.log_softmax(scores, dim=1)
            uniform = torch.rand_like(log_probs).clamp(1e-20, 1.0 - 1e-7)
            sampled = (log_probs - torch.log(-torch.log(uniform))).argmax(dim=1)  # Gumbel-max: a draw from log_probs
            chosen = torch.where(greedy, log_probs.argmax(dim=1), sampled)
        return chosen + self.start

    def example_inputs(self, rows: int = 2) -> tuple[torch.Tensor, ...]:
        """Inputs of `rows` rows in the calling convention (zeros, every action legal, greedy), for tracing."""
        out = [torch.zeros((rows, *shape), dtype=torch_dtype(dtype)) for _key, dtype, shape in self.leaves]
        if self.has_mask and self.layout.mask_shape is not None:
            out.append(torch.ones((rows, *self.layout.mask_shape), dtype=torch.bool))
        if self.core is not None:
            out.append(torch.zeros((rows, self.memory_size), dtype=torch.float32))
        out.append(torch.tensor(True))
        return tuple(out)

    def inputs(self) -> list[dict[str, Any]]:
        """The inputs in order, each a name, shape (None: the batch's rows), dtype and what it is."""
        out: list[dict[str, Any]] = [{"name": key, "shape": [None, *shape], "dtype": str(dtype),
                                      "what": "observation leaf, a batch of what the env returns"}
                                     for key, dtype, shape in self.leaves]
        if self.has_mask and self.layout.mask_shape is not None:
            out.append({"name": "action_mask", "shape": [None, *self.layout.mask_shape], "dtype": "bool",
                        "what": "legal actions (True: legal); a masked action is never chosen"})
        if self.core is not None:
            out.append({"name": "memory", "shape": [None, self.memory_size], "dtype": "float32",
                        "what": "zeros at the agent's episode start, then the memory the previous call returned"})
        out.append({"name": "greedy", "shape": [], "dtype": "bool",
                    "what": "True: the greedy action; False: drawn from the policy (global torch generator)"})
        return out

    def outputs(self) -> list[dict[str, Any]]:
        """The outputs in order: the actions, and a recurrent policy's memory to carry to the next call."""
        out: list[dict[str, Any]] = [{"name": "action", "shape": [None, *self.action_shape],
                                      "dtype": str(self.action_dtype),
                                      "what": "the env's action (a Discrete space's start added; a Box clipped to "
                                              "its bounds)"}]
        if self.core is not None:
            out.append({"name": "next_memory", "shape": [None, self.memory_size], "dtype": "float32",
                        "what": "the memory to pass with this agent's next observation"})
        return out
