"""PPO with GAE for discrete (masked categorical) and continuous (diagonal Gaussian) actions.

The clipped objective divides by the probability stored by the behaviour policy when it acted, so
transitions produced by an older published version are corrected by the importance ratio (policy lag).
Advantages bootstrap through truncation, never through termination; a transition that ends an episode
either way also ends the GAE recursion. Box actions are returned raw (the actor clips them for the env), so
log-probabilities are those of the raw samples.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.errors import UnsupportedSpaceError
from pzasync.core.spaces import AgentLayout
from pzasync.learners.base import Batch, Learner, LearnerContext, Option, Policy, trajectory_ids
from pzasync.learners.networks import ACTIVATIONS, TORSOS, Encoder, adam, masked_logits, mlp, obs_tensors

Dist = torch.distributions.Distribution
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
    """Shared encoder, a policy head (logits or Gaussian mean), a value head, and for Box a learnable log_std."""

    def __init__(self, layout: AgentLayout, config: dict[str, Any]) -> None:
        super().__init__()
        space = layout.action_space
        self.layout = layout
        self.discrete = isinstance(space, spaces.Discrete)
        self.start = int(space.start) if self.discrete else 0
        self.action_shape = tuple(space.shape) if not self.discrete else ()
        outputs = int(space.n) if self.discrete else int(np.prod(space.shape))
        self.encoder = Encoder(layout, config.get("torso", "auto"))
        hidden, activation = list(config["hidden"]), config["activation"]
        self.pi = mlp(self.encoder.out_dim, hidden, outputs, activation)
        self.v = mlp(self.encoder.out_dim, hidden, 1, activation)
        with torch.no_grad():  # small initial policy outputs: near-uniform logits, means near 0
            self.pi[-1].weight.mul_(0.01)
            self.pi[-1].bias.zero_()
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((outputs,), float(config["init_log_std"])))
        self.generator = torch.Generator().manual_seed(torch.initial_seed())

    def seed(self, seed: int) -> None:
        """Seed the action sampling (the only randomness in acting)."""
        self.generator.manual_seed(int(seed))

    def distribution(self, features: torch.Tensor, mask: Any) -> Dist | DiagGaussian:
        out = self.pi(features)
        if self.discrete:
            return torch.distributions.Categorical(logits=masked_logits(out, mask), validate_args=False)
        return DiagGaussian(out, self.log_std)

    def evaluate(self, obs: dict[str, torch.Tensor], mask: Any) -> tuple[Dist | DiagGaussian, torch.Tensor]:
        """The action distribution and the value of each row."""
        features = self.encoder(obs)
        return self.distribution(features, mask), self.v(features).squeeze(-1)

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.v(self.encoder(obs)).squeeze(-1)

    def act(self, obs: dict[str, np.ndarray], mask: np.ndarray | None, explore: bool) -> tuple[np.ndarray, dict]:
        # Written out rather than through torch.distributions: this runs at every turn of the actor.
        with torch.inference_mode():
            # The actor's copy may live on a GPU (RunConfig.actor_device); sampling stays on the CPU generator.
            features = self.encoder(obs_tensors(obs, self.layout, device=self.parameter_device()))
            value, out = self.v(features).squeeze(-1).cpu(), self.pi(features).cpu()
            if self.discrete:
                log_probs = torch.log_softmax(masked_logits(out, mask), dim=1)
                if explore:
                    index = torch.multinomial(log_probs.exp(), 1, generator=self.generator).squeeze(1)
                else:
                    index = log_probs.argmax(dim=1)
                log_prob = log_probs.gather(1, index[:, None]).squeeze(1)
                action = (index + self.start).numpy()
            else:
                sample, std = out, self.log_std.exp()
                if explore:
                    sample = out + torch.randn(out.shape, generator=self.generator) * std
                z = (sample - out) / std
                log_prob = (-0.5 * z * z - self.log_std - _HALF_LOG_2PI).sum(-1)
                action = sample.reshape(-1, *self.action_shape).numpy()
        return action, {"log_prob": log_prob.numpy().astype(np.float32, copy=False),
                        "value": value.numpy().astype(np.float32, copy=False)}


class PPOLearner(Learner):
    """Clipped PPO over chunks of `batch_size` transitions read in order, `epochs` passes of minibatches."""

    on_policy = True
    extras = {"log_prob": "float32", "value": "float32"}
    defaults = {
        "lr": 3e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip": 0.2, "epochs": 4, "minibatch_size": 64,
        "batch_size": 512, "vf_coef": 0.5, "ent_coef": 0.01, "max_grad_norm": 0.5, "hidden": [64, 64],
        "activation": "tanh", "init_log_std": -0.5, "normalize_advantages": True,
        "torso": "auto",  # observation torso: "auto", "mlp" or "cnn" (networks.leaf_kind)
    }
    #: Checked by `Learner.validate_config` (with the base's batch_size >= 1).
    schema = {
        "lr": Option(float, gt=0), "gamma": Option(float, ge=0, le=1), "gae_lambda": Option(float, ge=0, le=1),
        "clip": Option(float, gt=0), "epochs": Option(int, ge=1), "minibatch_size": Option(int, ge=1),
        "vf_coef": Option(float, ge=0), "ent_coef": Option(float, ge=0), "max_grad_norm": Option(float, gt=0),
        "hidden": Option(list, item=Option(int, ge=1)), "activation": Option(str, choices=tuple(ACTIVATIONS)),
        "init_log_std": Option(float), "normalize_advantages": Option(bool), "torso": Option(str, choices=TORSOS),
    }

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        torch.manual_seed(ctx.seed)
        self.device = torch.device(ctx.device)
        self.net = self.build_policy(ctx.layout, self.config).to(self.device)
        self.optimizer = adam(self.net.parameters(), float(self.config["lr"]), eps=1e-5)
        self.rng = np.random.default_rng(ctx.seed)

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        if not isinstance(layout.action_space, (spaces.Discrete, spaces.Box)):
            raise UnsupportedSpaceError(
                f"agent {layout.agent!r}: PPO supports Discrete and Box action spaces, got "
                f"{layout.action_space!r}; use 'random' or a custom learner for this agent"
            )

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: dict[str, Any]) -> ActorCritic:
        return ActorCritic(layout, config)

    @property
    def policy(self) -> ActorCritic:
        return self.net

    def compute_advantages(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over the chunk in order (per track: env copy and group member), with values from the current
        network; returns (advantages, returns)."""
        dev, layout = self.device, self.ctx.layout
        with torch.no_grad():
            values = self.net.value(obs_tensors(batch, layout, "obs", dev)).cpu().double().numpy()
            next_values = self.net.value(obs_tensors(batch, layout, "next_obs", dev)).cpu().double().numpy()
        rewards = np.asarray(batch["reward"], dtype=np.float64)
        alive = 1.0 - np.asarray(batch["terminated"], dtype=np.float64)
        goes_on = 1.0 - np.logical_or(batch["terminated"], batch["truncated"]).astype(np.float64)
        gamma, lam = float(self.config["gamma"]), float(self.config["gae_lambda"])
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
        obs = obs_tensors(batch, self.ctx.layout, "obs", dev)
        actions = torch.as_tensor(batch["action"], device=dev)
        if self.net.discrete and self.net.start:
            actions = actions - self.net.start
        old_log_prob = torch.as_tensor(batch["log_prob"], device=dev, dtype=torch.float32)
        mask = batch.get("action_mask")
        mask = None if mask is None else torch.as_tensor(mask, device=dev)
        n, size, clip = len(batch["reward"]), int(cfg["minibatch_size"]), float(cfg["clip"])
        totals = dict.fromkeys(("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"), 0.0)
        steps = 0
        for _ in range(int(cfg["epochs"])):
            order = torch.as_tensor(self.rng.permutation(n), device=dev)
            for start in range(0, n, size):
                idx = order[start:start + size]
                dist, value = self.net.evaluate({k: x[idx] for k, x in obs.items()},
                                                None if mask is None else mask[idx])
                log_ratio = dist.log_prob(actions[idx]) - old_log_prob[idx]
                ratio = log_ratio.exp()
                adv = advantages[idx]
                if cfg["normalize_advantages"] and len(idx) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
                value_loss = 0.5 * (returns[idx] - value).pow(2).mean()
                entropy = dist.entropy().mean()
                loss = policy_loss + float(cfg["vf_coef"]) * value_loss - float(cfg["ent_coef"]) * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.net.parameters(), float(cfg["max_grad_norm"]))
                self.optimizer.step()
                with torch.no_grad():
                    totals["policy_loss"] += float(policy_loss)
                    totals["value_loss"] += float(value_loss)
                    totals["entropy"] += float(entropy)
                    totals["approx_kl"] += float(((ratio - 1) - log_ratio).mean())
                    totals["clip_fraction"] += float(((ratio - 1).abs() > clip).float().mean())
                steps += 1
        return {k: v / max(1, steps) for k, v in totals.items()}

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
