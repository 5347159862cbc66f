"""Envs that misbehave on purpose, for fault-injection tests."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from scripted_env import ScriptedEnv


class CrashingEnv(ScriptedEnv):
    """The scripted two-player env, whose step raises at the `crash_at`-th live step of the run."""

    metadata = {"name": "crashing_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, crash_at: int = 200) -> None:
        super().__init__()
        self.crash_at = crash_at
        self.live_steps = 0

    def step(self, action):
        if action is not None:
            self.live_steps += 1
            if self.live_steps == self.crash_at:
                raise ValueError(f"physics exploded at live step {self.live_steps}")
        super().step(action)


class NaNEnv(ScriptedEnv):
    """Every third observation of p0 contains a NaN."""

    def observe(self, agent):
        obs = super().observe(agent)
        if agent == "p0" and self.decisions["p0"] % 3 == 2:
            obs = obs.copy()
            obs[0] = np.nan
        return obs


class TextObsEnv(ScriptedEnv):
    """An observation space pzasync cannot store."""

    def __init__(self) -> None:
        super().__init__()
        self._obs_space = spaces.Text(8)


class StallingEnv(ScriptedEnv):
    """One step, the `stall_at`-th live one, takes `seconds` to return."""

    def __init__(self, stall_at: int = 100, seconds: float = 3.0) -> None:
        super().__init__()
        self.stall_at, self.seconds, self.live_steps = stall_at, seconds, 0

    def step(self, action):
        if action is not None:
            self.live_steps += 1
            if self.live_steps == self.stall_at:
                import time

                time.sleep(self.seconds)
        super().step(action)
