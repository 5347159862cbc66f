"""Double DQN for discrete actions, with action masks respected when acting and in targets.

Exploration is epsilon-greedy over legal actions, with epsilon a function of the agent's decisions (told by
the actor through `on_actor_steps`), so how often the learner replays never changes how fast it decays.
Targets bootstrap through truncation, never through termination, and only over legal next actions.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..errors import ConfigError, UnsupportedSpaceError
from ..spaces import AgentLayout
from .base import Batch, Learner, LearnerContext, Policy
from .networks import Encoder, check_activation, masked_logits, mlp, obs_tensors


class QNetwork(Policy):
    """Q-values from observations; acts epsilon-greedily over legal actions."""

    def __init__(self, layout: AgentLayout, config: dict[str, Any]) -> None:
        super().__init__()
        self.layout = layout
        self.start = int(layout.action_space.start)
        self.encoder = Encoder(layout)
        self.head = mlp(self.encoder.out_dim, config["hidden"], int(layout.action_space.n), config["activation"])
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
            q = masked_logits(self(obs_tensors(obs, self.layout)), mask)
            actions = q.argmax(dim=1).numpy()
        if explore:
            for i in np.flatnonzero(self.rng.random(len(actions)) < self.epsilon):
                legal = np.flatnonzero(mask[i]) if mask is not None and mask[i].any() else None
                actions[i] = self.rng.choice(legal) if legal is not None else self.rng.integers(q.shape[1])
        return actions + self.start if self.start else actions, {}


class DQNLearner(Learner):
    """Double DQN with a hard-updated target network, the Huber loss and gradient clipping."""

    on_policy = False
    extras: dict[str, str] = {}
    defaults = {
        "lr": 5e-4, "gamma": 0.99, "batch_size": 64, "learning_starts": 1000, "target_update_interval": 250,
        "epsilon_start": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 20_000, "max_grad_norm": 10.0,
        "hidden": [128, 128], "activation": "relu", "double": True,
    }

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        torch.manual_seed(ctx.seed)
        self.device = torch.device(ctx.device)
        self.q = self.build_policy(ctx.layout, self.config).to(self.device)
        self.target = copy.deepcopy(self.q)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=float(self.config["lr"]))
        self.updates = 0

    @classmethod
    def validate_config(cls, agent: str, config: dict[str, Any]) -> dict[str, Any]:
        config = super().validate_config(agent, config)
        check_activation(agent, config["activation"])
        for key in ("batch_size", "target_update_interval"):
            if int(config[key]) < 1:
                raise ConfigError(f"agent {agent!r}: DQN option {key!r} must be >= 1, got {config[key]!r}")
        return config

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

    def compute_targets(self, batch: Batch) -> torch.Tensor:
        """r + gamma * Q_target(s', argmax over legal a' of Q_online(s', a')), with no bootstrap after a
        termination or from a next state without legal actions (truncation does bootstrap)."""
        dev = self.device
        next_obs = obs_tensors(batch, self.ctx.layout, "next_obs", dev)
        next_mask = batch.get("next_action_mask")
        with torch.no_grad():
            target_q = self.target(next_obs)
            chooser = self.q(next_obs) if self.config["double"] else target_q
            best = masked_logits(chooser, next_mask).argmax(dim=1, keepdim=True)
            next_q = target_q.gather(1, best).squeeze(1)
            if next_mask is not None:
                next_q = next_q * torch.as_tensor(np.any(next_mask, axis=1), device=dev, dtype=torch.float32)
            reward = torch.as_tensor(batch["reward"], device=dev, dtype=torch.float32)
            alive = 1.0 - torch.as_tensor(batch["terminated"], device=dev, dtype=torch.float32)
            return reward + float(self.config["gamma"]) * alive * next_q

    def update(self, batch: Batch) -> dict[str, float]:
        target = self.compute_targets(batch)
        index = torch.as_tensor(batch["action"], device=self.device, dtype=torch.int64).reshape(-1, 1)
        if self.q.start:
            index = index - self.q.start
        q = self.q(obs_tensors(batch, self.ctx.layout, "obs", self.device)).gather(1, index).squeeze(1)
        loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.q.parameters(), float(self.config["max_grad_norm"]))
        self.optimizer.step()
        self.updates += 1
        if self.updates % int(self.config["target_update_interval"]) == 0:
            self.target.load_state_dict(self.q.state_dict())
        return {"loss": float(loss.detach()), "q_mean": float(q.detach().mean()),
                "target_mean": float(target.mean()), "grad_norm": float(grad_norm)}

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
