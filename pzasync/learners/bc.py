"""Behavioural cloning (`bc`): a policy trained by maximum likelihood on recorded (obs, action) pairs.

Its policy is PPO's actor (`ppo.ActorCritic` without a value head: the same encoder, torso and heads, a masked
categorical for Discrete actions, a diagonal Gaussian for Box), so it acts, publishes, is evaluated and
checkpointed like any learner's. It learns only from the transitions a dataset holds for its agents
(`RunConfig.dataset`, `load_dataset`; docs/running.md, "Recorded data"): each update draws `batch_size` of them
uniformly and takes one Adam step on the negative log-likelihood of the recorded actions, which for Discrete
actions is the cross-entropy over the legal ones (illegal actions are masked out of the softmax). The actor's
own transitions of its seats are written to its buffer as for any learner and never read.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from pzasync.config.declare import option
from pzasync.core.spaces import AgentLayout
from pzasync.errors import DatasetError, UnsupportedSpaceError
from pzasync.learners.base import Batch, Learner, LearnerContext
from pzasync.learners.networks import ACTIVATIONS, TORSOS, obs_tensors
from pzasync.learners.options import LearnerOptions, Option
from pzasync.learners.ppo import ActorCritic, PPOOptions
from pzasync.learners.recorded import RecordedRows


@dataclass(kw_only=True, eq=False)
class BCOptions(LearnerOptions):
    """Behavioural cloning's options (docs/learners.md, "bc")."""

    lr: float = option(1e-3, "Adam's learning rate.", Option(float, gt=0))
    batch_size: int = option(128, "Recorded rows per update, drawn uniformly.", Option(int, ge=1))
    hidden: list[int] = option([128, 128], "Widths of the policy's hidden layers.",
                               Option(list, item=Option(int, ge=1)))
    activation: str = option("relu", "Activation between hidden layers.", Option(str, choices=tuple(ACTIVATIONS)))
    torso: str = option("auto", "How 3-dim Box observations are encoded: 'auto', 'mlp' or 'cnn' "
                                "(networks.leaf_kind).", Option(str, choices=TORSOS))
    max_grad_norm: float = option(1.0, "Gradients are clipped to this norm.", Option(float, gt=0))


def actor_options(agent: str, config: BCOptions) -> PPOOptions:
    """The options of PPO's actor that build the same network as `config` (PPO's defaults for the rest)."""
    options = PPOOptions.parse(agent, "BCLearner", {"hidden": list(config.hidden), "activation": config.activation,
                                                     "torso": config.torso})
    assert isinstance(options, PPOOptions)
    return options


class BCLearner(Learner):
    """Behavioural cloning: PPO's actor network fitted to recorded actions by maximum likelihood."""

    on_policy = False
    needs_dataset = True
    extras = {"log_prob": "float32"}
    Options: ClassVar[type[LearnerOptions]] = BCOptions
    config: BCOptions

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        torch.manual_seed(ctx.seed)
        self.device = torch.device(ctx.device)
        self.net = self.build_policy(ctx.layout, self.config).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.config.lr)
        self.learning_starts = 0  # the recorded rows are all there before the first update
        self.recorded: RecordedRows | None = None

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        if not isinstance(layout.action_space, (spaces.Discrete, spaces.Box)):
            raise UnsupportedSpaceError(f"agent {layout.agent!r}: bc clones Discrete or Box actions, got "
                                        f"{layout.action_space!r}")

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> ActorCritic:
        return ActorCritic(layout, actor_options(layout.agent, cls.checked(layout.agent, config)), value_head=False)

    @classmethod
    def dataset_refusal(cls, config: Mapping[str, Any]) -> str | None:
        return None

    @property
    def policy(self) -> ActorCritic:
        return self.net

    def load_dataset(self, batch: Batch) -> None:
        """Keep the recorded rows: every batch is drawn from them."""
        self.recorded = RecordedRows(self.ctx.agent, batch, self.net.start)
        self.dataset_rows = self.recorded.rows

    def sample(self, buffer: Any, rng: np.random.Generator) -> Batch:
        """`batch_size` recorded rows drawn uniformly (the buffer, the actor's own play, is not read)."""
        if self.recorded is None or not self.recorded.rows:
            raise DatasetError(f"agent {self.ctx.agent!r}: bc has no recorded transitions to learn from; give "
                               f"RunConfig.dataset (--dataset PATH) with transitions of this agent")
        return self.recorded.draw(self.batch_size, rng)

    def update(self, batch: Batch) -> dict[str, float]:
        net, dev = self.net, self.device
        obs = obs_tensors(batch, self.ctx.layout, "obs", dev)
        mask = batch.get("action_mask")
        actions = torch.as_tensor(batch["action"], device=dev)
        if net.discrete and net.start:
            actions = actions - net.start
        dist = net.distribution(net.encoder(obs), None if mask is None else torch.as_tensor(mask, device=dev))
        loss = -dist.log_prob(actions).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            if net.discrete:
                assert isinstance(dist, torch.distributions.Categorical)
                fit = (dist.logits.argmax(dim=1) == actions).float().mean()  # greedy action == the recorded one
                return {"loss": float(loss), "accuracy": float(fit)}
            error = (dist.mean - actions.reshape(dist.mean.shape).float()).pow(2).mean()
            return {"loss": float(loss), "mean_squared_error": float(error)}

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["policy"])
        if "optimizer" in state:
            # A copy: Adam would otherwise share moment tensors with the state it was given.
            self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
