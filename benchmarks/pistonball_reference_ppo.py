"""A reference PPO for pistonball outside pzasync: is the env learnable from pixels in a few 100k agent steps?

Written the way Butterfly-Baselines trained pistonball_v4 with Stable-Baselines3 (train.py, config/pistonball_v4.json),
in one file in the manner of CleanRL: SuperSuit's grey (luminance), 96x96 and 4 frames stacked, every piston of
every copy one row of a vector env (`pettingzoo_env_to_vec_env_v1`, `concat_vec_envs_v1`), SB3's CnnPolicy (the Nature
CNN shared by a policy and a value MLP of 64-64 ReLU, PyTorch's default init as `ortho_init=False` has it, a
state-independent log std starting at 0), actions clipped to [-1, 1] for the env, and the tuned settings. The
greedy team return (every piston its mean action) of a few episodes is printed every `--eval-every` agent steps.

    python benchmarks/pistonball_reference_ppo.py --steps 400000 --device cuda --json OUT.json

docs/bench/pistonball_frames.json holds what it gave beside pzasync's runs of the same settings.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch
from torch import nn


def make_env(render: bool = True) -> Any:
    """pistonball_v6 (parallel API) with the frames drawn, grey as luminance, 96x96, 4 stacked."""
    import supersuit as ss
    from pettingzoo.butterfly import pistonball_v6

    env = pistonball_v6.parallel_env(render_mode="rgb_array" if render else None)
    env = ss.color_reduction_v0(env, mode="full")
    env = ss.resize_v1(env, x_size=96, y_size=96)
    return ss.frame_stack_v1(env, stack_size=4)


class Agent(nn.Module):
    """SB3's CnnPolicy for a 1-dim Box action: Nature CNN -> 512, then a policy and a value MLP (64, 64)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 8 * 8, 512), nn.ReLU())
        self.pi = nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        self.v = nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        self.log_std = nn.Parameter(torch.zeros(1))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.cnn(obs.permute(0, 3, 1, 2).float() / 255.0)
        return self.pi(features), self.v(features).squeeze(-1)


def greedy_team_return(agent: Agent, episodes: int, seed: int, device: str) -> float:
    """Mean team return (summed over the pistons) of `episodes` episodes, every piston acting its mean."""
    env = make_env()
    totals = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total = 0.0
        while env.agents:
            names = list(obs)
            with torch.no_grad():
                mean, _ = agent(torch.as_tensor(np.stack([obs[a] for a in names]), device=device))
            actions = {a: np.clip(mean[i].cpu().numpy(), -1, 1) for i, a in enumerate(names)}
            obs, rewards, *_ = env.step(actions)
            total += float(sum(rewards.values()))
        totals.append(total)
    env.close()
    return float(np.mean(totals))


def train(args: argparse.Namespace) -> dict[str, Any]:
    import supersuit as ss

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)  # several runs side by side: torch's default (every core) oversubscribes
    rng = np.random.default_rng(args.seed)
    envs = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make_env()), args.copies, num_cpus=args.cpus,
                                 base_class="gymnasium")
    obs, _ = envs.reset(seed=args.seed)
    rows = obs.shape[0]
    agent = Agent(obs.shape[-1]).to(args.device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    n = args.n_steps
    buf_obs = np.zeros((n, *obs.shape), dtype=np.uint8)
    buf_act, buf_logp, buf_rew, buf_done, buf_val = (np.zeros((n, rows), dtype=np.float32) for _ in range(5))
    episode_return = np.zeros(rows)
    finished: list[float] = []
    curve: list[dict[str, float]] = []
    steps, next_eval, start = 0, 0, time.time()

    def add_point() -> None:
        """The curve's point now: the greedy team return, and the sampled return per piston of recent episodes."""
        score = greedy_team_return(agent, args.eval_episodes, 10_000, args.device)
        curve.append({"agent_steps": steps, "greedy_team_return": score, "per_piston": score / 20,
                      "training_per_piston": float(np.mean(finished[-80:])) if finished else float("nan"),
                      "wall_s": time.time() - start})
        print(json.dumps(curve[-1]), flush=True)

    while steps < args.steps:
        if steps >= next_eval:
            add_point()
            next_eval += args.eval_every
        for t in range(n):
            with torch.no_grad():
                mean, value = agent(torch.as_tensor(obs, device=args.device))
                std = agent.log_std.exp()
                action = mean + std * torch.randn(mean.shape, device=args.device)
                logp = torch.distributions.Normal(mean, std).log_prob(action).sum(-1)
            buf_obs[t], buf_act[t] = obs, action.squeeze(-1).cpu().numpy()
            buf_logp[t], buf_val[t] = logp.cpu().numpy(), value.cpu().numpy()
            obs, reward, terminated, truncated, _ = envs.step(np.clip(action.cpu().numpy(), -1, 1))
            done = np.logical_or(terminated, truncated)
            buf_rew[t], buf_done[t] = reward, done
            episode_return += reward
            finished.extend(episode_return[done].tolist())
            episode_return[done] = 0.0
        steps += n * rows
        with torch.no_grad():  # GAE; an episode's end (terminated or cut) ends its trajectory, as SB3 1.x had it
            _, last_value = agent(torch.as_tensor(obs, device=args.device))
        next_value, running = last_value.cpu().numpy(), np.zeros(rows)
        advantages = np.zeros_like(buf_rew)
        for t in reversed(range(n)):
            alive = 1.0 - buf_done[t]
            delta = buf_rew[t] + args.gamma * next_value * alive - buf_val[t]
            running = delta + args.gamma * args.gae_lambda * alive * running
            advantages[t], next_value = running, buf_val[t]
        returns = advantages + buf_val
        flat = {k: torch.as_tensor(v.reshape(n * rows, *v.shape[2:]), device=args.device) for k, v in
                {"obs": buf_obs, "act": buf_act, "logp": buf_logp, "adv": advantages, "ret": returns}.items()}
        for _ in range(args.epochs):
            order = torch.as_tensor(rng.permutation(n * rows), device=args.device)
            for lo in range(0, n * rows, args.minibatch):
                idx = order[lo:lo + args.minibatch]
                mean, value = agent(flat["obs"][idx])
                dist = torch.distributions.Normal(mean.squeeze(-1), agent.log_std.exp())
                ratio = (dist.log_prob(flat["act"][idx]) - flat["logp"][idx]).exp()
                adv = flat["adv"][idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - args.clip, 1 + args.clip) * adv).mean()
                value_loss = (flat["ret"][idx] - value).pow(2).mean()
                loss = policy_loss - args.ent_coef * dist.entropy().mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
    add_point()
    envs.close()
    return {"settings": vars(args), "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400_000, help="Agent steps (piston decisions) to train for.")
    parser.add_argument("--copies", type=int, default=4, help="pistonball copies, 20 rows each.")
    parser.add_argument("--cpus", type=int, default=2, help="Processes stepping the copies.")
    parser.add_argument("--n-steps", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.000597417)
    parser.add_argument("--gamma", type=float, default=0.98)
    parser.add_argument("--gae-lambda", type=float, default=0.8)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--minibatch", type=int, default=256)
    parser.add_argument("--clip", type=float, default=0.1)
    parser.add_argument("--ent-coef", type=float, default=0.0993558)
    parser.add_argument("--vf-coef", type=float, default=0.967044)
    parser.add_argument("--max-grad-norm", type=float, default=0.9)
    parser.add_argument("--eval-every", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the learning process")
    parser.add_argument("--json", default=None, help="Write the settings and the curve here.")
    args = parser.parse_args()
    result = train(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
