"""A small network's forward and backward by hand, for DQN's default network on the CPU (docs/learners.md, "DQN
by hand"): the fast path of `DQNLearner.update`, beside the plain one through autograd.

It stays because a paired benchmark shows it on whole runs (docs/benchmarks.md#the-cleanup-pass): on one CPU
thread a DQN update of the connect four network spends more time in autograd's and the modules' per-op
overhead, and in allocating fresh activation tensors, than in its matrix products. By hand, `forward` keeps only
the activations the gradient needs, for the first `keep` rows (so one forward serves the rows trained on and the
rows only evaluated), `backward` writes each parameter's gradient straight into its `.grad`, and both write into
work tensors made once per row count (`_Work`). Public torch operations only; the arithmetic is that of the
modules' forward and autograd's backward (tests/test_by_hand.py compares them, and whole updates). The
parameters stay the modules' own, so checkpoints, policy vectors and the optimizer are unchanged.
"""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np
import torch
from torch import nn

from pzasync.learners.networks import BoardEncoder, Encoder, FlatEncoder


class ManualNet:
    """Forward and backward by hand of one `BoardEncoder` or `FlatEncoder` leaf followed by an `mlp` head of Linear
    layers with ReLU or Tanh between them (no LayerNorm), float32 on the CPU (`supports`). What `forward` returns
    lives in the work tensors: the next call with as many rows overwrites it."""

    def __init__(self, encoder: nn.Module, head: nn.Module, row_counts: int = 8) -> None:
        assert self.supports(encoder, head), "ManualNet.supports(encoder, head)"
        leaf = cast("BoardEncoder | FlatEncoder", cast(Encoder, encoder).leaves[0])
        self.board = isinstance(leaf, BoardEncoder)
        self.scale = float(getattr(leaf, "scale", 1.0))
        self.in_dim = int(leaf.out_dim)  # a flat leaf's cells
        self.places = self.kernel = self.filters = 0
        if isinstance(leaf, BoardEncoder):
            conv = cast(nn.Conv2d, leaf.conv[0])
            self.conv_weight, self.conv_bias = conv.weight, cast(torch.Tensor, conv.bias)  # a BoardEncoder's has one
            self.cells = cast(torch.Tensor, leaf.cells)
            self.places = leaf.places
            self.kernel = len(self.cells) // leaf.places
            self.filters = int(self.conv_weight.shape[0])
            self.in_dim -= self.filters * self.places  # the board's cells: what follows the lines
        layers = list(cast(nn.Sequential, head))
        self.linears: list[nn.Linear] = [m for m in layers if isinstance(m, nn.Linear)]
        #: The layers' parameters, looked up once (a module's attribute lookup costs as much as a small op).
        self.weights = [(m.weight, m.bias) for m in self.linears]
        self.tanh = any(isinstance(m, nn.Tanh) for m in layers)
        self._work: dict[int, _Work] = {}
        #: How many row counts keep their work tensors at once (a learner's batches have one or two).
        self.row_counts = row_counts

    @staticmethod
    def supports(encoder: nn.Module, head: nn.Module) -> bool:
        """Whether `ManualNet` computes this encoder and head exactly: one board or flat leaf, and a head of Linear,
        activation, Linear, ..., Linear with one activation kind (ReLU or Tanh), float32 on the CPU."""
        if type(encoder) is not Encoder or len(encoder.leaves) != 1 or type(head) is not nn.Sequential:
            return False
        if type(encoder.leaves[0]) not in (BoardEncoder, FlatEncoder):
            return False
        layers = list(head)
        if not layers or len(layers) % 2 != 1 or any(type(m) is not nn.Linear for m in layers[::2]):
            return False
        kinds = {type(m) for m in layers[1::2]}
        if len(kinds) > 1 or not kinds <= {nn.ReLU, nn.Tanh}:
            return False
        tensors = [*encoder.parameters(), *head.parameters()]
        return all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)

    def work(self, rows: int) -> _Work:
        """The work tensors for `rows` rows (made at the first call with that many)."""
        work = self._work.get(rows)
        if work is None:
            if len(self._work) >= self.row_counts:  # batches of ever new sizes: keep the memory bounded
                self._work.clear()
            work = self._work[rows] = _Work(self, rows)
        return work

    def inputs(self, arrays: Sequence[np.ndarray]) -> torch.Tensor:
        """The observation arrays (each `(rows, *leaf shape)`), one after the other, as one float32 tensor of
        flattened, scaled rows: what the encoder's forward starts from, written into this net's work tensor for
        that many rows (for a board, beside the line features), so that `forward` copies nothing."""
        rows = sum(len(a) for a in arrays)
        x = self.work(rows).x
        start = 0
        for a in arrays:
            x[start:start + len(a)].copy_(torch.as_tensor(a).reshape(len(a), -1))
            start += len(a)
        if self.scale != 1.0:
            x.mul_(self.scale)
        return x

    def forward(self, x: torch.Tensor, keep: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Outputs for the rows of `x` (from `inputs`), and what `backward` needs for the first `keep` rows."""
        work = self.work(x.shape[0])
        if self.board:
            if x is not work.x:
                work.x.copy_(x)
            torch.index_select(work.x, 1, self.cells, out=work.patches)
            torch.addmm(self.conv_bias, work.placed_patches, self.conv_weight.view(self.filters, self.kernel).t(),
                        out=work.lines)
            # ReLU, written in the BoardEncoder's order (filter-major lines, then the raw cells already there).
            torch.clamp_min(work.lines_by_filter, 0, out=work.features_by_filter)
            h = work.features
            saved = [work.placed_patches[:keep * self.places], h[:keep]] if keep else []
        else:
            h = x
            saved = [h[:keep]] if keep else []
        last = len(self.linears) - 1
        for i, (weight, bias) in enumerate(self.weights):
            h = torch.addmm(bias, h, weight.t(), out=work.layers[i])
            if i < last:
                h = h.tanh_() if self.tanh else h.relu_()
                if keep:
                    saved.append(h[:keep])
        return h, saved

    def backward(self, saved: list[torch.Tensor], grad_out: torch.Tensor) -> None:
        """Write the parameters' gradients of sum(grad_out * outputs) over the rows `forward` kept into their
        `.grad` tensors (which must exist: they are overwritten, not added to)."""
        acts = saved[-len(self.linears):]
        grad = grad_out
        work = self.work(grad.shape[0])
        for i in range(len(self.weights) - 1, -1, -1):
            (weight, bias), a = self.weights[i], acts[i]
            torch.mm(grad.t(), a, out=weight.grad)
            torch.sum(grad, 0, out=bias.grad)
            if i > 0:
                grad = self._through_activation(torch.mm(grad, weight, out=work.grads[i]), a)
        if self.board:
            patches, features = saved[0], saved[1]
            lines = self.filters * self.places
            back = torch.mm(grad, self.weights[0][0][:, :lines], out=work.grad_lines)
            back.mul_(features[:, :lines] > 0)  # ReLU's gradient: where the line's ReLU was positive
            work.grad_by_place.copy_(work.grad_lines_by_place)
            weight_grad, bias_grad = self.conv_weight.grad, self.conv_bias.grad
            assert weight_grad is not None and bias_grad is not None, "the gradients are allocated (module docstring)"
            torch.mm(work.grad_placed.t(), patches, out=weight_grad.view(self.filters, self.kernel))
            torch.sum(work.grad_placed, 0, out=bias_grad)

    def _through_activation(self, grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The gradient before an activation, from the one after it and its output `out` (in place)."""
        if self.tanh:
            return grad.mul_(1.0 - out * out)
        return grad.mul_(out > 0)


class _Work:
    """`ManualNet`'s work tensors for one row count, and the views of them its forward and backward use (made
    once: on batches of a few dozen rows, making views costs as much as some of the arithmetic)."""

    def __init__(self, net: ManualNet, rows: int) -> None:
        empty = torch.empty
        places, kernel, filters = net.places, net.kernel, net.filters
        lines = filters * places
        #: Forward: the line features and raw cells side by side, the patches, the lines per placement.
        self.features = empty(rows, lines + net.in_dim)
        self.x = self.features[:, lines:]
        self.patches = empty(rows, places * kernel)
        self.placed_patches = self.patches.view(rows * places, kernel)
        self.lines = empty(rows * places, filters)
        self.lines_by_filter = self.lines.view(rows, places, filters).transpose(1, 2)
        self.features_by_filter = self.features[:, :lines].view(rows, filters, places)
        self.layers = [empty(rows, layer.out_features) for layer in net.linears]
        #: Backward (with `rows` the rows kept): each layer's input gradient, then the lines' two orders.
        self.grads = [empty(rows, layer.in_features) for layer in net.linears]
        self.grad_lines = empty(rows, lines)
        self.grad_lines_by_place = self.grad_lines.view(rows, filters, places).transpose(1, 2)
        self.grad_placed = empty(rows * places, filters)
        self.grad_by_place = self.grad_placed.view(rows, places, filters)
