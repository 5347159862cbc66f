"""The AgileRL peer: IPPO with one actor and critic shared by homogeneous agents, for a wall budget, as TorchScript.

AgileRL's multi-agent on-policy path: the env's parallel API vectorised by AgileRL's `AsyncPettingZooVecEnv` (one
worker process per env copy, observations in shared memory), reset with the seed, and trained by its `IPPO` with the
settings of its own IPPO training manifest for MPE (`configs/training/multi_agent/ippo.yaml` in AgileRL's
repository: `MANIFEST_IPPO`, `MANIFEST_NET`, 16 envs). IPPO groups agents by the name before the last "_"
(`agent_0`, `agent_1`, `agent_2` -> `agent`), so simple_spread's agents share one actor and one critic, as the SB3
peer's agents share one policy. The manifest trains a population of 4 with evolutionary hyperparameter search; here
one member trains without mutation or selection (no hyperparameter search, as for every peer), so the evaluation
that only feeds selection is skipped too.

Runs in its own virtualenv (benchmarks/peers/setup_agilerl.sh) and imports nothing from pzasync:

    VENV/bin/python benchmarks/peers/agilerl_train.py mpe2.simple_spread_v3 --env-arg N=3 --seconds 600 --seed 0 \\
        --out /tmp/pzpeers/agilerl_spread_s0

The loop is AgileRL's `train_multi_agent_on_policy` for one agent: rollouts of `learn_step` env steps (2048 env
steps over 16 copies: 128 vector steps, 6,144 agent steps on simple_spread), each then learned by `IPPO.learn`.
Training stops at the first vector step past `--seconds`; what the unfinished rollout has collected by then is not
trained on. AgileRL's training function also resets the envs every `evo_steps` (10,000 env steps) before its
population evaluation; without the population that reset is not done, episodes run on through the env's own
truncation (`max_cycles`).

OUT gets `policy.pt` (TorchScript: a batch of observations as the env gives them -> the shared actor's action
logits, the greedy action their argmax; its extra file `peer.json` holds the observation shape and action count)
and `run.json` (versions, settings, agent steps, wall and CPU seconds, and how often the exported module's argmax
agreed with AgileRL's greedy action on the observations of a short greedy rollout). AgileRL's IPPO has no greedy
mode of its own (`get_action` and `test` sample from the distribution): its greedy action is taken as the argmax of
the logits its `get_action` computed, mapped back to the agents by its `disassemble_grouped_outputs`.
Score it in pzasync's environment with benchmarks/peers/score.py, as the SB3 peer.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import random
import resource
import time
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pettingzoo
import torch
from agilerl.algorithms import IPPO
from agilerl.utils.algo_utils import get_vect_dim
from agilerl.vector.pz_async_vec_env import AsyncPettingZooVecEnv
from specs import parse_spec

#: The `algorithm` section of AgileRL's IPPO manifest for MPE (configs/training/multi_agent/ippo.yaml).
MANIFEST_IPPO = {"batch_size": 128, "lr": 1e-4, "learn_step": 2048, "gamma": 0.99, "gae_lambda": 0.95,
                 "action_std_init": 0.0, "clip_coef": 0.2, "ent_coef": 0.05, "vf_coef": 0.5, "max_grad_norm": 0.5,
                 "target_kl": None, "update_epochs": 4}
#: Its `network` section (the min/max bounds only limit mutations, none here).
MANIFEST_NET = {
    "latent_dim": 64,
    "encoder_config": {"hidden_size": [64], "activation": "ReLU", "min_mlp_nodes": 32, "max_mlp_nodes": 500,
                       "layer_norm": True},
    "head_config": {"hidden_size": [64], "activation": "ReLU", "output_vanish": False, "min_hidden_layers": 1,
                    "max_hidden_layers": 3, "min_mlp_nodes": 32, "max_mlp_nodes": 256, "layer_norm": True},
}
#: Its `environment.num_envs`.
MANIFEST_ENVS = 16


class Actor(torch.nn.Module):
    """The logits path of AgileRL's `StochasticActor`: observation batch -> encoder -> head MLP -> action logits
    (the distribution it samples from, without the sampling)."""

    def __init__(self, actor: Any) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor.head_net.wrapped(self.actor.extract_features(obs))


def env_maker(env_id: str, kwargs: dict[str, Any]) -> Any:
    """A function making `module.parallel_env(**kwargs)` for an id like `mpe2.simple_spread_v3`."""
    module = importlib.import_module(env_id)
    return lambda: module.parallel_env(**kwargs)


def seed_everything(seed: int) -> None:
    """Seed what AgileRL draws from: torch (initial weights, action sampling), numpy (minibatch shuffles)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_agent(vec_env: AsyncPettingZooVecEnv, ippo: dict[str, Any]) -> IPPO:
    """IPPO over the env's agents with the manifest's network; refuse what the exported module cannot carry."""
    agents = list(vec_env.agents)
    for agent in agents:
        space = vec_env.single_action_space(agent)
        if not isinstance(space, gymnasium.spaces.Discrete):
            raise SystemExit(f"agent {agent!r}: action space {space}; this peer exports logits of Discrete actions")
    model = IPPO([vec_env.single_observation_space(a) for a in agents],
                 [vec_env.single_action_space(a) for a in agents], agent_ids=agents, net_config=MANIFEST_NET,
                 device="cpu", **ippo)
    if len(model.actors) != 1:
        raise SystemExit(f"agents {agents} form the IPPO groups {list(model.actors)}; player.py loads one shared "
                         f"policy, so this peer exports envs whose agents form one group")
    return model


def train(model: IPPO, vec_env: AsyncPettingZooVecEnv, seconds: float, seed: int) -> dict[str, Any]:
    """AgileRL's on-policy multi-agent loop (train_multi_agent_on_policy, one agent) until `seconds` of wall time.

    Returns the agent and env steps taken, the rollouts learned and the last completed episodes' scores (summed over
    agents, with sampled actions, as AgileRL's progress bar shows them)."""
    num_envs = vec_env.num_envs
    obs, info = vec_env.reset(seed=seed)
    model.set_training_mode(True)
    scores, completed = np.zeros(num_envs), []
    agent_steps = env_steps = rollouts = 0
    started = time.monotonic()
    while True:
        states, actions, log_probs, rewards, dones, values = ({a: [] for a in model.agent_ids} for _ in range(6))
        done = {a: np.zeros(num_envs) for a in model.agent_ids}
        for _ in range(-(model.learn_step // -num_envs)):
            if time.monotonic() - started >= seconds:
                return {"agent_steps": agent_steps, "env_steps": env_steps, "rollouts_trained": rollouts,
                        "episodes": len(completed), "train_score_last10": _mean(completed[-10:])}
            action, log_prob, _entropy, value = model.get_action(obs=obs, infos=info)
            next_obs, reward, termination, truncation, info = vec_env.step(action)
            step_rewards = np.column_stack([np.asarray(r, dtype=float).ravel() for r in reward.values()])
            agent_steps += int(np.count_nonzero(~np.isnan(step_rewards)))
            env_steps += num_envs
            scores += np.nansum(step_rewards, axis=1)
            for agent in obs:
                states[agent].append(obs[agent])
                rewards[agent].append(reward[agent])
                actions[agent].append(action[agent])
                log_probs[agent].append(log_prob[agent])
                values[agent].append(value[agent])
                dones[agent].append(done[agent])
            next_done = {}
            for agent in termination:
                terminated, truncated = termination[agent], truncation[agent]
                active = ~(np.isnan(terminated) | np.isnan(truncated))
                result = np.full_like(active, np.nan, dtype=float)
                result[active] = np.logical_or(terminated[active], truncated[active])
                next_done[agent] = result
            obs, done = next_obs, next_done
            for idx, agent_dones in enumerate(zip(*next_done.values())):
                if all(agent_dones):
                    completed.append(float(scores[idx]))
                    scores[idx] = 0.0
                    done = {a: np.zeros(num_envs) for a in model.agent_ids}
        model.learn((states, actions, log_probs, rewards, dones, values, next_obs, next_done))
        rollouts += 1


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 3) if values else None


def greedy(model: IPPO, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """AgileRL's greedy action of each agent: the argmax of the logits its `get_action` computed for `obs` (agent ->
    batch of observations), mapped back to the agents as `get_action` maps its sampled actions."""
    model.get_action(obs=obs)
    grouped = defaultdict(list)
    for agent in obs:
        grouped[model.get_group_id(agent) if model.has_grouped_agents() else agent].append(agent)
    argmax = {group: model.actors[group].head_net.dist.logits.argmax(dim=-1).numpy() for group in grouped}
    return model.disassemble_grouped_outputs(argmax, get_vect_dim(obs, model.possible_observation_spaces), grouped)


def export(model: IPPO, env_id: str, kwargs: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    """Write the shared actor's logits as TorchScript and check its argmax against AgileRL's greedy action on the
    observations of a 50-step greedy rollout of one env (AgileRL acting)."""
    model.set_training_mode(False)
    env = env_maker(env_id, kwargs)()
    observations, _ = env.reset(seed=seed + 777)
    rows, theirs = [], []
    for _ in range(50):
        if not env.agents:
            observations, _ = env.reset()
        actions = greedy(model, {a: np.asarray(observations[a])[None] for a in env.agents})
        rows.append(np.stack([observations[a] for a in env.agents]))
        theirs.append(np.array([int(actions[a][0]) for a in env.agents]))
        observations, *_ = env.step({a: int(actions[a][0]) for a in env.agents})
    env.close()
    sample = torch.as_tensor(np.concatenate(rows), dtype=torch.float32)
    group = next(iter(model.actors))
    module = Actor(model.actors[group]).eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, sample[:4])
    space = model.possible_action_spaces[next(iter(model.agent_ids))]
    meta = {"obs_shape": list(sample.shape[1:]), "env": env_id, "env_kwargs": kwargs, "wrappers": [],
            "output": "logits", "actions": int(space.n)}
    torch.jit.save(traced, str(out / "policy.pt"), _extra_files={"peer.json": json.dumps(meta)})
    loaded = torch.jit.load(str(out / "policy.pt"))
    with torch.no_grad():
        ours = loaded(sample).numpy().argmax(axis=1)
    return {"observations": len(sample), "agreement": float(np.mean(ours == np.concatenate(theirs)))}


def versions() -> dict[str, str]:
    """The peer's package versions."""
    return {"python": platform.python_version(), "torch": torch.__version__, "agilerl": version("agilerl"),
            "pettingzoo": pettingzoo.__version__, "mpe2": version("mpe2"), "gymnasium": gymnasium.__version__,
            "numpy": np.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env", help="module of a PettingZoo parallel env, e.g. mpe2.simple_spread_v3")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument of the env (value read as a Python literal)")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall budget of the training loop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=MANIFEST_ENVS,
                        help="env copies, one worker process each (AsyncPettingZooVecEnv); the manifest's 16")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's intra-op threads (default: torch's own, one per core)")
    parser.add_argument("--out", required=True, type=Path, help="folder for policy.pt and run.json")
    args = parser.parse_args()
    kwargs = parse_spec(",".join(["env", *args.env_arg]))[1]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    vec_env = AsyncPettingZooVecEnv([env_maker(args.env, kwargs) for _ in range(args.num_envs)])
    model = make_agent(vec_env, MANIFEST_IPPO)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0, wall0 = time.process_time(), time.monotonic()
    progress = train(model, vec_env, args.seconds, args.seed)
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    vec_env.close()  # joins the workers, so their CPU time is counted in RUSAGE_CHILDREN
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers_cpu = children.ru_utime + children.ru_stime - children0.ru_utime - children0.ru_stime
    check = export(model, args.env, kwargs, args.seed, args.out)
    report = {
        "peer": "AgileRL IPPO, one actor and critic shared by the agents of a group (simple_spread: all)",
        "env": args.env, "env_kwargs": kwargs, "wrappers": [], "agents": len(model.agent_ids), "seed": args.seed,
        "budget_s": args.seconds,
        "versions": versions(),
        "settings": {"algorithm": "IPPO", "source": "AgileRL configs/training/multi_agent/ippo.yaml, one member, "
                     "no mutation or selection", "ippo": MANIFEST_IPPO, "net_config": MANIFEST_NET,
                     "groups": {g: [a for a in model.agent_ids if model.get_group_id(a) == g] for g in model.actors},
                     "vec_env": "AsyncPettingZooVecEnv", "num_envs": args.num_envs,
                     "torch_threads": torch.get_num_threads(), "actor": str(model.actors[next(iter(model.actors))])},
        **progress,
        "wall_s": round(wall, 3), "cpu_s": round(cpu + workers_cpu, 3), "cpu_learner_s": round(cpu, 3),
        "cpu_env_workers_s": round(workers_cpu, 3), "export_check": check,
    }
    (args.out / "run.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("env", "seed", "agent_steps", "rollouts_trained", "episodes",
                                              "train_score_last10", "wall_s", "cpu_s", "export_check")}))


if __name__ == "__main__":
    main()
