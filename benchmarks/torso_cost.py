"""Cost of DQN's observation torsos on connect four: act (batch 1) and forward+backward (batch 64).

    python benchmarks/torso_cost.py

One torch thread, as in a learner process on 2 cores; the second of two rounds is reported.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from pzasync.core.environments import make_env
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.learners.dqn import DQNLearner, QNetwork


def main() -> None:
    torch.set_num_threads(1)
    env = make_env("pettingzoo.classic.connect_four_v3")
    layout = env_layouts(env, probe_info_masks(env))["player_0"]
    batch = {"obs": torch.zeros(64, 6, 7, 2, dtype=torch.int8)}
    single, mask = {"obs": np.zeros((1, 6, 7, 2), np.int8)}, np.ones((1, 7), bool)
    for torso in ("mlp", "cnn"):
        q = QNetwork(layout, DQNLearner.validate_config("player_0", {"torso": torso}))
        optimizer = torch.optim.Adam(q.parameters())
        for _ in range(2):
            start = time.perf_counter()
            for _ in range(300):
                q.act(single, mask, False)
            act = (time.perf_counter() - start) / 300
            start = time.perf_counter()
            for _ in range(200):
                loss = q(batch).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            update = (time.perf_counter() - start) / 200
        params = sum(p.numel() for p in q.parameters())
        print(f"{torso}: {params:,} parameters, act {act * 1e3:.3f} ms, forward+backward {update * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
