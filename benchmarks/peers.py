"""Collection throughput on connect_four_v3: pzasync against Tianshou and TorchRL (optional peers).

What it measures: agent steps per second while acting with exploring (epsilon-greedy) per-agent Q-policies
and storing what is collected, with no training: Tianshou's `Collector`, TorchRL's `SyncDataCollector`,
and pzasync's `AsyncRunner` (DQN learners with `learning_starts=10**9`: the learner processes exist but
never update, so this is pure collection into the shared buffers). `pzasync.bench.bare_loop` (random legal
actions, no policy, no storage) is reported as the env's own limit.

Run: /tmp/peers/bin/python benchmarks/peers.py [--steps N] [--repeats R] [--vector-envs K] [--json FILE]
(a virtualenv that has tianshou / torchrl; a missing peer is skipped with the reason). Each library is
measured R times, interleaved (A, B, C, A, B, C, ...) so drifts in machine speed hit all alike; a warm-up
of a few hundred steps per library is not timed. One acting process each, `torch.set_num_threads(1)`.

Same network: every agent of every library acts with pzasync's DQN network, the observation (6x7x2 int8)
flattened to 84 floats -> Linear(84,128) ReLU Linear(128,128) ReLU Linear(128,7) (28,295 parameters), with
illegal actions masked out of the argmax and of the random draws. One agent decision = one agent step:
Tianshou's `PettingZooEnv.step` and TorchRL's AEC `PettingZooWrapper._step` each make exactly one
`AECEnv.step` (one agent's turn) per env step, as pzasync counts one decision per step (checked: a
2,000-frame TorchRL batch held 2,000 acting-player entries, a 2,000-step Tianshou buffer 2,000 transitions,
none of them an illegal move).

Caveats: peers use a constant epsilon (EPS), pzasync its default schedule (1.0 -> 0.05 over 20k steps per
agent); every library runs the forward pass at every decision either way, so this only changes which
random draws happen. TorchRL runs every group's policy on every env step (both players' networks, the idle
one on a dummy observation), as its multi-group modules do. Tianshou's Collector does not disable autograd
by itself; it is run under `torch.no_grad()` here (TorchRL's collector does that itself, pzasync acts under
`inference_mode`). pzasync's idle learner processes still run (polling) beside the actor; on a machine with
few cores they compete with it. Peers store into their own buffers (Tianshou's VectorReplayBuffer, TorchRL's
batch tensordict). The "vectorised" Tianshou row steps K envs in one process with batched forwards: it is
not comparable one-to-one with pzasync's single actor and is listed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn

ENV = "pettingzoo.classic.connect_four_v3"
EPS = 0.5  # peers' constant epsilon (pzasync's default schedule averages ~0.5 over 10k steps per agent)
WARMUP = 500
CHUNK = 500  # TorchRL frames per batch; budgets are rounded to whole chunks / whole vector steps
Measure = Callable[[int], float]  # agent steps requested -> agent steps per second


class QMLP(nn.Module):
    """pzasync's DQN network for connect_four: flatten the 6x7x2 board to 84 floats, then 128-128-7."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(84, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 7))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.flatten(-3).float())


class TianshouQNet(QMLP):
    """The same network with Tianshou's model signature: (obs, state, info) -> (q-values, state)."""

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:  # type: ignore[override]
        return super().forward(torch.as_tensor(obs)), state


def setup_tianshou(envs: int) -> tuple[Measure, str]:
    """MultiAgentPolicy of one DiscreteQLearningPolicy per player, Collector over a DummyVectorEnv."""
    import logging

    import tianshou
    from pettingzoo.classic import connect_four_v3
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.multiagent.marl import MultiAgentPolicy
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv, PettingZooEnv

    logging.getLogger("tianshou.data.stats").setLevel(logging.ERROR)  # per-collect "1D sequences" notes

    probe = PettingZooEnv(connect_four_v3.env())
    # The mask reaches both the argmax (compute_q_value) and the random draws (add_exploration_noise) as
    # batch.obs.mask, which PettingZooEnv fills from the env's action_mask.
    policy = MultiAgentPolicy({agent: DiscreteQLearningPolicy(
        model=TianshouQNet(), action_space=probe.action_space, eps_training=EPS, eps_inference=EPS)
        for agent in probe.agents})
    venv = DummyVectorEnv([lambda: PettingZooEnv(connect_four_v3.env()) for _ in range(envs)])
    venv.seed(0)
    collector = Collector(policy, venv, VectorReplayBuffer(100_000, envs), exploration_noise=True,
                          raise_on_nan_in_buffer=False)
    collector.reset()

    def measure(steps: int) -> float:
        with torch.no_grad():
            start = time.perf_counter()
            stats = collector.collect(n_step=max(envs, steps // envs * envs))
            return stats.n_collected_steps / (time.perf_counter() - start)

    measure(WARMUP)
    return measure, tianshou.__version__


def setup_torchrl() -> tuple[Measure, str]:
    """Per-group TensorDictModule(MLP) -> QValueModule -> EGreedyModule, SyncDataCollector."""
    import torchrl
    from pettingzoo.classic import connect_four_v3
    from tensordict.nn import TensorDictModule, TensorDictSequential
    try:
        from torchrl.collectors import SyncDataCollector
    except ImportError:  # 0.14 renamed it; the single-process collector is now `Collector`
        from torchrl.collectors import Collector as SyncDataCollector
    from torchrl.envs import PettingZooWrapper
    from torchrl.modules import EGreedyModule, QValueModule

    # AEC env: use_mask=True is required; the default group_map is one group per player.
    env = PettingZooWrapper(connect_four_v3.env(), use_mask=True, seed=0)
    modules: list[nn.Module] = []
    for group in env.group_map:
        spec = env.full_action_spec[group, "action"]
        mask = (group, "action_mask")  # the acting player's legal moves (all True for the idle one)
        modules += [
            TensorDictModule(QMLP(), in_keys=[(group, "observation", "observation")],
                             out_keys=[(group, "action_value")]),
            QValueModule(action_space="categorical", action_value_key=(group, "action_value"), action_mask_key=mask,
                         out_keys=[(group, "action"), (group, "action_value"), (group, "chosen_action_value")]),
            EGreedyModule(spec, eps_init=EPS, eps_end=EPS, action_key=(group, "action"), action_mask_key=mask),
        ]
    policy = TensorDictSequential(*modules)
    collector = SyncDataCollector(env, policy, frames_per_batch=CHUNK, total_frames=-1)
    batches = iter(collector)

    def measure(steps: int) -> float:
        start, done = time.perf_counter(), 0
        for _ in range(max(1, steps // CHUNK)):
            done += next(batches).numel()  # one frame per env step = one agent decision
        return done / (time.perf_counter() - start)

    measure(WARMUP)
    return measure, torchrl.__version__


def setup_pzasync() -> tuple[Measure, str]:
    """AsyncRunner with idle DQN learners: the actor's acting-time throughput (startup excluded)."""
    import pzasync
    from pzasync import AsyncRunner, RunConfig

    idle = ("dqn", {"learning_starts": 10**9})

    def measure(steps: int) -> float:
        return AsyncRunner(ENV, idle, RunConfig(seed=0)).run(agent_steps=steps).actor_steps_per_second

    measure(WARMUP)
    return measure, getattr(pzasync, "__version__", "?")


def setup_bare() -> tuple[Measure, str]:
    """pzasync.bench.bare_loop: the env alone with random legal actions (the env's own limit)."""
    from pzasync.bench import bare_loop

    measure: Measure = lambda steps: bare_loop(ENV, None, steps)
    measure(WARMUP)
    return measure, "-"


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="agent steps per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per library (interleaved)")
    parser.add_argument("--vector-envs", type=int, default=8, help="also Tianshou over K envs (0: off)")
    parser.add_argument("--json", help="write raw numbers, versions and settings here")
    args = parser.parse_args()
    torch.set_num_threads(1)

    setups: dict[str, Callable[[], tuple[Measure, str]]] = {
        "pzasync": setup_pzasync, "tianshou": lambda: setup_tianshou(1), "torchrl": setup_torchrl,
        "env alone (bare_loop, random)": setup_bare,
    }
    if args.vector_envs > 1:
        setups[f"tianshou vectorised (DummyVectorEnv x{args.vector_envs})"] = lambda: setup_tianshou(args.vector_envs)
    measures: dict[str, Measure] = {}
    import pettingzoo

    versions: dict[str, str] = {"torch": torch.__version__, "pettingzoo": pettingzoo.__version__}
    skipped: dict[str, str] = {}
    for name, setup in setups.items():
        try:
            with warnings.catch_warnings():  # peers' deprecation / version notices while importing and building
                warnings.simplefilter("ignore")
                measures[name], version = setup()
            if version != "-":
                versions.setdefault(name.split(" ")[0], version)
        except Exception as exc:  # a missing or broken peer is reported, never fatal
            skipped[name] = f"{type(exc).__name__}: {exc}"
            print(f"skipping {name}: {skipped[name]}", flush=True)

    raw: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(args.repeats):
        for name, measure in measures.items():
            raw[name].append(measure(args.steps))

    table = {name: summary(values) for name, values in raw.items()}
    base = table.get("pzasync", {}).get("median")
    print(f"\nconnect_four_v3, {args.steps} agent steps x {args.repeats}, agent steps/s (one acting process)")
    print(f"{'library':<42}{'median':>10}{'min':>10}{'max':>10}{'/pzasync':>10}")
    for name, row in table.items():
        ratio = f"{row['median'] / base:.2f}" if base else "-"
        print(f"{name:<42}{row['median']:>10,.0f}{row['min']:>10,.0f}{row['max']:>10,.0f}{ratio:>10}")
    for name, why in skipped.items():
        print(f"{name:<42}skipped ({why})")
    if args.json:
        out = {"env": ENV, "settings": {"steps": args.steps, "repeats": args.repeats, "warmup": WARMUP,
                                        "peer_epsilon": EPS, "vector_envs": args.vector_envs,
                                        "torch_threads": 1, "cpus": os.cpu_count()},
               "versions": versions, "raw": raw, "summary": table, "skipped": skipped,
               "ratio_to_pzasync": {n: r["median"] / base for n, r in table.items()} if base else {}}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
