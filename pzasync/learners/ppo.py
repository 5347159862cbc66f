"""PPO with GAE for discrete (masked categorical) and continuous (diagonal Gaussian) actions.

The clipped objective divides by the probability stored by the behaviour policy when it acted, so
transitions produced by an older published version are corrected by the importance ratio (policy lag).
Advantages bootstrap through truncation, never through termination; a transition that ends an episode
either way also ends the GAE recursion. Box actions are returned raw (the actor clips them for the env), so
log-probabilities are those of the raw samples.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.config.declare import option
from pzasync.core.spaces import AgentLayout
from pzasync.errors import UnsupportedSpaceError
from pzasync.learners.acting import ActingModule
from pzasync.learners.base import Batch, Learner, LearnerContext, Policy, trajectory_ids
from pzasync.learners.networks import (
    HEAD_ACTIVATIONS,
    IMAGE_INITS,
    TORSOS,
    Encoder,
    head_activation,
    masked_logits,
    mlp,
    obs_tensors,
)
from pzasync.learners.options import LearnerOptions, Option
from pzasync.learners.recurrent import Chunk, gru_core, memory_tensor, sequence_chunks, sequence_outputs

Dist = torch.distributions.Distribution
#: Encodes a chunk's observation rows (a dict of leaf tensors) given their batch row indices.
Encode = Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor]
_HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


class DiagGaussian:
    """A diagonal Gaussian over flattened action dimensions: log_prob and entropy sum over them."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean, self.log_std = mean, log_std.expand_as(mean)
        self.normal = torch.distributions.Normal(mean, self.log_std.exp(), validate_args=False)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.normal.log_prob(action.reshape(self.mean.shape)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return self.normal.entropy().sum(-1)


class ActorCritic(Policy):
    """Shared encoder, a policy head (logits or Gaussian mean), a value head, and for Box a learnable log_std.

    `observation_key`: encode only the leaves under that key of a Dict observation (the agent's own observation
    where the global state is beside it); `value_head=False`: no value head (the value lives in a critic the
    learner keeps, as `mappo`'s does), so acting computes no value and stores none."""

    def __init__(self, layout: AgentLayout, config: PPOOptions, observation_key: str | None = None,
                 value_head: bool = True) -> None:
        super().__init__()
        space = layout.action_space
        self.layout = layout
        self.discrete = isinstance(space, spaces.Discrete)
        self.action_shape: tuple[int, ...] = ()
        if isinstance(space, spaces.Discrete):
            self.start, outputs = int(space.start), int(space.n)
        elif space.shape is None:
            raise UnsupportedSpaceError(f"agent {layout.agent!r}: action space {space!r} has no shape")
        else:
            self.start, self.action_shape, outputs = 0, tuple(space.shape), int(np.prod(space.shape))
        self.encoder = Encoder(layout, config.torso, only=observation_key, image_init=config.image_init,
                               invert_frames=config.invert_frames)
        hidden, activation = config.hidden, head_activation(config.activation, self.encoder)
        recurrent = config.memory == "gru"
        #: With memory="gru": a GRU cell between the encoder and the heads (learners/recurrent.py).
        self.core = gru_core(self.encoder.out_dim, config.memory_size) if recurrent else None
        self.memory_size = config.memory_size if recurrent else 0
        width = self.memory_size or self.encoder.out_dim
        self.pi = mlp(width, hidden, outputs, activation)
        self.v = mlp(width, hidden, 1, activation) if value_head else None
        head = self.pi[-1]
        assert isinstance(head, nn.Linear), "mlp() ends with a Linear layer"
        with torch.no_grad():  # small initial policy outputs: near-uniform logits, means near 0
            head.weight.mul_(0.01)
            head.bias.zero_()
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((outputs,), config.init_log_std))
        self.generator = torch.Generator().manual_seed(torch.initial_seed())

    def seed(self, seed: int) -> None:
        """Seed the action sampling (the only randomness in acting)."""
        self.generator.manual_seed(int(seed))

    def value_net(self) -> nn.Sequential:
        """The value head (a policy built with `value_head=False` has none: its values come from elsewhere)."""
        if self.v is None:
            raise RuntimeError(f"agent {self.layout.agent!r}: this policy has no value head (value_head=False)")
        return self.v

    def recurrent_core(self) -> nn.GRUCell:
        """The GRU core of a recurrent policy (memory="gru")."""
        if self.core is None:
            raise RuntimeError(f"agent {self.layout.agent!r}: this policy has no recurrent core (memory='none')")
        return self.core

    def distribution(self, features: torch.Tensor, mask: Any) -> Dist | DiagGaussian:
        out = self.pi(features)
        if self.discrete:
            return torch.distributions.Categorical(logits=masked_logits(out, mask), validate_args=False)
        return DiagGaussian(out, self.log_std)

    def evaluate(self, obs: dict[str, torch.Tensor], mask: Any) -> tuple[Dist | DiagGaussian, torch.Tensor]:
        """The action distribution and the value of each row."""
        features = self.encoder(obs)
        return self.distribution(features, mask), self.value_net()(features).squeeze(-1)

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.value_net()(self.encoder(obs)).squeeze(-1)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        if self.core is not None:  # a recurrent policy asked without memory: every row at its episode's start
            rows = len(next(iter(obs.values())))
            return self.act_with_memory(obs, mask, explore, np.zeros((rows, self.memory_size), np.float32))[:2]
        with torch.inference_mode():
            # The actor's copy may live on a GPU (RunConfig.actor_device); sampling stays on the CPU generator.
            features = self.encoder(obs_tensors(obs, self.layout, device=self.parameter_device()))
            return self._sample(features, mask, explore)

    def act_with_memory(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool,
                        memory: np.ndarray) -> tuple[np.ndarray, dict, np.ndarray]:
        with torch.inference_mode():
            after = self._heads_input(obs, memory)
            action, extras = self._sample(after, mask, explore)
            extras["memory"] = memory
            return action, extras, after.cpu().numpy()

    def act_seeded(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, seeds: Sequence[int],
                   memory: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """`Policy.act_seeded` with one forward: each row's draw from its own generator seeded `seeds[i]`."""
        generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        with torch.inference_mode():
            features = self._heads_input(obs, memory)
            action, _ = self._sample(features, mask, True, generators)
            return action, None if memory is None else features.cpu().numpy()

    def acting_module(self) -> ActingModule:
        """The encoder, the GRU core (with memory) and the policy head; greedy: the most likely legal action (a
        Box's mean), sampled: a draw from the masked categorical (or the Gaussian)."""
        if self.discrete:
            return ActingModule(self.layout, self.encoder, self.pi, "categorical", core=self.core)
        return ActingModule(self.layout, self.encoder, self.pi, "gaussian", core=self.core, log_std=self.log_std)

    def action_probabilities(self, obs: dict[str, np.ndarray], mask: np.ndarray | None) -> np.ndarray:
        """The softmax of the legal actions' logits (a discrete policy's; a recurrent one's at its episode's start)."""
        if not self.discrete:
            raise NotImplementedError(f"agent {self.layout.agent!r}: a Box action's policy is a density, not "
                                      f"probabilities over actions")
        with torch.inference_mode():
            out = self.pi(self._heads_input(obs, None)).cpu()
            return torch.softmax(masked_logits(out, mask), dim=1).numpy()

    def _heads_input(self, obs: dict[str, np.ndarray], memory: np.ndarray | None) -> torch.Tensor:
        """The encoder's features, through the GRU core from `memory` where the policy has one (None: every row
        at its episode's start, zeros, as `act` takes it)."""
        device = self.parameter_device()
        features = self.encoder(obs_tensors(obs, self.layout, device=device))
        if self.core is None:
            return features
        if memory is None:
            memory = np.zeros((features.shape[0], self.memory_size), np.float32)
        return self.core(features, torch.as_tensor(memory, device=device))

    def _sample(self, features: torch.Tensor, mask: np.ndarray | None, explore: bool,
                generators: list[torch.Generator] | None = None) -> tuple[np.ndarray, dict]:
        """Actions and their log-probabilities (and the value, with a value head) from the heads' input.
        Written out rather than through torch.distributions: this runs at every turn of the actor.
        `generators`: one per row, each row drawn from its own (`act_seeded`), else all from `self.generator`."""
        out = self.pi(features).cpu()
        if self.discrete:
            log_probs = torch.log_softmax(masked_logits(out, mask), dim=1)
            if explore:
                probs = log_probs.exp()
                if generators is None:
                    index = torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
                else:
                    index = torch.cat([torch.multinomial(probs[i:i + 1], 1, generator=g)
                                       for i, g in enumerate(generators)]).squeeze(1)
            else:
                index = log_probs.argmax(dim=1)
            log_prob = log_probs.gather(1, index[:, None]).squeeze(1)
            action = (index + self.start).numpy()
        else:
            sample, std = out, self.log_std.exp()
            if explore:
                if generators is None:
                    noise = torch.randn(out.shape, generator=self.generator)
                else:
                    noise = torch.cat([torch.randn((1, out.shape[1]), generator=g) for g in generators])
                sample = out + noise * std
            z = (sample - out) / std
            log_prob = (-0.5 * z * z - self.log_std - _HALF_LOG_2PI).sum(-1)
            action = sample.reshape(-1, *self.action_shape).numpy()
        extras = {"log_prob": log_prob.numpy().astype(np.float32, copy=False)}
        if self.v is not None:
            extras["value"] = self.v(features).squeeze(-1).cpu().numpy().astype(np.float32, copy=False)
        return action, extras


@dataclass(kw_only=True, eq=False)
class PPOOptions(LearnerOptions):
    """PPO's options (docs/learners.md, "PPO")."""

    lr: float = option(3e-4, "Adam's learning rate.", Option(float, gt=0))
    lr_schedule: str = option("constant", "'linear': the learning rate falls from lr to 0 over the run's budget "
                                          "(its seconds or agent steps); 'constant': lr throughout.",
                              Option(str, choices=("constant", "linear")))
    gamma: float = option(0.99, "Discount per agent step.", Option(float, ge=0, le=1))
    gae_lambda: float = option(0.95, "GAE's lambda.", Option(float, ge=0, le=1))
    clip: float = option(0.2, "The clipped objective's range: ratios outside 1 +- clip earn nothing more.",
                         Option(float, gt=0))
    epochs: int = option(4, "Passes over each chunk.", Option(int, ge=1))
    minibatch_size: int = option(64, "Rows per gradient step.", Option(int, ge=1))
    batch_size: int = option(512, "Transitions per chunk (one update), read in order.", Option(int, ge=1))
    vf_coef: float = option(0.5, "Weight of the value loss.", Option(float, ge=0))
    ent_coef: float = option(0.01, "Weight of the entropy bonus.", Option(float, ge=0))
    max_grad_norm: float = option(0.5, "Gradients are clipped to this norm.", Option(float, gt=0))
    hidden: list[int] = option([64, 64], "Widths of the policy's and the value's hidden layers.",
                               Option(list, item=Option(int, ge=1)))
    activation: str = option("auto", "Activation between hidden layers; 'auto': 'relu' behind an image encoder, "
                                     "'tanh' otherwise.", Option(str, choices=HEAD_ACTIVATIONS))
    init_log_std: float = option(-0.5, "Initial log standard deviation of Box actions.", Option(float))
    final_log_std: float | None = option(None, "Box actions' log standard deviation is no longer learned: it "
                                               "falls linearly from init_log_std to this over the run's budget "
                                               "(as lr_schedule='linear' does the learning rate); None: learned.",
                                         Option(float, optional=True))
    normalize_advantages: bool = option(True, "Standardise advantages per minibatch.", Option(bool))
    torso: str = option("auto", "How 3-dim Box observations are encoded: 'auto', 'mlp' or 'cnn' "
                                "(networks.leaf_kind).", Option(str, choices=TORSOS))
    image_init: str = option("orthogonal", "How the image encoder's layers start: 'orthogonal' (gain sqrt(2), zero "
                                           "biases, as CleanRL's and SB3's PPO start theirs) or PyTorch's default "
                                           "('torch').", Option(str, choices=IMAGE_INITS))
    invert_frames: bool = option(False, "The image encoder reads 1 - x of uint8 frames scaled to [0, 1]: a bright "
                                        "background becomes 0 (docs/benchmarks.md#pistonball).", Option(bool))
    memory: str = option("none", "'gru': a recurrent core trained on sequences of seq_len rows "
                                 "(learners/recurrent.py).", Option(str, choices=("none", "gru")))
    memory_size: int = option(64, "Floats of the recurrent core's memory.", Option(int, ge=1))
    seq_len: int = option(16, "Rows per training sequence of a recurrent policy.", Option(int, ge=1))
    burn_in: int = option(0, "Rows at a sequence's start that only warm the memory up.", Option(int, ge=0))


class PPOLearner(Learner):
    """Clipped PPO over chunks of `batch_size` transitions read in order, `epochs` passes of minibatches."""

    on_policy = True
    extras = {"log_prob": "float32", "value": "float32"}
    Options: ClassVar[type[LearnerOptions]] = PPOOptions
    config: PPOOptions

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        torch.manual_seed(ctx.seed)
        self.device = torch.device(ctx.device)
        self.net = self.build_policy(ctx.layout, self.config).to(self.device)
        if self.config.final_log_std is not None and not self.net.discrete:
            self.net.log_std.requires_grad_(False)  # set by scheduled_log_std, not by gradients
        self.optimizer = torch.optim.Adam(self.trainable(), lr=self.config.lr, eps=1e-5)
        self.rng = np.random.default_rng(ctx.seed)

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        if not isinstance(layout.action_space, (spaces.Discrete, spaces.Box)):
            raise UnsupportedSpaceError(
                f"agent {layout.agent!r}: PPO supports Discrete and Box action spaces, got "
                f"{layout.action_space!r}; use 'random' or a custom learner for this agent"
            )

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> ActorCritic:
        return ActorCritic(layout, cls.checked(layout.agent, config))

    @classmethod
    def dataset_refusal(cls, config: Mapping[str, Any]) -> str | None:
        """On-policy: its objective is over transitions of the policy it is updating, so recorded play (another
        player's actions, without their probabilities) cannot train it directly."""
        return (f"{cls.__name__} is on-policy: it learns only from its current policy's own transitions, so "
                f"recorded ones cannot train it; clone them with 'bc', or learn from them with 'dqn'")

    @classmethod
    def extra_fields(cls, config: Mapping[str, Any]) -> dict[str, str]:
        """With memory="gru", the memory each decision started from (what a training sequence starts from)."""
        extras, options = dict(cls.extras), cls.checked("?", config)
        if options.memory == "gru":
            extras["memory"] = f"float32[{options.memory_size}]"
        return extras

    @property
    def recurrent(self) -> bool:
        return self.net.core is not None

    @property
    def policy(self) -> ActorCritic:
        return self.net

    def values(self, batch: Batch, prefix: str) -> np.ndarray:
        """The current value estimates (float64) of the batch's `prefix` observations ("obs" or "next_obs")."""
        with torch.no_grad():
            return self.net.value(obs_tensors(batch, self.ctx.layout, prefix, self.device)).cpu().double().numpy()

    def trainable(self) -> list[nn.Parameter]:
        """The parameters the optimiser steps and the gradient norm clips (a scheduled log std is not one)."""
        return [p for p in self.net.parameters() if p.requires_grad]

    def train_inputs(self, batch: Batch) -> dict[str, Any]:
        """What `evaluate_rows` reads for a chunk: the observation tensors and the masks."""
        mask = batch.get("action_mask")
        inputs = {"obs": obs_tensors(batch, self.ctx.layout, "obs", self.device),
                  "mask": None if mask is None else torch.as_tensor(mask, device=self.device)}
        if self.recurrent:
            inputs["memory"] = memory_tensor(batch, self.device)
        return inputs

    def evaluate_rows(self, inputs: dict[str, Any], idx: torch.Tensor) -> tuple[Dist | DiagGaussian, torch.Tensor]:
        """The action distribution and the value predicted for the rows `idx` of a chunk (with gradients)."""
        mask = inputs["mask"]
        return self.net.evaluate({k: x[idx] for k, x in inputs["obs"].items()}, None if mask is None else mask[idx])

    def value_targets(self, returns: torch.Tensor) -> torch.Tensor:
        """What the value prediction is regressed on: the returns themselves (a normalising critic rescales)."""
        return returns

    def value_pair(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """The current value estimates of each row's observation and of its next observation. A recurrent
        policy's come from its core run over the chunk's sequences (the next observation's from one more step
        of the core, from the memory after the row)."""
        net, dev = self.net, self.device
        core, value = net.core, net.v
        if core is None or value is None:  # not recurrent, or the values come from elsewhere
            return self.values(batch, "obs"), self.values(batch, "next_obs")
        with torch.no_grad():
            inputs = self.train_inputs(batch)
            rows, after = self.sequence_pass(inputs, self.chunks(batch))
            order = np.argsort(rows)
            after = after[torch.as_tensor(order, device=dev)]
            following = core(net.encoder(obs_tensors(batch, self.ctx.layout, "next_obs", dev)), after)
            return (value(after).squeeze(-1).cpu().double().numpy(),
                    value(following).squeeze(-1).cpu().double().numpy())

    def chunks(self, batch: Batch) -> list[Chunk]:
        """A recurrent policy's training sequences in this batch (learners/recurrent.py)."""
        done = np.logical_or(batch["terminated"], batch["truncated"])
        return sequence_chunks(trajectory_ids(batch), done, self.config.seq_len, self.config.burn_in)

    def sequence_pass(self, inputs: dict[str, Any], chunks: list[Chunk], encode: Encode | None = None,
                      core: nn.Module | None = None, memory: torch.Tensor | None = None
                      ) -> tuple[np.ndarray, torch.Tensor]:
        """A recurrent core's output at the trained rows of `chunks` (rows, outputs), encoding each row once: by
        default the policy's (its encoder, core and the stored `memory` column); a learner with a recurrent
        critic passes the critic's (`encode(obs, rows)`, its core and its memory column), and gets the same rows
        in the same order."""
        rows = np.unique(np.concatenate([c.rows for c in chunks]))
        position = np.full(int(rows[-1]) + 1, -1, np.int64)
        position[rows] = np.arange(len(rows))
        local = [Chunk(position[c.rows], c.context) for c in chunks]
        picked = torch.as_tensor(rows, device=self.device)
        obs = {k: x[picked] for k, x in inputs["obs"].items()}
        features = encode(obs, picked) if encode is not None else self.net.encoder(obs)
        memory = inputs["memory"] if memory is None else memory
        trained, outputs = sequence_outputs(core if core is not None else self.net.recurrent_core(), features,
                                            memory[picked], local)
        return rows[trained], outputs

    def evaluate_sequences(self, inputs: dict[str, Any], chunks: list[Chunk]
                           ) -> tuple[np.ndarray, Dist | DiagGaussian, torch.Tensor]:
        """A recurrent policy's minibatch: the trained rows of `chunks`, their action distribution and values."""
        rows, after = self.sequence_pass(inputs, chunks)
        mask = inputs["mask"]
        idx = torch.as_tensor(rows, device=self.device)
        dist = self.net.distribution(after, None if mask is None else mask[idx])
        return rows, dist, self.sequence_values(inputs, chunks, idx, after)

    def sequence_values(self, inputs: dict[str, Any], chunks: list[Chunk], idx: torch.Tensor,
                        after: torch.Tensor) -> torch.Tensor:
        """Values of a recurrent minibatch's rows `idx` (the trained rows of `chunks`, in `sequence_pass`'s
        order), whose policy core outputs are `after` (PPO: the value head over them)."""
        return self.net.value_net()(after).squeeze(-1)

    def minibatches(self, batch: Batch) -> list[Any]:
        """One epoch's minibatches in a random order: row indices, or for a recurrent policy lists of chunks
        (about `minibatch_size` rows each)."""
        n, size = len(batch["reward"]), self.config.minibatch_size
        if not self.recurrent:
            order = torch.as_tensor(self.rng.permutation(n), device=self.device)
            return [order[start:start + size] for start in range(0, n, size)]
        parts: list[list[Chunk]] = [[]]
        rows = 0
        chunks = self.chunks(batch)
        for i in self.rng.permutation(len(chunks)):
            if rows >= size:
                parts.append([])
                rows = 0
            parts[-1].append(chunks[i])
            rows += len(chunks[i].trained)
        return parts

    def compute_advantages(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over the chunk in order (per track: env copy and group member), with values from the current
        network; returns (advantages, returns)."""
        dev = self.device
        values, next_values = self.value_pair(batch)
        rewards = np.asarray(batch["reward"], dtype=np.float64)
        alive = 1.0 - np.asarray(batch["terminated"], dtype=np.float64)
        goes_on = 1.0 - np.logical_or(batch["terminated"], batch["truncated"]).astype(np.float64)
        gamma, lam = self.config.gamma, self.config.gae_lambda
        deltas = rewards + gamma * next_values * alive - values
        advantages = np.zeros_like(deltas)
        # Env copies and an agent group's members interleave in one chunk: each track's own transitions, in
        # order, form its trajectory, so GAE runs per track. A trajectory's last transition in the chunk has no
        # successor here: it bootstraps from its next_obs only.
        track = trajectory_ids(batch)
        tracks = [np.arange(len(deltas))] if track is None else [
            np.flatnonzero(track == m) for m in np.unique(track)]
        for rows in tracks:
            running = 0.0
            for t in rows[::-1]:
                running = deltas[t] + gamma * lam * goes_on[t] * running
                advantages[t] = running
        adv = torch.as_tensor(advantages, dtype=torch.float32, device=dev)
        return adv, adv + torch.as_tensor(values, dtype=torch.float32, device=dev)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg, dev = self.config, self.device
        advantages, returns = self.compute_advantages(batch)
        targets = self.value_targets(returns)
        inputs = self.train_inputs(batch)
        actions = torch.as_tensor(batch["action"], device=dev)
        if self.net.discrete and self.net.start:
            actions = actions - self.net.start
        old_log_prob = torch.as_tensor(batch["log_prob"], device=dev, dtype=torch.float32)
        parameters = self.trainable()
        lr = self.scheduled_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        log_std = self.scheduled_log_std()
        clip = cfg.clip
        totals = dict.fromkeys(("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"), 0.0)
        steps = 0
        for _ in range(cfg.epochs):
            for part in self.minibatches(batch):
                if self.recurrent:
                    rows, dist, value = self.evaluate_sequences(inputs, part)
                    idx = torch.as_tensor(rows, device=dev)
                else:
                    idx = part
                    dist, value = self.evaluate_rows(inputs, idx)
                log_ratio = dist.log_prob(actions[idx]) - old_log_prob[idx]
                ratio = log_ratio.exp()
                adv = advantages[idx]
                if cfg.normalize_advantages and len(idx) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
                value_loss = 0.5 * (targets[idx] - value).pow(2).mean()
                entropy = dist.entropy().mean()
                loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(parameters, cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    totals["policy_loss"] += float(policy_loss)
                    totals["value_loss"] += float(value_loss)
                    totals["entropy"] += float(entropy)
                    totals["approx_kl"] += float(((ratio - 1) - log_ratio).mean())
                    totals["clip_fraction"] += float(((ratio - 1).abs() > clip).float().mean())
                steps += 1
        scheduled = {} if log_std is None else {"log_std": log_std}
        return {**{k: v / max(1, steps) for k, v in totals.items()}, "lr": lr, **scheduled}

    def scheduled_lr(self) -> float:
        """The learning rate of this update: `lr`, or with `lr_schedule="linear"` lr x (1 - the share of the run's
        budget spent), as CleanRL anneals it over its total steps."""
        if self.config.lr_schedule == "linear":
            return self.config.lr * (1.0 - self.progress)
        return self.config.lr

    def scheduled_log_std(self) -> float | None:
        """With `final_log_std`, set the Box policy's log std for this update and return it: init_log_std moved
        towards final_log_std by the share of the run's budget spent. The actor reads it with the next published
        policy; the transitions it trains on keep the log-probabilities they were drawn with, so the ratio
        accounts for the change. None where the log std is learned (or the actions are discrete)."""
        final = self.config.final_log_std
        if final is None or self.net.discrete:
            return None
        start = self.config.init_log_std
        value = start + (final - start) * min(1.0, max(0.0, self.progress))
        with torch.no_grad():
            self.net.log_std.fill_(value)
        return value

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["policy"])
        if "optimizer" in state:
            # A copy: Adam would otherwise share moment tensors with the state it was given.
            self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
