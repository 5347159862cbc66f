"""A custom learner in ~50 lines: a bandit-style learner that plays rock-paper-scissors against a biased player.

Run: python examples/custom_learner.py [--steps N]
The learner (player_0) keeps one preference per action and moves it towards the rewards it gets; the
opponent (player_1) is a fixed policy that plays rock half of the time, so paper should win out.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import torch

from pzasync import AsyncRunner, Learner, LearnerOptions, Option, Policy, RunConfig, option


class GreedyPolicy(Policy):
    """Epsilon-greedy over learned preferences; the preferences are what the learner publishes."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.prefs = torch.nn.Parameter(torch.zeros(n_actions))
        self.rng = np.random.default_rng(0)

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs, mask, explore):
        batch = len(obs["obs"])
        actions = np.tile(self.prefs.detach().numpy().argmax(), batch)
        if explore:
            random = self.rng.random(batch) < 0.2
            actions[random] = self.rng.integers(len(self.prefs), size=int(random.sum()))
        return actions, {}


@dataclass(kw_only=True, eq=False)
class BanditOptions(LearnerOptions):
    """Each option once: its default, its doc and its rule (checked before any process starts)."""

    lr: float = option(0.05, "Step of a preference towards each reward.", Option(float, gt=0, le=1))
    batch_size: int = option(32, "Rows per update.", Option(int, ge=1))
    learning_starts: int = option(32, "Transitions before the first update.", Option(int, ge=0))


class BanditLearner(Learner):
    on_policy = False
    Options = BanditOptions

    def __init__(self, ctx):
        super().__init__(ctx)
        self._policy = self.build_policy(ctx.layout, self.config)

    @classmethod
    def build_policy(cls, layout, config):
        return GreedyPolicy(int(layout.action_space.n))

    @property
    def policy(self):
        return self._policy

    def update(self, batch):
        with torch.no_grad():
            for action, reward in zip(batch["action"], batch["reward"]):
                self._policy.prefs[action] += self.config.lr * (reward - self._policy.prefs[action])
        return {"mean_reward": float(batch["reward"].mean())}


class RockHeavyPolicy(Policy):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(1)

    def act(self, obs, mask, explore):
        batch = len(obs["obs"])
        return np.where(self.rng.random(batch) < 0.5, 0, self.rng.integers(3, size=batch)), {}


class RockHeavyPlayer(Learner):
    learns = False
    defaults: dict = {}

    @classmethod
    def build_policy(cls, layout, config):
        return RockHeavyPolicy()

    @property
    def policy(self):
        raise NotImplementedError

    def update(self, batch):
        raise NotImplementedError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    # Learners are given by dotted path so the spawned learner process can import them.
    learners = {"player_0": "custom_learner:BanditLearner", "player_1": "custom_learner:RockHeavyPlayer"}
    result = AsyncRunner("pettingzoo.classic.rps_v2", learners, RunConfig(seed=0)).run(agent_steps=args.steps)
    me = result.agents["player_0"]
    first, last = np.mean(me.episode_returns[:5]), np.mean(me.episode_returns[-5:])
    print(f"{result.episodes} episodes, {me.updates} updates, published version {me.published_version}")
    print(f"player_0 mean episode return: first 5 episodes {first:+.2f}, last 5 {last:+.2f}")


if __name__ == "__main__":
    main()
