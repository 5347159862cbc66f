"""Throughput on connect_four_v3: pzasync against Tianshou and TorchRL collecting, or RLlib training PPO.

What it measures: agent steps per second while acting with exploring (epsilon-greedy) per-agent Q-policies
and storing what is collected, with no training: Tianshou's `Collector`, TorchRL's `SyncDataCollector`,
and pzasync's `AsyncRunner` (DQN learners with `learning_starts=10**9`: the learner processes exist but
never update, so this is pure collection into the shared buffers). `pzasync.bench.harness.bare_loop` (random legal
actions, no policy, no storage) is reported as the env's own limit.

Run: /tmp/peers/bin/python benchmarks/peers.py [--steps N] [--repeats R] [--vector-envs K] [--pzasync-envs N]
[--json FILE]
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

Vectorised rows: "tianshou vectorised" steps K envs in one process with batched forwards; "pzasync
vectorised" is pzasync's actor over N env copies (RunConfig.envs_per_actor) with one batched forward per
agent and round. simple_spread (--simple-spread; instead of the rows above): the three agents share one PPO
policy, and both libraries collect without training over K env copies in one process: SB3's PPO
`collect_rollouts` (MlpPolicy, pi and vf 64-64 tanh) on SuperSuit's `pettingzoo_env_to_vec_env_v1` +
`concat_vec_envs_v1` (each VecEnv slot one agent of one copy), against pzasync's AsyncRunner with the agents
in one group and a PPO learner of the same network whose batch size is never reached. One VecEnv slot step
or one pzasync decision is one agent step.

Training (--training; instead of the collection rows above): agent steps per second while training PPO with
one policy per agent, RLlib against pzasync. Run: /tmp/rllib-venv/bin/python benchmarks/peers.py --training
[--steps N] [--repeats R] [--rllib-env-runners E] [--json FILE] (a virtualenv with ray[rllib], torch and
pzasync; a missing peer is skipped with the reason). Both sides use the same PPO settings (PPO_OPTIONS: lr
3e-4, gamma 0.99, GAE lambda 0.95, clip 0.2, 4 epochs of minibatches of 64, value coefficient 0.5, entropy
0.01, gradient norm 0.5) and the same networks per agent: the board flattened to 84 floats, a policy MLP
84-128-128-7 and a separate value MLP 84-128-128-1, ReLU (pzasync's PPO with torso="mlp"; RLlib's default
PPO module with fcnet_hiddens=[128, 128], fcnet_activation="relu", vf_share_layers=False), with illegal moves
masked out of the policy's logits on both sides.
- RLlib: `PPO` (new API stack), ray.init(num_cpus=2) with its temp dir under /tmp (removed afterwards) and
  ray.shutdown() at the end. The env is `ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv` (the AEC
  wrapper: one `AECEnv.step` per `step()`, i.e. per agent turn) over connect_four_v3, each observation
  reshaped to {"observations": 84 float32, "action_mask": 7 float32} for RLlib's action-masking example
  module (`ActionMaskingTorchRLModule`: the default PPO torch module, plus log(mask) added to the logits when
  acting and training; the plain module would see the 6x7x2 board as an image and build a CNN, and could not
  use the mask). One RLModule per agent (player_0 -> module "player_0", player_1 -> "player_1"); E env
  runners of one env each (default 1: sampling in one runner process, the update in the driver process,
  num_learners=0; the two cores); train_batch_size_per_learner=TRAIN_BATCH env steps per `train()` (about
  512 per agent). Measured: the env steps sampled (num_env_steps_sampled_lifetime) by N // TRAIN_BATCH whole
  `algo.train()` iterations (sampling, updates and weight sync) over their wall time, after one untimed
  warm-up iteration. Env steps, because each is exactly one agent decision here, whereas RLlib's
  num_agent_steps_sampled counts observations received, one more per episode than decisions (the terminal
  observation of the player who did not move last: checked, 1,024 env steps = 1,072 "agent steps" over 48
  episodes). The JSON notes keep both counts, and episode_return_min (0.0: no illegal move ended a game).
- pzasync: `AsyncRunner` with a `ppo` learner per agent (two learner processes beside the actor, on-policy
  chunks of 512 transitions per agent): RunResult.agent_steps / acting_seconds, as in the collection rows
  (startup excluded; a learner's last chunk may still be in progress when the budget is reached). A first
  run of TRAIN_BATCH steps is the untimed warm-up.
Caveats: RLlib alternates sampling and updating (a `train()` samples, then learns, then syncs weights), so its
two processes mostly take turns; pzasync's learners update while the actor goes on acting (policy lag is
corrected by the importance ratio). Ray's own processes (GCS, raylet, the idle env runner) stay up while the
pzasync rows are measured in between. The two sides' PPO implementations differ in details (RLlib's value
clipping and KL term at their defaults; pzasync's small initial policy layer), which cost little next to
acting and the env.
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
# --training: PPO settings shared by both sides (pzasync option names; RLlib's are mapped in setup_rllib).
PPO_OPTIONS: dict[str, Any] = {
    "lr": 3e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip": 0.2, "epochs": 4, "minibatch_size": 64,
    "batch_size": 512, "vf_coef": 0.5, "ent_coef": 0.01, "max_grad_norm": 0.5,
    "hidden": [128, 128], "activation": "relu", "torso": "mlp",
}
TRAIN_BATCH = 1024  # RLlib env steps (= agent decisions, both players) per train() iteration
TEARDOWN: list[Callable[[], None]] = []  # run by main() at the end, whatever happened (ray.shutdown)
NOTES: dict[str, Any] = {}  # per-library extras for the JSON file


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


def setup_pzasync(envs: int = 1) -> tuple[Measure, str]:
    """AsyncRunner with idle DQN learners (the MLP torso: the peers' network), `envs` env copies per actor:
    the actor's acting-time throughput (startup excluded)."""
    import pzasync
    from pzasync import AsyncRunner, RunConfig

    idle = ("dqn", {"learning_starts": 10**9, "torso": "mlp"})

    def measure(steps: int) -> float:
        runner = AsyncRunner(ENV, idle, RunConfig(seed=0, envs_per_actor=envs))
        return runner.run(agent_steps=steps).actor_steps_per_second

    measure(WARMUP)
    return measure, getattr(pzasync, "__version__", "?")


def setup_pzasync_ppo() -> tuple[Measure, str]:
    """AsyncRunner with a PPO learner per agent: agent steps over acting seconds (startup excluded)."""
    import pzasync
    from pzasync import AsyncRunner, RunConfig

    def measure(steps: int) -> float:
        result = AsyncRunner(ENV, ("ppo", PPO_OPTIONS), RunConfig(seed=0)).run(agent_steps=steps)
        NOTES.setdefault("pzasync PPO", []).append(
            {"agent_steps": result.agent_steps, "acting_seconds": result.acting_seconds,
             "wall_seconds": result.wall_seconds, "updates": {a: r.updates for a, r in result.agents.items()},
             "transitions_dropped": {a: r.transitions_dropped for a, r in result.agents.items()}})
        return result.agent_steps / result.acting_seconds

    measure(TRAIN_BATCH)
    NOTES.pop("pzasync PPO", None)  # the warm-up run
    return measure, getattr(pzasync, "__version__", "?")


SPREAD = "mpe2.simple_spread_v3"  # --simple-spread: 3 agents, Discrete(5) actions, 18-float observations, 25 cycles
SPREAD_NET = {"hidden": [64, 64], "activation": "tanh"}  # SB3's MlpPolicy default for PPO: pi and vf 64-64 tanh


def setup_pzasync_spread(copies: int) -> tuple[Measure, str]:
    """simple_spread, the three agents in one group (one shared PPO policy), `copies` env copies per actor;
    a batch size no run reaches, so the learner never updates: collection only, as the SB3 row."""
    import pzasync
    from pzasync import AsyncRunner, RunConfig

    learner = ("ppo", {**SPREAD_NET, "torso": "mlp", "batch_size": 200_000, "minibatch_size": 64})
    config = RunConfig(seed=0, envs_per_actor=copies, agent_groups={"agents": ["agent_*"]},
                       onpolicy_buffer_batches=1)

    def measure(steps: int) -> float:
        return AsyncRunner(SPREAD, {"agents": learner}, config).run(agent_steps=steps).actor_steps_per_second

    measure(WARMUP)
    return measure, getattr(pzasync, "__version__", "?")


def setup_sb3_spread(copies: int) -> tuple[Measure, str]:
    """Stable-Baselines3 PPO (MlpPolicy) collecting rollouts on SuperSuit's vector env: simple_spread's parallel
    env as one VecEnv of 3 agents (one shared policy), `copies` of it concatenated, stepped in this process."""
    import stable_baselines3
    import supersuit as ss
    from mpe2 import simple_spread_v3
    from stable_baselines3 import PPO

    env = ss.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env(continuous_actions=False))
    env = ss.concat_vec_envs_v1(env, copies, num_cpus=0, base_class="stable_baselines3")
    model = PPO("MlpPolicy", env, n_steps=64, device="cpu", verbose=0,  # no seed=: ConcatVecEnv has no seed()
                policy_kwargs={"net_arch": {"pi": SPREAD_NET["hidden"], "vf": SPREAD_NET["hidden"]},
                               "activation_fn": nn.Tanh})
    _, callback = model._setup_learn(10**9, callback=None)
    per_collect = model.n_steps * env.num_envs  # agent steps: each VecEnv slot is one agent of one copy

    def measure(steps: int) -> float:
        start, done = time.perf_counter(), 0
        while done < steps:
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)
            done += per_collect
        return done / (time.perf_counter() - start)

    measure(WARMUP)
    return measure, stable_baselines3.__version__


def setup_rllib(env_runners: int) -> tuple[Measure, str]:
    """RLlib PPO, one RLModule per agent (action-masking PPO module), over PettingZooEnv(connect_four_v3)."""
    import logging
    import shutil
    import tempfile

    import gymnasium as gym
    import numpy as np
    import ray

    def quiet() -> None:  # RLlib's deprecation and new-API-stack notices (its imports and ray.init reset levels)
        for name in ("ray", "ray.rllib"):
            logging.getLogger(name).setLevel(logging.ERROR)

    quiet()
    from pettingzoo.classic import connect_four_v3
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule
    from ray.tune.registry import register_env

    class MaskedConnectFour(PettingZooEnv):
        """PettingZooEnv with each observation as the action-masking module wants it: {"observations": the
        board flattened to 84 float32, "action_mask": 7 float32}. Steps are PettingZooEnv's own (one AEC step
        per agent turn)."""

        def __init__(self) -> None:
            super().__init__(connect_four_v3.env())
            def box(n: int) -> gym.spaces.Box:
                return gym.spaces.Box(0.0, 1.0, (n,), np.float32)

            self.observation_spaces = {a: gym.spaces.Dict({"observations": box(84), "action_mask": box(7)})
                                       for a in self._agent_ids}
            self.observation_space = gym.spaces.Dict(self.observation_spaces)

        @staticmethod
        def _masked(obs: dict[str, Any]) -> dict[str, Any]:
            return {a: {"observations": o["observation"].reshape(-1).astype(np.float32),
                        "action_mask": o["action_mask"].astype(np.float32)} for a, o in obs.items()}

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
            obs, infos = super().reset(seed=seed, options=options)
            return self._masked(obs), infos

        def step(self, action: dict[str, Any]) -> Any:
            obs, *rest = super().step(action)
            return (self._masked(obs), *rest)

    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's unix socket paths live under it

    def teardown() -> None:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)

    TEARDOWN.append(teardown)
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False,
             logging_level=logging.ERROR)
    quiet()
    register_env("pzasync_peers_connect_four", lambda _: MaskedConnectFour())
    agents = ["player_0", "player_1"]
    o = PPO_OPTIONS
    model = {"fcnet_hiddens": o["hidden"], "fcnet_activation": o["activation"], "vf_share_layers": False}
    config = (
        PPOConfig()
        .environment("pzasync_peers_connect_four")
        .framework("torch")
        .env_runners(num_env_runners=env_runners, num_envs_per_env_runner=1)
        .learners(num_learners=0)  # the update runs in this (the driver) process
        .multi_agent(policies=set(agents), policy_mapping_fn=lambda agent_id, *_, **__: agent_id)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={
            a: RLModuleSpec(module_class=ActionMaskingTorchRLModule, model_config=model) for a in agents}))
        .training(train_batch_size_per_learner=TRAIN_BATCH, minibatch_size=o["minibatch_size"],
                  num_epochs=o["epochs"], lr=o["lr"], gamma=o["gamma"], lambda_=o["gae_lambda"],
                  clip_param=o["clip"], vf_loss_coeff=o["vf_coef"], entropy_coeff=o["ent_coef"],
                  grad_clip=o["max_grad_norm"])
        .debugging(seed=0)
    )
    algo = config.build_algo()
    TEARDOWN.insert(TEARDOWN.index(teardown), algo.stop)  # stop the algorithm (its env runners) first

    def counts(result: dict[str, Any]) -> tuple[float, float, float]:
        runners = result["env_runners"]
        return (float(runners["num_env_steps_sampled_lifetime"]),
                float(sum(runners["num_agent_steps_sampled_lifetime"].values())),
                float(runners.get("num_episodes_lifetime", 0)))

    last = counts(algo.train())  # warm-up iteration, not timed

    def measure(steps: int) -> float:
        nonlocal last
        start = time.perf_counter()
        for _ in range(max(1, steps // TRAIN_BATCH)):
            result = algo.train()
        seconds = time.perf_counter() - start
        now = counts(result)
        env_steps, agent_steps, episodes = (b - a for a, b in zip(last, now))
        last = now
        NOTES.setdefault("rllib PPO", []).append(
            {"env_steps": env_steps, "rllib_agent_steps": agent_steps, "episodes": episodes, "seconds": seconds,
             "episode_return_min": float(result["env_runners"].get("episode_return_min", float("nan")))})
        return env_steps / seconds

    return measure, ray.__version__


def setup_bare() -> tuple[Measure, str]:
    """pzasync.bench.harness.bare_loop: the env alone with random legal actions (the env's own limit)."""
    from pzasync.bench.harness import bare_loop

    def measure(steps: int) -> float:
        return bare_loop(ENV, None, steps)

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
    parser.add_argument("--training", action="store_true",
                        help="instead: PPO training throughput, RLlib against pzasync (see the module docstring)")
    parser.add_argument("--pzasync-envs", type=int, default=16,
                        help="also pzasync's actor over this many env copies (0 or 1: off)")
    parser.add_argument("--simple-spread", action="store_true",
                        help="instead: simple_spread, one shared policy, pzasync against SB3 + SuperSuit, both "
                             "over --vector-envs copies")
    parser.add_argument("--rllib-env-runners", type=int, default=1,
                        help="with --training: RLlib env runner processes (0: sample in the driver)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        run(args)
    finally:
        for teardown in TEARDOWN:
            try:
                teardown()
            except Exception as exc:  # keep tearing down the rest
                print(f"teardown {teardown!r}: {type(exc).__name__}: {exc}", flush=True)


def run(args: argparse.Namespace) -> None:
    """Set up every library, measure them interleaved, print the table and write the JSON file."""
    setups: dict[str, Callable[[], tuple[Measure, str]]]
    if args.training:
        setups = {"pzasync": setup_pzasync_ppo, "rllib": lambda: setup_rllib(args.rllib_env_runners)}
    elif args.simple_spread:
        k = args.vector_envs
        setups = {"pzasync": lambda: setup_pzasync_spread(k),
                  f"sb3 + supersuit (concat_vec_envs x{k})": lambda: setup_sb3_spread(k)}
    else:
        setups = {
            "pzasync": setup_pzasync, "tianshou": lambda: setup_tianshou(1), "torchrl": setup_torchrl,
            "env alone (bare_loop, random)": setup_bare,
        }
        if args.vector_envs > 1:
            setups[f"tianshou vectorised (DummyVectorEnv x{args.vector_envs})"] = (
                lambda: setup_tianshou(args.vector_envs))
        if args.pzasync_envs > 1:
            setups[f"pzasync vectorised (envs_per_actor={args.pzasync_envs})"] = (
                lambda: setup_pzasync(args.pzasync_envs))
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
    if args.training:
        print(f"\nconnect_four_v3, PPO training, one policy per agent, {args.steps} agent steps x {args.repeats} "
              f"(RLlib: {max(1, args.steps // TRAIN_BATCH)} x {TRAIN_BATCH}), agent steps/s")
    elif args.simple_spread:
        print(f"\nsimple_spread_v3 (3 agents, one shared PPO policy, collection only), {args.vector_envs} env copies, "
              f"{args.steps} agent steps x {args.repeats}, agent steps/s (one acting process)")
    else:
        print(f"\nconnect_four_v3, {args.steps} agent steps x {args.repeats}, agent steps/s (one acting process)")
    print(f"{'library':<42}{'median':>10}{'min':>10}{'max':>10}{'/pzasync':>10}")
    for name, row in table.items():
        ratio = f"{row['median'] / base:.2f}" if base else "-"
        print(f"{name:<42}{row['median']:>10,.0f}{row['min']:>10,.0f}{row['max']:>10,.0f}{ratio:>10}")
    for name, why in skipped.items():
        print(f"{name:<42}skipped ({why})")
    if args.training and base and "rllib" in table:
        print(f"pzasync / rllib: {base / table['rllib']['median']:.2f}x")
    if args.json:
        if args.training:
            settings: dict[str, Any] = {
                "mode": "training", "steps": args.steps, "repeats": args.repeats, "ppo": PPO_OPTIONS,
                "rllib_train_batch": TRAIN_BATCH, "rllib_env_runners": args.rllib_env_runners,
                "rllib_envs_per_env_runner": 1, "rllib_num_learners": 0, "ray_num_cpus": 2,
                "torch_threads": 1, "cpus": os.cpu_count()}
        else:
            settings = {"steps": args.steps, "repeats": args.repeats, "warmup": WARMUP, "peer_epsilon": EPS,
                        "vector_envs": args.vector_envs, "pzasync_envs": args.pzasync_envs, "torch_threads": 1,
                        "cpus": os.cpu_count()}
            if args.simple_spread:
                settings = {"mode": "simple_spread", "steps": args.steps, "repeats": args.repeats,
                            "copies": args.vector_envs, "network": SPREAD_NET, "torch_threads": 1,
                            "cpus": os.cpu_count()}
        out = {"env": SPREAD if args.simple_spread else ENV, "settings": settings,
               "versions": versions, "raw": raw, "summary": table, "skipped": skipped,
               "ratio_to_pzasync": {n: r["median"] / base for n, r in table.items()} if base else {}}
        if NOTES:
            out["notes"] = NOTES
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
