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
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.errors import UnsupportedSpaceError
from pzasync.core.spaces import AgentLayout
from pzasync.learners.adam_step import FusedAdamStep
from pzasync.learners.base import Batch, Learner, LearnerContext, Option, Policy, trajectory_ids
from pzasync.learners.networks import (ACTIVATIONS, BOARD_CHANNELS, TORSOS, Encoder, ManualNet, adam,
                                       explore_uniformly, masked_logits, mlp, obs_keys, obs_tensors)
from pzasync.learners.prioritized import PrioritizedReplay


def check_options(agent: str, config: dict[str, Any]) -> None:
    """Refuse bad values of the n-step, dueling, target and torso options where they are used (a config that
    did not go through `validate_config`, such as an old checkpoint's, may lack them: defaults apply)."""
    from pzasync.errors import ConfigError
    from pzasync.learners.networks import BOARD_CHANNELS, TORSOS

    def bad(key: str, why: str) -> None:
        raise ConfigError(f"agent {agent!r}: DQN option {key!r} {why}, got {config.get(key)!r}")

    n = config.get("n_step", 1)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        bad("n_step", "must be an integer >= 1")
    if not isinstance(config.get("dueling", False), (bool, np.bool_)):
        bad("dueling", "must be True or False")
    tau = config.get("target_tau", 1.0)
    if isinstance(tau, (bool, np.bool_)) or not isinstance(tau, (int, float, np.integer, np.floating)) \
            or not 0.0 < tau <= 1.0:
        bad("target_tau", "must be a number in (0, 1]")
    if config.get("torso", "auto") not in TORSOS:
        bad("torso", f"must be one of {list(TORSOS)}")
    channels = config.get("board_channels", BOARD_CHANNELS)
    if isinstance(channels, (bool, np.bool_)) or not isinstance(channels, (int, np.integer)) or channels < 1:
        bad("board_channels", "must be an integer >= 1")
    for key in ("mirror", "clipped_double", "prioritized", "layer_norm"):
        if not isinstance(config.get(key, False), (bool, np.bool_)):
            bad(key, "must be True or False")
    if config.get("prioritized", False) and n != 1:
        bad("prioritized", "works with one-step targets only (n_step=1)")


def check_mirror(layout: AgentLayout) -> None:
    """`mirror` needs one board-shaped (height, width, channels) observation and one action per column."""
    from pzasync.errors import ConfigError

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
    step's `next_obs` exactly (which catches episode boundaries and episodes cut by the actor). At most `n_step` steps are
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

    #: The forward by hand `act` uses (`_acting_net`), with its work tensors: a copy makes its own.
    derived_caches = (*Policy.derived_caches, "_pzasync_acting")

    def __init__(self, layout: AgentLayout, config: dict[str, Any]) -> None:
        super().__init__()
        self.layout = layout
        self.start = int(layout.action_space.start)
        check_options(layout.agent, config)
        if config.get("mirror", False):
            check_mirror(layout)
        # A config without `board_channels` (an old checkpoint's) was saved with BOARD_CHANNELS filters.
        self.encoder = Encoder(layout, config.get("torso", "auto"), int(config.get("board_channels", BOARD_CHANNELS)))
        n, hidden, activation = int(layout.action_space.n), config["hidden"], config["activation"]
        norm = bool(config.get("layer_norm", False))
        if config.get("dueling", False):
            self.head: nn.Module = DuelingHead(self.encoder.out_dim, hidden, n, activation, norm)
        else:
            self.head = mlp(self.encoder.out_dim, hidden, n, activation, norm)
        # Plain attributes, not state: the policy slot must not carry (and overwrite) them.
        self.eps_start, self.eps_end = float(config["epsilon_start"]), float(config["epsilon_end"])
        self.eps_steps = int(config["epsilon_decay_steps"])
        self.agent_steps = 0
        self.rng = np.random.default_rng(torch.initial_seed())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.encoder(obs))

    def seed(self, seed: int) -> None:
        """Seed the exploration draws (the only randomness in acting)."""
        self.rng = np.random.default_rng(seed)

    def on_actor_steps(self, agent_steps: int) -> None:
        # Straight into __dict__: nn.Module.__setattr__ costs microseconds, and this runs at every decision.
        self.__dict__["agent_steps"] = agent_steps

    @property
    def epsilon(self) -> float:
        """Linear from `epsilon_start` to `epsilon_end` over `epsilon_decay_steps` agent steps, then flat."""
        fraction = min(1.0, self.agent_steps / max(1, self.eps_steps))
        return self.eps_start + fraction * (self.eps_end - self.eps_start)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        with torch.inference_mode():
            # The actor's copy may live on a GPU (RunConfig.actor_device).
            device = self.parameter_device()
            acting = self._acting_net() if device.type == "cpu" else None
            if acting is not None:
                net, key = acting
                q, _ = net.forward(net.inputs([obs[key]]))
            else:
                q = self(obs_tensors(obs, self.layout, device=device))
            if device.type == "cpu":  # numpy's masked argmax costs a third of torch's on a small batch
                values = q.numpy()
                actions = (values if mask is None else np.where(mask, values, -np.inf)).argmax(axis=1)
            else:
                actions = masked_logits(q, mask).argmax(dim=1).cpu().numpy()
        if explore:
            actions = explore_uniformly(actions, self.epsilon, mask, q.shape[1], self.rng)
        return actions + self.start if self.start else actions, {}

    def _acting_net(self) -> tuple[ManualNet, str] | None:
        """This network's forward by hand (`networks.ManualNet`) and its observation key, where `act` may use it
        (a float32 network on the CPU that `ManualNet.supports`, `forward` not overridden): the same Q-values
        (a test compares them) at about two thirds of the modules' cost on a batch of one, most of which is
        their per-call overhead. Made at the first `act` (one of `derived_caches`); loading a state or a policy
        vector copies into the parameters it reads."""
        acting = self.__dict__.get("_pzasync_acting")
        if acting is None:
            supported = type(self).forward is QNetwork.forward and ManualNet.supports(self.encoder, self.head)
            # Acting batches come in every size up to the env copies answered at once.
            acting = (ManualNet(self.encoder, self.head, row_counts=32), self.encoder.keys[0]) if supported else False
            self.__dict__["_pzasync_acting"] = acting
        return acting or None

    def act_seeded(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, seeds: Sequence[int],
                   memory: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """`Policy.act_seeded` with one forward: each row explores with its own generator seeded `seeds[i]`."""
        greedy, _ = self.act(obs, mask, False)
        actions = greedy - self.start if self.start else greedy
        n = int(self.layout.action_space.n)
        for i, row_seed in enumerate(seeds):
            row_mask = None if mask is None else mask[i:i + 1]
            actions[i:i + 1] = explore_uniformly(actions[i:i + 1], self.epsilon, row_mask, n,
                                                 np.random.default_rng(int(row_seed)))
        return actions + self.start if self.start else actions, None


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


class DQNLearner(Learner):
    """Double DQN with a target network (hard or soft updates), optional n-step returns and dueling head,
    the Huber loss and gradient clipping."""

    on_policy = False
    extras: dict[str, str] = {}
    defaults = {
        "lr": 5e-4, "gamma": 0.99, "batch_size": 64, "learning_starts": 1000, "target_update_interval": 250,
        "epsilon_start": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 20_000, "max_grad_norm": 10.0,
        "hidden": [128, 128], "activation": "relu", "double": True,
        # n-step returns (1: one-step targets); dueling head; target_tau 1.0: hard copy every
        # target_update_interval updates, < 1: Polyak averaging after every update; observation torso.
        "n_step": 1, "dueling": False, "target_tau": 1.0, "torso": "auto",
        # Train on left-right mirror images of half of each batch (board games played by column).
        "mirror": False,
        # Bootstrap from min(target, online) value of the chosen next action (against overestimation).
        "clipped_double": False,
        # Replay rows in proportion to their last TD error (learners/prioritized.py); one-step targets only.
        "prioritized": False,
        # LayerNorm before each hidden activation (keeps values from running away at high replay ratios).
        "layer_norm": False,
        # Filters of the board convolution (networks.BoardEncoder), where the torso has one.
        "board_channels": BOARD_CHANNELS,
    }

    #: Checked by `Learner.validate_config` (with the base's batch_size >= 1 and learning_starts >= 0).
    schema = {
        "lr": Option(float, gt=0), "gamma": Option(float, ge=0, le=1),
        "target_update_interval": Option(int, ge=1), "epsilon_start": Option(float, ge=0, le=1),
        "epsilon_end": Option(float, ge=0, le=1), "epsilon_decay_steps": Option(int, ge=0),
        "max_grad_norm": Option(float, gt=0), "hidden": Option(list, item=Option(int, ge=1)),
        "activation": Option(str, choices=tuple(ACTIVATIONS)), "double": Option(bool),
        "n_step": Option(int, ge=1), "dueling": Option(bool), "target_tau": Option(float, gt=0, le=1),
        "torso": Option(str, choices=TORSOS), "mirror": Option(bool), "clipped_double": Option(bool),
        "prioritized": Option(bool), "layer_norm": Option(bool), "board_channels": Option(int, ge=1),
    }

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        torch.manual_seed(ctx.seed)
        self.device = torch.device(ctx.device)
        self.q = self.build_policy(ctx.layout, self.config).to(self.device)
        self.target = copy.deepcopy(self.q)
        self.target.requires_grad_(False)
        self.optimizer = adam(self.q.parameters(), float(self.config["lr"]))
        self.updates = 0
        self.n_step = int(self.config["n_step"])
        self.tau = float(self.config["target_tau"])
        #: Buffer rows read after each sampled row for n-step returns (0 when n_step is 1).
        self.window = nstep_window(self.n_step, ctx.tracks)
        #: With `prioritized`: the rows' priorities (built at the first sample, when the buffer is known).
        self.replay: PrioritizedReplay | None = None
        #: The online and target networks' forward and backward by hand (`networks.ManualNet`), where the
        #: network is one it computes and the learner runs on the CPU; None: autograd (see `_update_by_hand`).
        self.manual = self._manual_nets()
        self._params = list(self.q.parameters())
        self._adam_step = FusedAdamStep(self.optimizer)
        self._obs_key, self._next_obs_key = obs_keys(ctx.layout)[0], obs_keys(ctx.layout, "next_obs")[0]
        self._flat_grad: torch.Tensor | None = None
        self._grad_views: list[torch.Tensor] = []

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        if not isinstance(layout.action_space, spaces.Discrete):
            raise UnsupportedSpaceError(
                f"agent {layout.agent!r}: DQN needs a Discrete action space, got {layout.action_space!r}; "
                f"use 'ppo' for continuous (Box) actions"
            )

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> QNetwork:
        return QNetwork(layout, config)

    @property
    def policy(self) -> QNetwork:
        return self.q

    def sample(self, buffer: Any, rng: np.random.Generator) -> Batch:
        """One-step rows (`buffer.sample`, or drawn by priority with `prioritized`) or, with n_step > 1,
        n-step transitions from windows of rows; with `mirror`, half of them mirrored."""
        if self.config["prioritized"]:
            batch = self._sample_prioritized(buffer, rng)
        elif self.n_step == 1:
            batch = buffer.sample(self.batch_size, rng)
        else:
            window, valid = buffer.sample_windows(self.batch_size, min(self.window, buffer.capacity - 1), rng)
            keys = [name for name in window if name == "obs" or name.startswith("obs/")]
            batch = nstep_batch(window, valid, self.n_step, float(self.config["gamma"]), keys, self.ctx.tracks > 1)
        return mirror_batch(batch, rng, self.q.start) if self.config["mirror"] else batch

    def _sample_prioritized(self, buffer: Any, rng: np.random.Generator) -> Batch:
        if not hasattr(buffer, "gather_logical"):
            from pzasync.errors import ConfigError

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
            chooser = self.q(next_obs) if self.config["double"] else target_q
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
            if self.config["clipped_double"]:  # the lower of the two networks' values of that action
                next_q = torch.minimum(next_q, chooser.gather(1, best).squeeze(1))
            # No bootstrap after a termination, nor from a next state without legal actions.
            stop = torch.as_tensor(batch["terminated"], dtype=torch.bool, device=dev)
            next_q = next_q.masked_fill(stop if legal is None else stop | ~legal.any(dim=1), 0.0)
            reward = torch.as_tensor(batch["reward"], device=dev, dtype=torch.float32)
            if "discount" in batch:  # n-step transitions (`nstep_batch`): gamma ** steps used, per row
                return reward + torch.as_tensor(batch["discount"], device=dev, dtype=torch.float32) * next_q
            return reward + float(self.config["gamma"]) * next_q

    def _action_index(self, batch: Batch) -> torch.Tensor:
        index = torch.as_tensor(batch["action"], device=self.device, dtype=torch.int64).reshape(-1, 1)
        return index - self.q.start if self.q.start else index

    def update(self, batch: Batch) -> dict[str, float]:
        if self.manual is not None and len(batch["action"]):
            with torch.no_grad():
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
        grad_norm = nn.utils.clip_grad_norm_(self.q.parameters(), float(self.config["max_grad_norm"]))
        self.optimizer.step()
        self.updates += 1
        self.update_target()
        if self.replay is not None and "logical" in batch:
            self.replay.update(batch["logical"], (target - q.detach()).cpu().numpy())
        return self._metrics(batch, loss=loss.detach(), q_mean=q.detach().mean(), target_mean=target.mean(),
                             grad_norm=grad_norm)

    @staticmethod
    def _metrics(batch: Batch, **values: Any) -> dict[str, float]:
        """An update's metrics as floats (loss, q_mean, target_mean, grad_norm; tensors or numpy values), and
        the mean steps used with n-step targets."""
        metrics = {key: float(value) for key, value in values.items()}
        if "nstep" in batch:
            metrics["nstep_mean"] = float(np.mean(batch["nstep"]))
        return metrics

    def _manual_nets(self) -> tuple[ManualNet, ManualNet] | None:
        """ManualNets of the online and the target network, where `update` may use them: on the CPU, for a
        network `ManualNet.supports`, and unless a subclass changed how the network or the targets are computed."""
        if (self.device.type != "cpu" or type(self.q).forward is not QNetwork.forward
                or type(self).compute_targets is not DQNLearner.compute_targets
                or type(self)._bootstrap is not DQNLearner._bootstrap
                or not ManualNet.supports(self.q.encoder, self.q.head)):
            return None
        return ManualNet(self.q.encoder, self.q.head), ManualNet(self.target.encoder, self.target.head)

    def _grad_buffer(self) -> torch.Tensor:
        """One flat gradient tensor of which every parameter's `.grad` is a view (made again if something
        replaced them), so clipping is one norm and one multiplication."""
        params, views = self._params, self._grad_views
        if self._flat_grad is None or any(p.grad is not v for p, v in zip(params, views)):
            flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32)
            views, offset = [], 0
            for p in params:
                views.append(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            for p, view in zip(params, views):
                p.grad = view
            self._flat_grad, self._grad_views = flat, views
        return self._flat_grad

    def _update_by_hand(self, batch: Batch) -> dict[str, float]:
        """`update` with `ManualNet`s: the same targets, Huber loss, clipping and Adam step, without autograd.

        One forward of the online network over the observations and the next observations together (with
        `double`) gives both the Q-values trained on and the chooser of the targets; the backward runs over the
        first half only. The targets and the loss's gradient with respect to the network's outputs are
        computed in numpy on those outputs (`_targets_numpy`): on a batch of a few dozen rows, torch's
        per-op overhead is most of their cost. The gradient of the mean Huber loss (smooth L1, beta 1) with
        respect to the chosen Q-value is clamp(q - target, -1, 1) / rows (times the row's weight with
        `prioritized`), autograd's own arithmetic. Adam steps through `FusedAdamStep` (the same step)."""
        online, target_net = self.manual
        n = len(batch["action"])
        config = self.config
        double = bool(config["double"])
        x = online.inputs([batch[self._obs_key], batch[self._next_obs_key]])
        q_rows, saved = online.forward(x if double else x[:n], keep=n)
        target_q, _ = target_net.forward(x[n:])
        values, target_values = q_rows.numpy(), target_q.numpy()
        target = self._targets_numpy(target_values, values[n:] if double else target_values, batch)
        rows = np.arange(n)
        index = np.asarray(batch["action"], dtype=np.int64).reshape(-1)
        if self.q.start:
            index = index - self.q.start
        q = values[rows, index]
        error = q - target
        slope = np.clip(error, -1.0, 1.0) * (1.0 / n)
        size = np.abs(error)
        losses = np.where(size < 1.0, 0.5 * size * size, size - 0.5)
        if "weight" in batch:  # prioritized replay: importance-sampling weights per row
            weight = np.asarray(batch["weight"], dtype=np.float32)
            losses, slope = weight * losses, slope * weight
        grad_q = np.zeros((n, values.shape[1]), dtype=np.float32)
        grad_q[rows, index] = slope
        grads = self._grad_buffer()
        online.backward(saved, torch.from_numpy(grad_q))
        grad_norm = torch.linalg.vector_norm(grads)
        norm, max_norm = grad_norm.item(), float(config["max_grad_norm"])
        if norm > 0.999 * max_norm:
            # nn.utils.clip_grad_norm_'s arithmetic, on the one flat gradient (well inside the bound its
            # product with 1.0 changes nothing and is skipped).
            scale = (max_norm / (grad_norm + 1e-6)).clamp_(max=1.0)
            if scale.item() < 1.0:
                grads.mul_(scale)
        self._adam_step()
        self.updates += 1
        self.update_target()
        if self.replay is not None and "logical" in batch:
            self.replay.update(batch["logical"], target - q)
        # Sums over n: np.mean's arithmetic without its Python overhead.
        return self._metrics(batch, loss=losses.sum() / n, q_mean=q.sum() / n, target_mean=target.sum() / n,
                             grad_norm=norm)

    def _targets_numpy(self, target_q: np.ndarray, chooser: np.ndarray, batch: Batch) -> np.ndarray:
        """`_bootstrap` in numpy, for `_update_by_hand`: the same float32 arithmetic, row by row (keep the two
        alike; tests/test_learner_manual.py compares the updates they lead to)."""
        rows = np.arange(len(target_q))
        next_mask = batch.get("next_action_mask")
        legal = None if next_mask is None else np.asarray(next_mask, dtype=bool)
        best = (chooser if legal is None else np.where(legal, chooser, np.float32(-1e9))).argmax(axis=1)
        next_q = target_q[rows, best]
        if self.config["clipped_double"]:  # the lower of the two networks' values of that action
            next_q = np.minimum(next_q, chooser[rows, best])
        # No bootstrap after a termination, nor from a next state without legal actions.
        stop = np.asarray(batch["terminated"], dtype=bool)
        next_q = np.where(stop if legal is None else stop | ~legal.any(axis=1), np.float32(0.0), next_q)
        reward = np.asarray(batch["reward"], dtype=np.float32)
        if "discount" in batch:  # n-step transitions (`nstep_batch`): gamma ** steps used, per row
            return reward + np.asarray(batch["discount"], dtype=np.float32) * next_q
        return reward + float(self.config["gamma"]) * next_q

    def update_target(self) -> None:
        """After each update: Polyak averaging (target += tau * (online - target)) when target_tau < 1, else a
        hard copy every `target_update_interval` updates."""
        if self.tau < 1.0:
            with torch.no_grad():
                for target, online in zip(self.target.parameters(), self.q.parameters()):
                    target.lerp_(online, self.tau)
        elif self.updates % int(self.config["target_update_interval"]) == 0:
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
        self.updates = int(state.get("updates", 0))
