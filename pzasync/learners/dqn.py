"""Double DQN for discrete actions, with action masks respected when acting and in targets.

Exploration is epsilon-greedy over legal actions, with epsilon a function of the agent's decisions (told by
the actor through `on_actor_steps`), so how often the learner replays never changes how fast it decays.
Targets bootstrap through truncation, never through termination, and only over legal next actions.

Options beyond the basics: `n_step` returns (sampled as windows of consecutive buffer rows, followed along one
agent's trajectory: see `nstep_batch`), a `dueling` head, soft (`target_tau` < 1) or hard target updates,
the observation `torso` ("auto", "mlp", "cnn"; see networks.leaf_kind), `mirror`: left-right mirror
images of sampled transitions, for board games whose actions are the board's columns (`mirror_batch`),
`clipped_double` targets and `prioritized` replay (prioritized.py).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.config.declare import option
from pzasync.core.spaces import AgentLayout
from pzasync.errors import ConfigError, UnsupportedSpaceError
from pzasync.learners.acting import ActingModule
from pzasync.learners.base import Batch, Learner, LearnerContext, Policy, trajectory_ids
from pzasync.learners.by_hand import ManualNet
from pzasync.learners.networks import (
    ACTIVATIONS,
    BOARD_CHANNELS,
    TORSOS,
    Encoder,
    explore_uniformly,
    masked_logits,
    mlp,
    obs_tensors,
)
from pzasync.learners.options import LearnerOptions, Option
from pzasync.learners.prioritized import PrioritizedReplay
from pzasync.learners.recorded import RecordedRows, mixed_sample


def check_mirror(layout: AgentLayout) -> None:
    """`mirror` needs one board-shaped (height, width, channels) observation and one action per column."""
    leaves = layout.obs_leaves
    shape = tuple(leaves[0].shape) if len(leaves) == 1 else None
    n = getattr(layout.action_space, "n", None)
    if shape is None or len(shape) != 3 or layout.nested_obs or n != shape[1]:
        raise ConfigError(
            f"agent {layout.agent!r}: DQN option mirror=True needs a (height, width, channels) board observation "
            f"and one Discrete action per column (width actions, left to right), got observation "
            f"{layout.obs_space} and actions {layout.action_space}")


def mirror_batch(batch: Batch, rng: np.random.Generator, start: int = 0) -> Batch:
    """A random half of the sampled rows replaced by their left-right mirror images: boards flipped along the
    width axis, action column c -> width - 1 - c, masks reversed. For games that play the same mirrored
    (connect four), this doubles the positions the network sees at no extra update cost."""
    rows = np.flatnonzero(rng.random(len(batch["action"])) < 0.5)
    if not len(rows):
        return batch
    out = dict(batch)
    for key in ("obs", "next_obs"):
        boards = np.asarray(batch[key])
        flat = boards.reshape(len(boards), -1)
        mirrored = flat.copy()
        mirrored[rows] = flat[rows][:, _mirror_cells(boards.shape[1:])]  # one gather, cheaper than a flipped view
        out[key] = mirrored.reshape(boards.shape)
    width = out["obs"].shape[2]
    action = np.array(batch["action"])
    action[rows] = (width - 1) - (action[rows] - start) + start
    out["action"] = action
    for key in ("action_mask", "next_action_mask"):
        if key in batch:
            masks = np.array(batch[key])
            masks[rows] = masks[rows][:, ::-1]
            out[key] = masks
    return out


@functools.lru_cache(maxsize=8)
def _mirror_cells(shape: tuple[int, ...]) -> np.ndarray:
    """For a (height, width, channels) board flattened, the cell each cell of its mirror image comes from."""
    return np.arange(int(np.prod(shape))).reshape(shape)[:, ::-1].reshape(-1)


def nstep_window(n_step: int, tracks: int = 0) -> int:
    """Buffer rows after each sampled start row that n-step targets read.

    A single trajectory's rows follow each other, so n_step - 1 rows hold its next n_step - 1 steps. Env
    copies and a group's members interleave their trajectories (tracks), so each further step of one track may
    lie behind other tracks' rows: the window allows for twice the number of tracks per step. A trajectory
    that does not fit in it is cut short (bootstraps earlier); it is never wrong.
    """
    if n_step <= 1:
        return 0
    return (n_step - 1) * (2 * tracks if tracks > 1 else 1)


def nstep_batch(window: dict[str, np.ndarray], valid: np.ndarray, n_step: int, gamma: float,
                obs_keys: list[str], interleaved: bool) -> dict[str, np.ndarray]:
    """Reduce windows from `SharedRingBuffer.sample_windows` to one n-step transition per start row.

    From each start row, walk forward along the same trajectory: rows of other tracks (env copies, group
    members) are passed over (when `interleaved`), and the walk stops at the first row that does not continue
    it. A row continues the trajectory if the previous step was neither terminated nor truncated, the row is
    valid (untorn, not yet overwritten), belongs to the same track, and its observation equals the previous
    step's `next_obs` exactly (which catches episode boundaries and episodes cut by the actor). At most `n_step` steps
    are
    used. The result has the start row's columns, with `reward` = sum_k gamma^k r_k over the k used steps,
    `next_obs*`, `next_action_mask`, `terminated` and `truncated` from the last used step, `discount` =
    gamma^(steps used) (the bootstrap factor) and `nstep` = steps used.
    """
    size, length = valid.shape
    rows = np.arange(size)
    last = np.zeros(size, np.int64)
    used = np.ones(size, np.int64)
    reward = window["reward"].astype(np.float64)
    ended = window["terminated"] | window["truncated"]
    returns = reward[:, 0].copy()
    done = ended[:, 0].copy()
    track = trajectory_ids(window) if interleaved else None
    for j in range(1, length):
        active = ~done & (used < n_step)
        if not active.any():
            break
        ok = valid[:, j]
        if track is not None:
            same = track[:, j] == track[:, 0]
            skip = ok & ~same
        else:
            same, skip = np.ones(size, bool), np.zeros(size, bool)
        follows = active & ok & same
        for key in obs_keys:
            now, before = window[key][:, j], window["next_" + key][rows, last]
            follows &= (now == before).reshape(size, -1).all(axis=1)
        done |= active & ~skip & ~follows
        returns[follows] += gamma ** used[follows] * reward[follows, j]
        last[follows] = j
        used[follows] += 1
        done |= follows & ended[:, j]
    out = {name: np.ascontiguousarray(values[:, 0]) for name, values in window.items()}
    for name in window:
        if name.startswith("next_") or name in ("terminated", "truncated"):
            out[name] = window[name][rows, last]
    out["reward"] = returns.astype(np.float32)
    out["discount"] = (float(gamma) ** used).astype(np.float32)
    out["nstep"] = used
    return out


class QNetwork(Policy):
    """Q-values from observations; acts epsilon-greedily over legal actions."""

    def __init__(self, layout: AgentLayout, config: DQNOptions) -> None:
        super().__init__()
        self.layout = layout
        space = layout.action_space
        if not isinstance(space, spaces.Discrete):
            raise UnsupportedSpaceError(f"agent {layout.agent!r}: a Q-network needs a Discrete action space, got "
                                        f"{space!r}")
        self.start = int(space.start)
        #: Whether `q_values` may take `ManualNet`'s path (DQNOptions.by_hand).
        self.by_hand = config.by_hand
        if config.mirror:
            check_mirror(layout)
        self.encoder = Encoder(layout, config.torso, config.board_channels)
        #: Actions (the Discrete space's n).
        self.n_actions = n = int(space.n)
        if config.dueling:
            self.head: nn.Module = DuelingHead(self.encoder.out_dim, config.hidden, n, config.activation,
                                               config.layer_norm)
        else:
            self.head = mlp(self.encoder.out_dim, config.hidden, n, config.activation, config.layer_norm)
        # Plain attributes, not state: the policy slot must not carry (and overwrite) them.
        self.eps_start, self.eps_end, self.eps_steps = config.epsilon_start, config.epsilon_end, \
            config.epsilon_decay_steps
        self.agent_steps = 0
        self.rng = np.random.default_rng(torch.initial_seed())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.encoder(obs))

    def seed(self, seed: int) -> None:
        """Seed the exploration draws (the only randomness in acting)."""
        self.rng = np.random.default_rng(seed)

    def on_actor_steps(self, agent_steps: int) -> None:
        self.agent_steps = agent_steps

    @property
    def epsilon(self) -> float:
        """Linear from `epsilon_start` to `epsilon_end` over `epsilon_decay_steps` agent steps, then flat."""
        fraction = min(1.0, self.agent_steps / max(1, self.eps_steps))
        return self.eps_start + fraction * (self.eps_end - self.eps_start)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        with torch.inference_mode():
            q = self.q_values(obs)
            actions = masked_logits(q, mask).argmax(dim=1).cpu().numpy()
        if explore:
            actions = explore_uniformly(actions, self.epsilon, mask, q.shape[1], self.rng)
        return actions + self.start, {}

    def q_values(self, obs: dict[str, np.ndarray]) -> torch.Tensor:
        """The Q-values of a batch of observations (under inference mode): by hand (`ManualNet`: the same values,
        tests/test_by_hand.py compares them, at half the modules' cost on an actor's batch of a few rows) where
        the network is one it computes, float32 on the CPU; else through the modules, on the parameters' device
        (the actor's copy may live on a GPU: RunConfig.actor_device)."""
        by_hand = self._acting_by_hand()
        if by_hand is not None:
            q, _ = by_hand.forward(by_hand.inputs([obs[self.encoder.keys[0]]]))
            return q
        return self(obs_tensors(obs, self.layout, device=self.parameter_device()))

    def _acting_by_hand(self) -> ManualNet | None:
        """The `ManualNet` `q_values` uses, made at the first call, and made again whenever the parameters it reads
        are no longer this network's own (a `load_state_dict(..., assign=True)`, a copy) or no longer float32 on
        the CPU (`.to()`, `.double()`): it holds no values of its own, only the parameters and its work tensors."""
        if not self.by_hand or type(self).forward is not QNetwork.forward:
            return None
        net = self.__dict__.get("_by_hand")
        first = net.linears[0].weight if net is not None else None
        if net is not None and net.weights[0][0] is first and first.dtype == torch.float32 \
                and first.device.type == "cpu":
            return net
        # Acting batches come in every size up to the env copies answered at once.
        net = ManualNet(self.encoder, self.head, row_counts=32) if ManualNet.supports(self.encoder, self.head) \
            else None
        self.__dict__["_by_hand"] = net
        return net

    def acting_module(self) -> ActingModule:
        """Greedy: the argmax of the masked Q-values (through the modules, not by hand); sampled: epsilon-greedy
        over the legal actions at the final exploration rate, `epsilon_end`."""
        return ActingModule(self.layout, self.encoder, self.head, "q", epsilon=self.eps_end)

    def act_seeded(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, seeds: Sequence[int],
                   memory: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """`Policy.act_seeded` with one forward: each row explores with its own generator seeded `seeds[i]`."""
        greedy, _ = self.act(obs, mask, False)
        actions = greedy - self.start
        n = self.n_actions
        for i, row_seed in enumerate(seeds):
            row_mask = None if mask is None else mask[i:i + 1]
            actions[i:i + 1] = explore_uniformly(actions[i:i + 1], self.epsilon, row_mask, n,
                                                 np.random.default_rng(int(row_seed)))
        return actions + self.start, None


class DuelingHead(nn.Module):
    """Q = V(s) + A(s, a) - mean over all actions of A(s, .), from one MLP trunk (masks apply when choosing)."""

    def __init__(self, in_dim: int, hidden: list[int], n_actions: int, activation: str,
                 layer_norm: bool = False) -> None:
        super().__init__()
        self.trunk = mlp(in_dim, hidden, None, activation, layer_norm)
        width = int(hidden[-1]) if len(hidden) else in_dim
        self.value = nn.Linear(width, 1)
        self.advantage = nn.Linear(width, n_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.trunk(x)
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


@dataclass(kw_only=True, eq=False)
class DQNOptions(LearnerOptions):
    """DQN's options (docs/learners.md, "DQN")."""

    lr: float = option(5e-4, "Adam's learning rate.", Option(float, gt=0))
    gamma: float = option(0.99, "Discount per agent step.", Option(float, ge=0, le=1))
    batch_size: int = option(64, "Rows per update.", Option(int, ge=1))
    learning_starts: int = option(1000, "Transitions in the buffer before the first update.", Option(int, ge=0))
    target_update_interval: int = option(250, "Updates between hard copies of the online network into the "
                                              "target (with target_tau 1.0).", Option(int, ge=1))
    epsilon_start: float = option(1.0, "Exploration rate at the first decision.", Option(float, ge=0, le=1))
    epsilon_end: float = option(0.05, "Exploration rate after epsilon_decay_steps decisions.",
                                Option(float, ge=0, le=1))
    epsilon_decay_steps: int = option(20_000, "Agent decisions over which epsilon falls linearly.",
                                      Option(int, ge=0))
    max_grad_norm: float = option(10.0, "Gradients are clipped to this norm.", Option(float, gt=0))
    hidden: list[int] = option([128, 128], "Widths of the head's hidden layers.",
                               Option(list, item=Option(int, ge=1)))
    activation: str = option("relu", "Activation between hidden layers.", Option(str, choices=tuple(ACTIVATIONS)))
    double: bool = option(True, "Double DQN: the online network chooses the next action, the target values it.",
                          Option(bool))
    n_step: int = option(1, "Rewards summed per target along one agent's trajectory (1: one-step targets).",
                         Option(int, ge=1))
    dueling: bool = option(False, "A dueling head: Q = V + A - mean(A).", Option(bool))
    target_tau: float = option(1.0, "1.0: hard target copies every target_update_interval updates; below 1: "
                                    "Polyak averaging after every update.", Option(float, gt=0, le=1))
    torso: str = option("auto", "How 3-dim Box observations are encoded: 'auto', 'mlp' or 'cnn' "
                                "(networks.leaf_kind).", Option(str, choices=TORSOS))
    mirror: bool = option(False, "Train on left-right mirror images of half of each batch (board games played "
                                 "by column, such as connect four).", Option(bool))
    clipped_double: bool = option(False, "Bootstrap from the lower of the target's and the online network's "
                                         "value of the chosen next action.", Option(bool))
    prioritized: bool = option(False, "Replay rows in proportion to their last TD error (one-step targets "
                                      "only).", Option(bool))
    layer_norm: bool = option(False, "LayerNorm before each hidden activation.", Option(bool))
    board_channels: int = option(BOARD_CHANNELS, "Filters of the board convolution, where the torso has one.",
                                 Option(int, ge=1))
    by_hand: bool = option(True, "On the CPU, compute the default network's forward and backward by hand "
                                 "(learners/by_hand.py: the same values, faster); False: through the modules and "
                                 "autograd.", Option(bool))
    fused_adam: bool = option(False, "Adam's fused step on the CPU or a GPU (torch.optim.Adam(fused=True): the same "
                                     "step to float rounding, often faster); False: torch's loop over the parameters.",
                              Option(bool))

    def check_together(self, agent: str, learner: str) -> None:
        if self.prioritized and self.n_step != 1:
            raise ConfigError(f"agent {agent!r}: {learner} option prioritized=True works with one-step targets "
                              f"only (n_step=1), got n_step={self.n_step!r}")


class DQNLearner(Learner):
    """Double DQN with a target network (hard or soft updates), optional n-step returns and dueling head,
    the Huber loss and gradient clipping."""

    on_policy = False
    Options = DQNOptions
    config: DQNOptions

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        torch.manual_seed(ctx.seed)
        self.device = torch.device(ctx.device)
        self.q = self.build_policy(ctx.layout, self.config).to(self.device)
        self.target = copy.deepcopy(self.q)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=self.config.lr,
                                          fused=self.config.fused_adam and self.device.type in ("cpu", "cuda"))
        self.updates = 0
        #: The online and target networks by hand (learners/by_hand.py), where `update` takes its fast path.
        self.by_hand = self._by_hand_nets()
        #: Buffer rows read after each sampled row for n-step returns (0 when n_step is 1).
        self.window = nstep_window(self.config.n_step, ctx.tracks)
        #: With `prioritized`: the rows' priorities (built at the first sample, when the buffer is known).
        self.replay: PrioritizedReplay | None = None
        #: Recorded transitions (RunConfig.dataset), sampled beside the buffer's rows.
        self.recorded: RecordedRows | None = None

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        if not isinstance(layout.action_space, spaces.Discrete):
            raise UnsupportedSpaceError(
                f"agent {layout.agent!r}: DQN needs a Discrete action space, got {layout.action_space!r}; "
                f"use 'ppo' for continuous (Box) actions"
            )

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> QNetwork:
        return QNetwork(layout, cls.checked(layout.agent, config))

    @classmethod
    def dataset_refusal(cls, config: Mapping[str, Any]) -> str | None:
        """Recorded transitions are sampled as one-step rows beside the buffer's: not with n-step windows or
        prioritized replay, which read the buffer's own rows."""
        options = cls.checked("?", config)
        if options.n_step != 1:
            return f"DQN option n_step={options.n_step} reads windows of the buffer's rows; recorded transitions " \
                   f"are sampled with n_step=1 only"
        if options.prioritized:
            return "DQN option prioritized=True keeps priorities of the buffer's rows only; recorded transitions " \
                   "are sampled with prioritized=False"
        return None

    def load_dataset(self, batch: Batch) -> None:
        """Keep recorded transitions; each batch then draws from them and the buffer uniformly (`mixed_sample`)."""
        self.recorded = RecordedRows(self.ctx.agent, batch, self.q.start)
        self.dataset_rows = self.recorded.rows

    @property
    def policy(self) -> QNetwork:
        return self.q

    def sample(self, buffer: Any, rng: np.random.Generator) -> Batch:
        """One-step rows (`buffer.sample`, or drawn by priority with `prioritized`) or, with n_step > 1,
        n-step transitions from windows of rows; with `mirror`, half of them mirrored."""
        config = self.config
        if config.prioritized:
            batch = self._sample_prioritized(buffer, rng)
        elif config.n_step == 1:
            recorded = self.recorded
            batch = (buffer.sample(self.batch_size, rng) if recorded is None
                     else mixed_sample(buffer, recorded, self.batch_size, rng))
        else:
            window, valid = buffer.sample_windows(self.batch_size, min(self.window, buffer.capacity - 1), rng)
            keys = [name for name in window if name == "obs" or name.startswith("obs/")]
            batch = nstep_batch(window, valid, config.n_step, config.gamma, keys, self.ctx.tracks > 1)
        return mirror_batch(batch, rng, self.q.start) if config.mirror else batch

    def _sample_prioritized(self, buffer: Any, rng: np.random.Generator) -> Batch:
        if not hasattr(buffer, "gather_logical"):
            raise ConfigError(f"agent {self.ctx.agent!r}: DQN option prioritized=True needs the learner to read one "
                              f"buffer (one actor, shared memory); this learner reads a {type(buffer).__name__}")
        if self.replay is None:
            self.replay = PrioritizedReplay(buffer)
        return self.replay.sample(self.batch_size, rng)

    def compute_targets(self, batch: Batch) -> torch.Tensor:
        """r + gamma * Q_target(s', argmax over legal a' of Q_online(s', a')), with no bootstrap after a
        termination or from a next state without legal actions (truncation does bootstrap)."""
        next_obs = obs_tensors(batch, self.ctx.layout, "next_obs", self.device)
        with torch.no_grad():
            target_q = self.target(next_obs)
            chooser = self.q(next_obs) if self.config.double else target_q
            return self._bootstrap(target_q, chooser, batch)

    def _bootstrap(self, target_q: torch.Tensor, chooser: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The targets from the target network's and the chooser's (online, or target without `double`)
        Q-values of the next observations (`compute_targets`)."""
        dev = self.device
        next_mask = batch.get("next_action_mask")
        with torch.no_grad():
            legal = None if next_mask is None else torch.as_tensor(next_mask, dtype=torch.bool, device=dev)
            best = (chooser if legal is None else chooser.masked_fill(~legal, -1e9)).argmax(dim=1, keepdim=True)
            next_q = target_q.gather(1, best).squeeze(1)
            if self.config.clipped_double:  # the lower of the two networks' values of that action
                next_q = torch.minimum(next_q, chooser.gather(1, best).squeeze(1))
            # No bootstrap after a termination, nor from a next state without legal actions.
            stop = torch.as_tensor(batch["terminated"], dtype=torch.bool, device=dev)
            next_q = next_q.masked_fill(stop if legal is None else stop | ~legal.any(dim=1), 0.0)
            reward = torch.as_tensor(batch["reward"], device=dev, dtype=torch.float32)
            if "discount" in batch:  # n-step transitions (`nstep_batch`): gamma ** steps used, per row
                return reward + torch.as_tensor(batch["discount"], device=dev, dtype=torch.float32) * next_q
            return reward + self.config.gamma * next_q

    def _action_index(self, batch: Batch) -> torch.Tensor:
        index = torch.as_tensor(batch["action"], device=self.device, dtype=torch.int64).reshape(-1, 1)
        return index - self.q.start if self.q.start else index

    def update(self, batch: Batch) -> dict[str, float]:
        """One gradient step on `batch`: through autograd, or where `by_hand` is set by hand (the same targets,
        Huber loss, clipping and Adam step; tests/test_by_hand.py compares the two)."""
        if self.by_hand is not None and len(batch["action"]):
            with torch.no_grad():  # nothing here is recorded for autograd: the gradients are written by hand
                return self._update_by_hand(batch)
        target = self.compute_targets(batch)
        index = self._action_index(batch)
        q = self.q(obs_tensors(batch, self.ctx.layout, "obs", self.device)).gather(1, index).squeeze(1)
        if "weight" in batch:  # prioritized replay: importance-sampling weights per row
            weight = torch.as_tensor(batch["weight"], device=self.device)
            loss = (weight * nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        else:
            loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.q.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        self.update_target()
        if self.replay is not None and "logical" in batch:
            self.replay.update(batch["logical"], (target - q.detach()).cpu().numpy())
        return self._metrics(batch, loss=loss.detach(), q_mean=q.detach().mean(), target_mean=target.mean(),
                             grad_norm=grad_norm)

    def _by_hand_nets(self) -> tuple[ManualNet, ManualNet] | None:
        """The online and target networks by hand, where `update` may use them: on the CPU, for a network
        `ManualNet.supports`, unless `by_hand` is off or a subclass changed how the network or the targets are
        computed."""
        if (not self.config.by_hand or self.device.type != "cpu" or type(self.q).forward is not QNetwork.forward
                or type(self).compute_targets is not DQNLearner.compute_targets
                or type(self)._bootstrap is not DQNLearner._bootstrap
                or not ManualNet.supports(self.q.encoder, self.q.head)):
            return None
        for p in self.q.parameters():
            p.grad = torch.zeros_like(p)  # `ManualNet.backward` writes into them
        return ManualNet(self.q.encoder, self.q.head), ManualNet(self.target.encoder, self.target.head)

    def _update_by_hand(self, batch: Batch) -> dict[str, float]:
        """`update` with `ManualNet`s. One forward of the online network over the observations and the next
        observations together (with `double`) gives both the Q-values trained on and the chooser of the targets
        (`_bootstrap`, as in `compute_targets`); the backward runs over the first half only, from the gradient
        of the mean Huber loss (smooth L1, beta 1) with respect to the chosen Q-values, clamp(q - target, -1, 1)
        / rows (times each row's weight with `prioritized`): autograd's own arithmetic."""
        online, target_net = self.by_hand  # type: ignore[misc]
        n, key = len(batch["action"]), self.q.encoder.keys[0]
        double = self.config.double
        x = online.inputs([batch[key], batch["next_" + key]])
        q_rows, saved = online.forward(x if double else x[:n], keep=n)
        target_q, _ = target_net.forward(x[n:])
        target = self._bootstrap(target_q, q_rows[n:] if double else target_q, batch)
        index = self._action_index(batch)
        q = q_rows[:n].gather(1, index).squeeze(1)
        error = q - target
        slope = error.clamp(-1.0, 1.0) / n
        size = error.abs()
        losses = torch.where(size < 1.0, 0.5 * size * size, size - 0.5)
        if "weight" in batch:  # prioritized replay: importance-sampling weights per row
            weight = torch.as_tensor(batch["weight"], dtype=torch.float32)
            losses, slope = weight * losses, slope * weight
        grad_q = torch.zeros(n, q_rows.shape[1]).scatter_(1, index, slope.unsqueeze(1))
        online.backward(saved, grad_q)
        grad_norm = nn.utils.clip_grad_norm_(self.q.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        self.update_target()
        if self.replay is not None and "logical" in batch:
            self.replay.update(batch["logical"], (target - q).numpy())
        return self._metrics(batch, loss=losses.mean(), q_mean=q.mean(), target_mean=target.mean(),
                             grad_norm=grad_norm)

    @staticmethod
    def _metrics(batch: Batch, **values: Any) -> dict[str, float]:
        """An update's metrics as floats (loss, q_mean, target_mean, grad_norm; tensors or numpy values), and
        the mean steps used with n-step targets."""
        metrics = {key: float(value) for key, value in values.items()}
        if "nstep" in batch:
            metrics["nstep_mean"] = float(np.mean(batch["nstep"]))
        return metrics

    def update_target(self) -> None:
        """After each update: Polyak averaging (target += tau * (online - target)) when target_tau < 1, else a
        hard copy every `target_update_interval` updates."""
        tau = self.config.target_tau
        if tau < 1.0:
            with torch.no_grad():
                for target, online in zip(self.target.parameters(), self.q.parameters()):
                    target.lerp_(online, tau)
        elif self.updates % self.config.target_update_interval == 0:
            self.target.load_state_dict(self.q.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.q.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["policy"])
        self.target.load_state_dict(state.get("target", state["policy"]))
        if "optimizer" in state:
            # A copy: Adam would otherwise share moment tensors with the state it was given.
            self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.updates = state.get("updates", 0)
