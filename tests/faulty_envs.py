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


def crash_in_seeded_copy(bad_seed: int = 3):
    """connect_four whose step raises KeyError at player_1's turn in the copy first reset with `bad_seed`."""
    from pettingzoo.classic import connect_four_v3
    from pettingzoo.utils import BaseWrapper

    class CrashInSeededCopy(BaseWrapper):
        def __init__(self):
            super().__init__(connect_four_v3.env())
            self.seed_seen = None

        def reset(self, seed=None, options=None):
            self.seed_seen = seed if seed is not None else self.seed_seen
            super().reset(seed=seed, options=options)

        def step(self, action):
            if self.seed_seen == bad_seed and self.agent_selection == "player_1":
                raise KeyError("boom in a worker")
            super().step(action)

    return CrashInSeededCopy()


def hanging_connect_four():
    """connect_four whose step never returns."""
    import time

    from pettingzoo.classic import connect_four_v3
    from pettingzoo.utils import BaseWrapper

    class Hanging(BaseWrapper):
        def step(self, action):
            time.sleep(3600)

    return Hanging(connect_four_v3.env())


def leaky_connect_four(leak: bool):
    """connect_four whose `rewards` pays one point too many on its first live step when `leak`."""
    from pettingzoo.classic import connect_four_v3
    from pettingzoo.utils import BaseWrapper

    class Leaky(BaseWrapper):
        leaked = False

        def step(self, action):
            super().step(action)
            if leak and not self.leaked and action is not None:
                self.leaked = True
                self.unwrapped.rewards[self.possible_agents[0]] = 1.0

    return Leaky(connect_four_v3.env())


class CrashesInSecondActor(CrashingEnv):
    """Crashes at its `crash_at`-th live step, but only in the process of actor 1 (RunConfig.actors)."""

    def step(self, action):
        import multiprocessing

        if multiprocessing.current_process().name == "pzasync-actor-1":
            super().step(action)
        else:
            ScriptedEnv.step(self, action)


class SlowToBuildInActorProcesses(ScriptedEnv):
    """The scripted env, whose construction takes `build_s` seconds in an actor process (RunConfig.actors, not
    actor 0). On close it writes, into `log_dir`, when its process made its first and last live step."""

    def __init__(self, log_dir: str, build_s: float = 1.5) -> None:
        import multiprocessing
        import time

        super().__init__()
        self.log_dir, self.steps_at = log_dir, []
        if multiprocessing.current_process().name.startswith("pzasync-actor-"):
            time.sleep(build_s)

    def step(self, action):
        import time

        if action is not None:
            now = time.time()
            self.steps_at = [self.steps_at[0] if self.steps_at else now, now]
        super().step(action)

    def close(self):
        import json
        import multiprocessing
        import os

        if self.steps_at:
            with open(os.path.join(self.log_dir, f"{os.getpid()}-{id(self)}.json"), "w") as f:
                json.dump({"process": multiprocessing.current_process().name, "first": self.steps_at[0],
                           "last": self.steps_at[-1]}, f)
        super().close()
