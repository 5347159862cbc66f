"""Networks built from an agent's spaces: one encoder per observation leaf, concatenated, then an MLP trunk.

Leaves are encoded by kind: a 3-dim Box (an HWC image) with a small CNN (uint8 scaled to [0, 1]), any other
Box flattened to floats, Discrete and MultiDiscrete one-hot (respecting `start`), MultiBinary as floats. The
learner option `torso` ("auto", "mlp", "cnn") decides about 3-dim Boxes: see `leaf_kind` and `auto_torso`. The
leaf order is `layout.obs_leaves`. Inputs are keyed like the buffer's columns: "obs" for a flat observation,
"obs/<leaf>" for nested ones; `obs_tensors` picks them out of a batch (or "next_obs..." with that prefix).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.core.spaces import AgentLayout
from pzasync.errors import UnsupportedSpaceError

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


def explore_uniformly(actions: np.ndarray, epsilon: float, mask: np.ndarray | None, n: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Epsilon-greedy over a batch: each row, with probability epsilon, becomes a uniform draw among its legal
    actions (all `n` where there is no mask or a row has none legal). One vectorised draw per batch."""
    rows = np.flatnonzero(rng.random(len(actions)) < epsilon)
    if len(rows) == 0:
        return actions
    scores = rng.random((len(rows), n))
    if mask is not None:
        legal = np.asarray(mask[rows], dtype=bool)
        legal[~legal.any(axis=1)] = True
        scores[~legal] = -1.0  # the largest uniform score among the legal actions is a uniform legal choice
    actions[rows] = scores.argmax(axis=1)
    return actions


#: How ImageEncoder's layers start: PyTorch's default ("torch") or orthogonal weights of gain sqrt(2) and zero biases
#: ("orthogonal", as CleanRL's and SB3's ortho_init have them).
IMAGE_INITS = ("torch", "orthogonal")


class ImageEncoder(nn.Module):
    """HWC image -> `out` features: channels-last input permuted to NCHW, three convs, adaptive pooling.

    Large images (both sides >= 36) get the Atari-style 8/4, 4/2, 3/1 kernels/strides; smaller ones 3x3 convs
    with padding, so any size works. Adaptive pooling to 4x4 fixes the flattened size. `init`: one of IMAGE_INITS.
    `invert`: read 1 - x of uint8 frames scaled to [0, 1], so that a bright background (pistonball's white) is 0
    and only what differs from it drives the convs.
    """

    def __init__(self, space: spaces.Box, out: int = 256, init: str = "torch", invert: bool = False) -> None:
        super().__init__()
        h, w, c = (int(d) for d in space.shape)
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        self.invert = invert and space.dtype == np.uint8
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
        if init not in IMAGE_INITS:
            from pzasync.errors import ConfigError

            raise ConfigError(f"image_init must be one of {list(IMAGE_INITS)}, got {init!r}")
        if init == "orthogonal":
            for module in self.modules():
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    nn.init.orthogonal_(module.weight, 2 ** 0.5)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float() * self.scale
        return self.fc(self.conv(1.0 - x if self.invert else x))


class OneHotEncoder(nn.Module):
    """Integer components (Discrete: one, MultiDiscrete: several) -> concatenated one-hots."""

    starts: torch.Tensor  # a buffer (`register_buffer`)

    def __init__(self, sizes: Iterable[int], starts: Iterable[int]) -> None:
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
        if space.shape is None:
            raise UnsupportedSpaceError(f"observation space {space!r} has no shape to flatten")
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


class BoardEncoder(nn.Module):
    """Small HWC board planes (connect four 6x7x2, tictactoe 3x3x2) -> line features plus the raw cells.

    One convolution without padding whose kernel spans BOARD_KERNEL cells (or the whole board, if smaller):
    every placement of the kernel sees every row, column and diagonal segment of that length, which is what
    a board game's tactics are made of (a filter learns "three of mine and an empty fourth"). Its
    `channels` features per placement (BOARD_CHANNELS unless DQN's `board_channels` option says otherwise)
    are flattened, without pooling (position matters), and the raw cells are appended so nothing the MLP
    trunk could use is lost.

    `cells` lists each kernel placement's cells in the flattened board, in the order of the conv weight: DQN's
    path by hand (learners/by_hand.py) gathers them to compute the convolution as one matrix product, which on a
    board this small costs less than `Conv2d`'s per-call set-up (tests/test_learners.py checks the two agree).
    """

    def __init__(self, space: spaces.Box, channels: int | None = None) -> None:
        super().__init__()
        h, w, c = (int(d) for d in space.shape)
        channels = BOARD_CHANNELS if channels is None else channels
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        kh, kw = min(BOARD_KERNEL, h), min(BOARD_KERNEL, w)
        self.conv = nn.Sequential(nn.Conv2d(c, channels, (kh, kw)), nn.ReLU(), nn.Flatten())
        self.out_dim = channels * (h - kh + 1) * (w - kw + 1) + h * w * c
        # Placement p's cells in the flattened HWC board, in the (channel, row, column) order of the conv weight.
        cells = [((r + i) * w + (q + j)) * c + ch for r in range(h - kh + 1) for q in range(w - kw + 1)
                 for ch in range(c) for i in range(kh) for j in range(kw)]
        self.register_buffer("cells", torch.as_tensor(cells, dtype=torch.int64), persistent=False)
        self.places = (h - kh + 1) * (w - kw + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() * self.scale if self.scale != 1.0 else x.float()
        lines = self.conv(x.permute(0, 3, 1, 2))
        return torch.cat([lines, x.reshape(x.shape[0], -1)], dim=1)


#: BoardEncoder: filters per kernel placement, and the kernel's side (a line of four on connect four).
BOARD_CHANNELS, BOARD_KERNEL = 64, 4
#: A 3-dim Box is board-shaped (a candidate for the conv torso) if both spatial sides are >= MIN_BOARD_SIDE
#: and it has at most MAX_BOARD_CHANNELS channels (planes, not a flattened feature dimension).
MIN_BOARD_SIDE, MAX_BOARD_CHANNELS = 3, 16
#: Whether torso="auto" convolves board-shaped leaves (True) or flattens them into the MLP (False, the rule
#: before the conv torso existed). Images (`is_image`) are convolved either way.
AUTO_CNN_FOR_BOARDS = True
TORSOS = ("auto", "mlp", "cnn")


def is_board(space: spaces.Space) -> bool:
    """A 3-dim Box shaped like board planes or a small image: H, W >= MIN_BOARD_SIDE, few channels."""
    return (isinstance(space, spaces.Box) and len(space.shape) == 3
            and min(space.shape[0], space.shape[1]) >= MIN_BOARD_SIDE and space.shape[2] <= MAX_BOARD_CHANNELS)


def auto_torso(space: spaces.Space) -> str:
    """What torso="auto" does with one leaf: "image" (ImageEncoder), "board" (BoardEncoder) or "flat"."""
    if is_image(space):
        return "image"
    if AUTO_CNN_FOR_BOARDS and is_board(space):
        return "board"
    return "flat"


def leaf_kind(space: spaces.Space, torso: str = "auto") -> str:
    """How a leaf is encoded under `torso`: "image", "board", "flat" or "onehot".

    "mlp" flattens every Box (images too); "cnn" convolves every 3-dim Box (ImageEncoder for images,
    BoardEncoder for the rest); "auto" follows `auto_torso`. Discrete and MultiDiscrete leaves are one-hot
    whatever the torso.
    """
    if torso not in TORSOS:
        from pzasync.errors import ConfigError

        raise ConfigError(f"torso must be one of {list(TORSOS)}, got {torso!r}")
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return "onehot"
    three_dim_box = isinstance(space, spaces.Box) and len(space.shape) == 3
    if torso == "mlp" or not three_dim_box:
        return "flat"
    if torso == "cnn":
        return "image" if is_image(space) else "board"
    return auto_torso(space)


def leaf_encoder(space: spaces.Space, torso: str = "auto", board_channels: int | None = None,
                 image_init: str = "torch", invert_frames: bool = False) -> LeafEncoder:
    """The encoder for one leaf space (see `leaf_kind`); `board_channels`: a BoardEncoder's filters;
    `image_init` and `invert_frames`: an ImageEncoder's `init` and `invert`."""
    kind = leaf_kind(space, torso)
    if kind == "image" and isinstance(space, spaces.Box):  # "image" and "board" are 3-dim Boxes
        return ImageEncoder(space, init=image_init, invert=invert_frames)
    if kind == "board" and isinstance(space, spaces.Box):
        return BoardEncoder(space, board_channels)
    if isinstance(space, spaces.Discrete):
        return OneHotEncoder([space.n], [space.start])
    if isinstance(space, spaces.MultiDiscrete):
        return OneHotEncoder(space.nvec.reshape(-1), np.asarray(space.start).reshape(-1))
    return FlatEncoder(space)


#: What `leaf_encoder` builds: each has `out_dim`, the features it gives per row.
LeafEncoder = ImageEncoder | BoardEncoder | OneHotEncoder | FlatEncoder


class Encoder(nn.Module):
    """Observation leaves (a dict from `obs_tensors`) -> one feature vector per row; with `only`, just the
    leaves under that top-level key of a Dict observation (e.g. "state" for a centralized critic)."""

    def __init__(self, layout: AgentLayout, torso: str = "auto", board_channels: int | None = None,
                 only: str | None = None, image_init: str = "torch", invert_frames: bool = False) -> None:
        super().__init__()
        self.keys = obs_keys(layout)
        leaves = leaf_spaces(layout.obs_space)
        if only is not None:  # the leaves under one top-level key (an observation with the global state beside it)
            chosen = [i for i, leaf in enumerate(layout.obs_leaves) if leaf.path[:1] == (only,)]
            self.keys, leaves = [self.keys[i] for i in chosen], [leaves[i] for i in chosen]
        if torso == "cnn" and not any(leaf_kind(space, "cnn") in ("image", "board") for space in leaves):
            from pzasync.errors import ConfigError

            raise ConfigError(f"agent {layout.agent!r}: torso='cnn' needs a 3-dim Box observation (HWC board or "
                              f"image), got {layout.obs_space!r}; use 'auto' or 'mlp'")
        encoders = [leaf_encoder(space, torso, board_channels, image_init, invert_frames) for space in leaves]
        self.leaves = nn.ModuleList(encoders)
        self.out_dim = sum(encoder.out_dim for encoder in encoders)
        #: Whether any leaf is read by an ImageEncoder (what `head_activation` asks).
        self.reads_images = any(isinstance(encoder, ImageEncoder) for encoder in encoders)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if len(self.keys) == 1:
            return self.leaves[0](obs[self.keys[0]])
        return torch.cat([enc(obs[key]) for enc, key in zip(self.leaves, self.keys)], dim=1)


#: `head_activation`'s choices: an ACTIVATIONS name, or "auto".
HEAD_ACTIVATIONS = ("auto", *ACTIVATIONS)


def head_activation(activation: str, *encoders: Encoder) -> str:
    """The activation of the MLP heads behind `encoders`: `activation` where it names one; for "auto", "relu" where
    any of the encoders reads images (as CleanRL's Atari PPO, whose ReLU convs feed ReLU layers) and "tanh"
    otherwise (as its continuous-control PPO)."""
    if activation != "auto":
        return activation
    return "relu" if any(encoder.reads_images for encoder in encoders) else "tanh"


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int | None, activation: str = "relu",
        layer_norm: bool = False) -> nn.Sequential:
    """Linear layers with `activation` ("relu" or "tanh") between them; `out_dim=None` ends on the last hidden.
    `layer_norm` normalises each hidden layer before its activation (LayerNorm, with learned scale and shift)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers.append(nn.Linear(in_dim, int(width)))
        if layer_norm:
            layers.append(nn.LayerNorm(int(width)))
        layers.append(ACTIVATIONS[activation]())
        in_dim = int(width)
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)




def masked_logits(logits: torch.Tensor, mask: Any) -> torch.Tensor:
    """Illegal actions get a very negative logit: never chosen, and no NaN even if a row has no legal action."""
    if mask is None:
        return logits
    mask = torch.as_tensor(mask, dtype=torch.bool, device=logits.device)
    return logits.masked_fill(~mask, -1e9)
