"""Plug-in learners used by the tests, given to runners by dotted path like a user's own learner."""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from pzasync.learners import Learner, Policy


class FirstLegalPolicy(Policy):
    """Deterministic: the first legal action (0 without a mask). One dummy parameter so it has a slot."""

    def __init__(self) -> None:
        super().__init__()
        self.marker = torch.nn.Parameter(torch.zeros(1))

    def act(self, obs, mask, explore):
        batch = len(next(iter(obs.values())))
        if mask is None:
            return np.zeros(batch, dtype=np.int64), {}
        return mask.argmax(axis=1).astype(np.int64), {}


class RecordingLearner(Learner):
    """On-policy: saves every batch it gets (in order) to `record_dir`; can sleep or raise on demand."""

    on_policy = True
    defaults = {"batch_size": 8, "record_dir": None, "sleep_s": 0.0, "raise_after": None, "once_file": None,
                "kill_self_after": None, "pid_dir": None}

    def __init__(self, ctx):
        super().__init__(ctx)
        self._policy = self.build_policy(ctx.layout, self.config)
        self.calls = 0
        if self.config["pid_dir"]:  # one line per life of this learner: the process it was built in
            with open(os.path.join(self.config["pid_dir"], f"{ctx.agent}.pids"), "a") as f:
                f.write(f"{os.getpid()}\n")

    @classmethod
    def build_policy(cls, layout, config):
        return FirstLegalPolicy()

    @property
    def policy(self):
        return self._policy

    def _misbehave_now(self) -> bool:
        """With `once_file`, only the first life of this learner misbehaves (the marker survives restarts)."""
        marker = self.config["once_file"]
        if marker is None:
            return True
        if os.path.exists(marker):
            return False
        open(marker, "w").close()
        return True

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        self.calls += 1
        if self.config["raise_after"] is not None and self.calls > self.config["raise_after"] and self._misbehave_now():
            raise RuntimeError(f"deliberate failure in update {self.calls}")
        if self.config["kill_self_after"] is not None and self.calls > self.config["kill_self_after"] \
                and self._misbehave_now():
            os.kill(os.getpid(), 9)
        if self.config["sleep_s"] and self._misbehave_now():
            time.sleep(self.config["sleep_s"])
        if self.config["record_dir"]:
            path = os.path.join(self.config["record_dir"], f"{self.ctx.agent}-{self.calls:06d}.npz")
            np.savez(path, **batch)
        with torch.no_grad():
            self._policy.marker += 1
        return {"rows": float(len(batch["reward"]))}


class BrokenLearner(RecordingLearner):
    """Fails while it is being built, before it can publish a first policy."""

    def __init__(self, ctx):
        raise RuntimeError("deliberate failure while building the learner")


class KeysLearner(Learner):
    """Off-policy: writes the sorted keys and shapes of each batch it receives to `record_dir`."""

    on_policy = False
    extras = {"score": "float32"}
    defaults = {"batch_size": 4, "learning_starts": 4, "record_dir": None}

    def __init__(self, ctx):
        super().__init__(ctx)
        self._policy = self.build_policy(ctx.layout, self.config)

    @classmethod
    def build_policy(cls, layout, config):
        return ScoringPolicy()

    @property
    def policy(self):
        return self._policy

    def update(self, batch):
        path = os.path.join(self.config["record_dir"], f"{self.ctx.agent}-keys.txt")
        with open(path, "w") as f:
            for key in sorted(batch):
                f.write(f"{key} {batch[key].dtype} {batch[key].shape}\n")
        return {"n": float(len(batch["reward"]))}


class ScoringPolicy(FirstLegalPolicy):
    def act(self, obs, mask, explore):
        actions, _ = super().act(obs, mask, explore)
        return actions, {"score": np.full(len(actions), 0.5, np.float32)}
