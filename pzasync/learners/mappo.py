"""MAPPO: PPO whose value function reads the env's global state (a centralized critic), whose policy reads only
the agent's own observation.

The learner asks the run for the global state (`state_source`: core/global_state.py), so its agents observe
`{"observation": ..., "state": ...}`. The policy that acts (published to the actor and the league) encodes only the
"observation" leaves; outside training (the evaluator, `pzasync eval`, `pzasync export`) it is built for the env
without the state (`acts_on_observation`), so acting never needs `env.state()`. The critic, kept by the learner and
saved in its checkpoints, encodes the "state" leaves, optionally with the agent's one-hot index in its agent group
(`agent_id`, so one shared critic can tell the members apart) and its own observation (`critic_obs`). With
`value_norm` the critic predicts returns standardised by their running mean and variance (as the MAPPO paper's value
normalisation does), so a value head need not chase the scale of team returns. Everything else (clipped objective,
GAE per track, masks, Discrete and Box actions, a recurrent policy with `memory="gru"`) is PPO's (ppo.py). The
critic is feed-forward by default: it reads the env's state, which (unlike one agent's observation) is meant to be
Markov. Where it is not (the "concat" fallback of partially observed agents, a state function that drops history),
`critic_memory=True` gives the critic a GRU of its own, trained on the recurrent policy's sequences from a memory
the learner carries per track (`critic_memory_pass`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from pzasync.config.declare import option
from pzasync.core.global_state import OBSERVATION_KEY, STATE_KEY, carries_state
from pzasync.core.spaces import AgentLayout
from pzasync.errors import ConfigError, UnsupportedSpaceError
from pzasync.learners.base import Batch, LearnerContext, trajectory_ids
from pzasync.learners.networks import Encoder, head_activation, mlp, obs_tensors
from pzasync.learners.options import Option, redeclare
from pzasync.learners.ppo import ActorCritic, DiagGaussian, Dist, PPOLearner, PPOOptions
from pzasync.learners.recurrent import Chunk, gru_core


class RunningNorm(nn.Module):
    """Running mean and variance of the value targets (every return seen), kept as buffers so checkpoints hold
    them; `normalize` and `denormalize` map returns to the critic's scale and back."""

    # buffers (`register_buffer`)
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def update(self, values: torch.Tensor) -> None:
        """Fold a batch of returns into the running moments (Chan et al.'s parallel update)."""
        x = values.detach().double()
        n, mean, var = float(x.numel()), x.mean(), x.var(unbiased=False)
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + var * n + delta.pow(2) * self.count * n / total) / total)
        self.count.copy_(total)

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        return ((values.double() - self.mean) / self.var.clamp_min(1e-8).sqrt()).to(values.dtype)

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        return (values.double() * self.var.clamp_min(1e-8).sqrt() + self.mean).to(values.dtype)


class CentralCritic(nn.Module):
    """V(state [, one-hot member index] [, own observation]) -> one value per row (normalised with value_norm);
    with `critic_memory` a GRU cell between those features and the value MLP, carrying `memory_size` floats."""

    def __init__(self, layout: AgentLayout, config: MAPPOOptions, members: int) -> None:
        super().__init__()
        self.state = Encoder(layout, config.torso, only=STATE_KEY, image_init=config.image_init)
        self.own = (Encoder(layout, config.torso, only=OBSERVATION_KEY, image_init=config.image_init)
                    if config.critic_obs else None)
        self.members = members if config.agent_id and members > 1 else 0
        width = self.state.out_dim + self.members + (self.own.out_dim if self.own is not None else 0)
        self.core = gru_core(width, config.memory_size) if config.critic_memory else None
        self.v = mlp(self.core.hidden_size if self.core is not None else width, config.critic_hidden, 1,
                     head_activation(config.activation, self.state, *([self.own] if self.own is not None else [])))
        self.norm = RunningNorm() if config.value_norm else None

    def features(self, obs: dict[str, torch.Tensor], member: torch.Tensor | None) -> torch.Tensor:
        """What the value MLP (or the core, with memory) reads: the encoded state, member id and own observation."""
        parts = [self.state(obs)]
        if self.members:
            if member is None:
                raise ValueError(f"the critic reads the member index of {self.members} group members: the batch has "
                                 f"no `member` field")
            parts.append(nn.functional.one_hot(member.long(), self.members).float())
        if self.own is not None:
            parts.append(self.own(obs))
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]

    def forward(self, obs: dict[str, torch.Tensor], member: torch.Tensor | None) -> torch.Tensor:
        """The values of a feed-forward critic (a recurrent one goes through `features`, `core` and `value`)."""
        return self.value(self.features(obs, member))

    def value(self, features: torch.Tensor) -> torch.Tensor:
        """The value MLP over features (or over the core's output, with memory): one value per row."""
        return self.v(features).squeeze(-1)


@dataclass(kw_only=True, eq=False)
class MAPPOOptions(PPOOptions):
    """PPO's options with a smaller chunk and a larger step, and the critic's (docs/learners.md, "MAPPO")."""

    lr: float = redeclare(PPOOptions, "lr", 1e-3)
    batch_size: int = redeclare(PPOOptions, "batch_size", 256)
    state: str = option("auto", "Where the global state comes from: 'auto', 'env', 'concat' or "
                                "'module:callable' (core/global_state.py).",
                        Option(str, what="'auto', 'env', 'concat' or 'module:callable'"))
    agent_id: bool = option(True, "In an agent group, the critic also reads the member's one-hot index.",
                            Option(bool))
    critic_obs: bool = option(False, "The critic also reads the agent's own observation.", Option(bool))
    critic_hidden: list[int] = option([128, 128], "Widths of the critic's hidden layers.",
                                      Option(list, item=Option(int, ge=1)))
    value_norm: bool = option(True, "The critic predicts returns standardised by their running mean and "
                                    "variance.", Option(bool))
    critic_memory: bool = option(False, "A GRU in the critic too (needs memory='gru': it trains on the "
                                        "policy's sequences).", Option(bool))

    def check_together(self, agent: str, learner: str) -> None:
        if self.critic_memory and self.memory != "gru":
            raise ConfigError(f"agent {agent!r}: {learner} option critic_memory=True needs memory='gru' (the "
                              f"critic trains on the recurrent policy's sequences); got memory={self.memory!r}")


class MAPPOLearner(PPOLearner):
    """PPO with a centralized critic over the global state (module docstring); options as PPO's, plus `state`,
    `agent_id`, `critic_obs`, `critic_hidden`, `value_norm` and `critic_memory` (docs/learners.md, "mappo")."""

    extras = {"log_prob": "float32"}
    acts_on_observation = True
    Options = MAPPOOptions
    config: MAPPOOptions

    def __init__(self, ctx: LearnerContext) -> None:
        super().__init__(ctx)
        self.critic = CentralCritic(ctx.layout, self.config, len(ctx.members)).to(self.device)
        self.optimizer = torch.optim.Adam(self.trainable(), lr=self.config.lr, eps=1e-5)
        #: With critic_memory: the critic's memory after each track's last row so far (zeros after an episode's
        #: end), where that track's next chunk goes on; and the memory entering / leaving each row of the chunk
        #: being trained (`critic_memory_pass`).
        self.critic_carry: dict[int, torch.Tensor] = {}
        self.critic_in: torch.Tensor | None = None
        self.critic_out: torch.Tensor | None = None

    @classmethod
    def state_source(cls, config: Mapping[str, Any]) -> str | None:
        return cls.checked("?", config).state

    @classmethod
    def check_spaces(cls, layout: AgentLayout) -> None:
        super().check_spaces(layout)
        if not carries_state(layout):
            raise UnsupportedSpaceError(
                f"agent {layout.agent!r}: mappo's critic reads the global state, but this agent's observations "
                f"({layout.obs_space}) do not carry it beside the observation; build the env through a run "
                f"(which adds it) or with EnvSpec.with_state")

    @classmethod
    def build_policy(cls, layout: AgentLayout, config: Mapping[str, Any]) -> ActorCritic:
        """The policy over the agent's own observation: the "observation" leaves where the layout carries the state
        beside it (training), the whole observation where it does not (the env without the state: evaluation,
        export). Both have the same parameters, so one checkpoint or policy vector fits either."""
        own = OBSERVATION_KEY if carries_state(layout) else None
        return ActorCritic(layout, cls.checked(layout.agent, config), observation_key=own, value_head=False)

    def _member(self, batch: Batch) -> torch.Tensor | None:
        if not self.critic.members:
            return None
        return torch.as_tensor(np.asarray(batch["member"]), device=self.device)

    def trainable(self) -> list[nn.Parameter]:
        critic = getattr(self, "critic", None)  # PPOLearner.__init__ asks before the critic exists
        return super().trainable() + (list(critic.parameters()) if critic is not None else [])

    def _returns_scale(self, values: torch.Tensor) -> np.ndarray:
        """Critic outputs as returns (float64): mapped back from the normalised scale with value_norm."""
        if self.critic.norm is not None:
            values = self.critic.norm.denormalize(values)
        return values.cpu().double().numpy()

    def values(self, batch: Batch, prefix: str) -> np.ndarray:
        with torch.no_grad():
            return self._returns_scale(self.critic(obs_tensors(batch, self.ctx.layout, prefix, self.device),
                                                   self._member(batch)))

    def critic_memory_pass(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """A recurrent critic's memory entering and leaving each row of an on-policy chunk (no gradient), each
        track run in order from where its previous chunk left it, restarted at zeros after every episode end.

        The actor never runs the critic, so unlike the policy's memory this one is not stored with the
        transitions: the learner carries it from chunk to chunk itself, computed with the critic as it was when
        that chunk was trained (as stale as the policy's stored memory is)."""
        n, core = len(batch["reward"]), self.critic.core
        if core is None:
            raise RuntimeError(f"agent {self.ctx.agent!r}: a critic without memory has no memory pass (critic_memory)")
        done = np.logical_or(batch["terminated"], batch["truncated"])
        track = trajectory_ids(batch)
        keys = [0] if track is None else [int(t) for t in np.unique(track)]
        trajectories = [np.arange(n)] if track is None else [np.flatnonzero(track == t) for t in keys]
        length = max(len(rows) for rows in trajectories)
        index = np.zeros((len(keys), length), np.int64)
        valid = np.zeros((len(keys), length), bool)
        for i, rows in enumerate(trajectories):
            index[i, :len(rows)], valid[i, :len(rows)] = rows, True
        zeros = torch.zeros(core.hidden_size, device=self.device)
        memory_in = torch.zeros((n, core.hidden_size), device=self.device)
        memory_out = torch.zeros_like(memory_in)
        with torch.no_grad():
            features = self.critic.features(obs_tensors(batch, self.ctx.layout, "obs", self.device),
                                            self._member(batch))
            h = torch.stack([self.critic_carry.get(key, zeros) for key in keys])
            for t in range(length):
                rows, live = index[:, t], valid[:, t]
                step = core(features[torch.as_tensor(rows, device=self.device)], h)
                memory_in[rows[live]], memory_out[rows[live]] = h[live], step[live]
                # a track past its last row keeps its memory; one whose episode ended here starts the next at zeros
                ended = torch.as_tensor(done[rows] & live, device=self.device)[:, None]
                h = torch.where(torch.as_tensor(live, device=self.device)[:, None],
                                torch.where(ended, torch.zeros_like(step), step), h)
        self.critic_carry.update({key: h[i] for i, key in enumerate(keys)})
        return memory_in, memory_out

    def value_pair(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        if self.critic.core is None:
            return super().value_pair(batch)
        self.critic_in, self.critic_out = self.critic_memory_pass(batch)
        with torch.no_grad():
            features = self.critic.features(obs_tensors(batch, self.ctx.layout, "next_obs", self.device),
                                            self._member(batch))
            following = self.critic.core(features, self.critic_out)
            return self._returns_scale(self.critic.value(self.critic_out)), \
                self._returns_scale(self.critic.value(following))

    def train_inputs(self, batch: Batch) -> dict[str, Any]:
        inputs = {**super().train_inputs(batch), "member": self._member(batch)}
        if self.critic.core is not None:
            inputs["critic_memory"] = self.critic_in
        return inputs

    def evaluate_rows(self, inputs: dict[str, Any], idx: torch.Tensor) -> tuple[Dist | DiagGaussian, torch.Tensor]:
        obs = {k: x[idx] for k, x in inputs["obs"].items()}
        mask, member = inputs["mask"], inputs["member"]
        dist = self.net.distribution(self.net.encoder(obs), None if mask is None else mask[idx])
        return dist, self.critic(obs, None if member is None else member[idx])

    def sequence_values(self, inputs: dict[str, Any], chunks: list[Chunk], idx: torch.Tensor,
                        after: torch.Tensor) -> torch.Tensor:
        member = inputs["member"]
        if self.critic.core is None:
            return self.critic({k: x[idx] for k, x in inputs["obs"].items()}, None if member is None else member[idx])

        def encode(obs: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
            return self.critic.features(obs, None if member is None else member[rows])

        _, outputs = self.sequence_pass(inputs, chunks, encode, self.critic.core, inputs["critic_memory"])
        return self.critic.value(outputs)

    def value_targets(self, returns: torch.Tensor) -> torch.Tensor:
        if self.critic.norm is None:
            return returns
        self.critic.norm.update(returns)
        return self.critic.norm.normalize(returns)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "critic": self.critic.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "critic" in state:
            self.critic.load_state_dict(state["critic"])
