"""Networks built from an agent's spaces: one encoder per observation leaf, concatenated, then an MLP trunk.

Leaves are encoded by kind: a 3-dim Box (an HWC image) with a small CNN (uint8 scaled to [0, 1]), any other
Box flattened to floats, Discrete and MultiDiscrete one-hot (respecting `start`), MultiBinary as floats. The
leaf order is `layout.obs_leaves`. Inputs are keyed like the buffer's columns: "obs" for a flat observation,
"obs/<leaf>" for nested ones; `obs_tensors` picks them out of a batch (or "next_obs..." with that prefix).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..spaces import AgentLayout

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}


def leaf_spaces(space: spaces.Space) -> list[spaces.Space]:
    """The leaf spaces of a (possibly nested) space, in the order `AgentLayout.obs_leaves` lists them."""
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in leaf_spaces(sub)]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in leaf_spaces(sub)]
    return [space]


def obs_keys(layout: AgentLayout, prefix: str = "obs") -> list[str]:
    """Column names of the observation leaves, in layout order."""
    if not layout.nested_obs:
        return [prefix]
    return [f"{prefix}/{leaf.name}" for leaf in layout.obs_leaves]


def obs_tensors(obs: dict[str, np.ndarray], layout: AgentLayout, prefix: str = "obs",
                device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The observation leaves under `prefix` ("obs" or "next_obs") as tensors, keyed in the "obs" form.

    Keys are normalised to "obs" / "obs/<leaf>" whatever the prefix, so an `Encoder` takes either. Arrays
    keep their dtype (an image stays uint8 until the encoder scales it) and are not copied on the CPU.
    """
    return {("obs" + key[len(prefix):]): torch.as_tensor(obs[key], device=device)
            for key in obs_keys(layout, prefix)}


class ImageEncoder(nn.Module):
    """HWC image -> `out` features: channels-last input permuted to NCHW, three convs, adaptive pooling.

    Large images (both sides >= 36) get the Atari-style 8/4, 4/2, 3/1 kernels/strides; smaller ones 3x3 convs
    with padding, so any size works. Adaptive pooling to 4x4 fixes the flattened size.
    """

    def __init__(self, space: spaces.Box, out: int = 256) -> None:
        super().__init__()
        h, w, c = (int(d) for d in space.shape)
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        if min(h, w) >= 36:
            convs = [(c, 32, 8, 4, 0), (32, 64, 4, 2, 0), (64, 64, 3, 1, 0)]
        else:
            convs = [(c, 32, 3, 1, 1), (32, 64, 3, 1, 1), (64, 64, 3, 1, 1)]
        layers: list[nn.Module] = []
        for cin, cout, k, s, p in convs:
            layers += [nn.Conv2d(cin, cout, k, stride=s, padding=p), nn.ReLU()]
        self.conv = nn.Sequential(*layers, nn.AdaptiveAvgPool2d((4, 4)), nn.Flatten())
        self.fc = nn.Sequential(nn.Linear(64 * 16, out), nn.ReLU())
        self.out_dim = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float() * self.scale
        return self.fc(self.conv(x))


class OneHotEncoder(nn.Module):
    """Integer components (Discrete: one, MultiDiscrete: several) -> concatenated one-hots."""

    def __init__(self, sizes: Sequence[int], starts: Sequence[int]) -> None:
        super().__init__()
        self.sizes = [int(s) for s in sizes]
        self.register_buffer("starts", torch.as_tensor(list(starts), dtype=torch.int64), persistent=False)
        self.out_dim = sum(self.sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.long().reshape(x.shape[0], -1) - self.starts
        return torch.cat([nn.functional.one_hot(x[:, i].clamp(0, n - 1), n).float()
                          for i, n in enumerate(self.sizes)], dim=1)


class FlatEncoder(nn.Module):
    """Any other Box (and MultiBinary): flattened to float32."""

    def __init__(self, space: spaces.Space) -> None:
        super().__init__()
        self.out_dim = max(1, int(np.prod(space.shape)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1).float()


#: Smallest side of a 3-dim Box treated as an image. Board planes (tictactoe 3x3x2, connect four 6x7x2) are
#: flattened instead: an MLP learns them as well, and a CNN costs ~5x more per update and per act on a CPU.
MIN_IMAGE_SIDE = 16


def is_image(space: spaces.Space) -> bool:
    """An HWC image: a 3-dim Box of uint8, or one whose spatial sides are both >= MIN_IMAGE_SIDE."""
    return (isinstance(space, spaces.Box) and len(space.shape) == 3
            and (space.dtype == np.uint8 or min(space.shape[0], space.shape[1]) >= MIN_IMAGE_SIDE))


def leaf_encoder(space: spaces.Space) -> nn.Module:
    """The encoder for one leaf space."""
    if is_image(space):
        return ImageEncoder(space)
    if isinstance(space, spaces.Discrete):
        return OneHotEncoder([space.n], [space.start])
    if isinstance(space, spaces.MultiDiscrete):
        return OneHotEncoder(space.nvec.reshape(-1), np.asarray(space.start).reshape(-1))
    return FlatEncoder(space)


class Encoder(nn.Module):
    """Observation leaves (a dict from `obs_tensors`) -> one feature vector per row."""

    def __init__(self, layout: AgentLayout) -> None:
        super().__init__()
        self.keys = obs_keys(layout)
        self.leaves = nn.ModuleList(leaf_encoder(space) for space in leaf_spaces(layout.obs_space))
        self.out_dim = sum(leaf.out_dim for leaf in self.leaves)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if len(self.keys) == 1:
            return self.leaves[0](obs[self.keys[0]])
        return torch.cat([enc(obs[key]) for enc, key in zip(self.leaves, self.keys)], dim=1)


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int | None, activation: str = "relu") -> nn.Sequential:
    """Linear layers with `activation` ("relu" or "tanh") between them; `out_dim=None` ends on the last hidden."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, int(width)), ACTIVATIONS[activation]()]
        in_dim = int(width)
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def check_activation(agent: str, name: Any) -> None:
    """Refuse an unknown activation name before anything is built, naming the agent."""
    from ..errors import ConfigError

    if name not in ACTIVATIONS:
        raise ConfigError(f"agent {agent!r}: activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")


def masked_logits(logits: torch.Tensor, mask: Any) -> torch.Tensor:
    """Illegal actions get a very negative logit: never chosen, and no NaN even if a row has no legal action."""
    if mask is None:
        return logits
    mask = torch.as_tensor(mask, dtype=torch.bool, device=logits.device)
    return logits.masked_fill(~mask, -1e9)
