"""Collection throughput of the peers on simultaneous-move PettingZoo envs: agent steps/s, acting and storing only.

Run with a peer's virtualenv (benchmarks/peers/setup_sb3.sh, setup_pufferlib.sh); rows whose library is not
installed there are skipped with the reason:

    /tmp/pzpeers/sb3/bin/python benchmarks/peers/parallel_collection.py --env mpe2.simple_spread_v3 --env-arg N=3 \\
        --steps 20000 --copies 1,2 --repeats 3 --json /tmp/pzpeers/spread3_sb3.json
    /tmp/pzpeers/puffer/bin/python benchmarks/peers/parallel_collection.py --env magent2.environments.battle_v4 \\
        --json /tmp/pzpeers/battle_puffer.json

Envs (`--env`, a module with `parallel_env(**kwargs)`; `--env-arg KEY=VALUE` its keyword arguments):
mpe2.simple_spread_v3 (N=3 and N=20), pettingzoo.sisl.pursuit_v5 (pettingzoo 1.27 ships v5; v4 raises
DeprecatedEnv), pettingzoo.butterfly.pistonball_v6 (continuous by default: a Gaussian policy head) and
magent2.environments.battle_v4 (162 agents, two teams with the same spaces). Every env keeps its own observation,
flattened: pistonball's 457x120x3 image is 164,520 inputs, so its first layer (21M weights, as many
multiply-adds per agent and step) costs more than the env itself, on every row alike. Both peers need one
observation and one action space for all agents (SuperSuit's vector env and PettingZooPufferEnv, which takes the
first agent's); an env whose agents differ gets its rows skipped, the reason in the JSON.

Same network on every row: the observation flattened, Linear(obs, 128) ReLU Linear(128, 128) ReLU (one torso),
then a policy head (Linear(128, actions): logits; or for Box actions the Gaussian's mean, with a state-independent
log std) and a value head Linear(128, 1), as PPO's actor-critic. `torch.set_num_threads(1)`, one process: SB3's
vector env with num_cpus=0 and PufferLib's Serial backend step the K env copies in this process. Rows (`--peers`):
- `sb3`: Stable-Baselines3 PPO's `collect_rollouts` over SuperSuit's `pettingzoo_env_to_vec_env_v1` (one vector
  slot per agent) and `concat_vec_envs_v1(vec, K, num_cpus=0, base_class="stable_baselines3")`, envs whose agents
  die (magent2's, KAZ) under `black_death_v3` first (with `EndsWhenEmpty` over it: SuperSuit 3.11.0's black death
  never ends an episode that ends by truncation; the next step segfaults magent2). The network is SB3's
  `ActorCriticPolicy` with the torso as a shared features extractor and net_arch pi=[], vf=[] (so SB3's
  action_net and value_net are the heads); `--sb3-separate-torsos` gives SB3's own layout instead,
  net_arch=[128, 128]: two torsos, one for the policy and one for the value.
  SB3 moves image observations channels first (VecTransposeImage) and scales them by 1/255 as it always does.
- `pufferlib`: PufferLib 3.0's own collector, `pufferlib.pufferl.PuffeRL.evaluate`, over
  `pufferlib.vector.make(PettingZooPufferEnv creator, backend=Serial, num_envs=K)`. Its [train] defaults
  (config/default.ini) are made fit for a CPU: device cpu, Adam instead of Muon (never stepped here), no
  compile, batch = all agent rows x the rollout's horizon. Its dashboard is not printed; its utilisation
  thread (psutil once a second) runs as it does in training. PuffeRL sets torch's float32 matmul precision to
  "high" (for GPUs' TF32); it is set back to the default, so every row computes alike (on a CPU without
  reduced-precision float32 matmuls, as here, it makes no difference).
- `pufferlib-loop`: the same vector env driven by a minimal loop: recv, forward, sample (PufferLib's
  `sample_logits`), store observation, action, log-prob, value, reward and terminal into preallocated tensors
  (a ring of one rollout's horizon), send.
A rollout is `--rollout` vector rows (agent slots x steps; the horizon at least 4 steps, and fewer steps where
its float32 observations would pass 512 MiB): SB3's n_steps and PufferLib's bptt_horizon are that horizon.

Agent steps are live-agent decisions, counted on every row alike by a thin wrapper (counting.Counted) right over
the env, under every peer's wrapper: each parallel `step()` adds the number of agents alive when it is called
(`len(env.agents)`); resets add nothing. So padding does not count: SB3's black-death slots of dead agents,
PufferLib's rows of dead agents (its `masks` False) and the step on which PufferLib's Serial backend resets a
finished env instead of stepping it (its actions dropped). `rows` in each run is the vector rows the forward passes
went over, padding included, so rows / agent_steps is the padding overhead (printed as rows/decision).
PufferLib's own count (PuffeRL.global_step: rows with an observation) is kept in the JSON for reference.

Each row: an untimed warm-up of one rollout, then `--repeats` measurements, rows interleaved (A, B, C, A, B, C...)
so drifts in machine speed hit all alike; a measurement runs whole rollouts (SB3, PuffeRL) or vector steps (the
loop) until `--steps` agent steps, and its figure is agent steps over wall seconds (`cpu_s`, the process's CPU
seconds, is kept beside: well under wall_s means the machine was busy). JSON (`--json`): "rows", each
{peer, collector, env, env_kwargs, copies, agent_steps_per_s (median), runs: [{agent_steps, rows, wall_s, cpu_s,
agent_steps_per_s}], settings, params (the network's parameter count: equal on every row, unless
--sb3-separate-torsos), versions, command}; a peer that cannot set up on an env (its import, the env's spaces, the
warm-up rollout) gets {peer, env, copies, skipped: reason} instead, and one whose measurement raises keeps the runs
before it and {failed: reason}.

Every env, short (a check that each row works; for figures `--steps 20000 --repeats 3`, and for battle, near 100k
agent steps/s, `--steps 500000`, which also runs past its 1,000-cycle episodes), one process at a time:

    for py in /tmp/pzpeers/sb3/bin/python /tmp/pzpeers/puffer/bin/python; do
      for env in "mpe2.simple_spread_v3 --env-arg N=3" "mpe2.simple_spread_v3 --env-arg N=20" \\
          pettingzoo.sisl.pursuit_v5 pettingzoo.butterfly.pistonball_v6 magent2.environments.battle_v4; do
        $py benchmarks/peers/parallel_collection.py --env $env --steps 5000 --repeats 1
      done
    done
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import counting
import gymnasium
import numpy as np
import torch
from pettingzoo.utils import BaseParallelWrapper
from specs import parse_spec
from torch import nn

HIDDEN = 128
OBS_BYTES_CAP = 512 * 2**20  # a rollout's observations as float32 (SB3 stores them so) stay under this
MIN_HORIZON = 4
PEERS = ("sb3", "pufferlib", "pufferlib-loop")
COLLECTORS = {"sb3": "stable_baselines3 PPO.collect_rollouts", "pufferlib": "pufferlib.pufferl.PuffeRL.evaluate",
              "pufferlib-loop": "recv/forward/send loop over pufferlib.vector (Serial)"}


@dataclass(frozen=True)
class EnvSpec:
    """An env by module id, with its keyword arguments."""

    module: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def make(self) -> Any:
        """A fresh parallel env, its decisions counted (counting.Counted)."""
        return counting.Counted(importlib.import_module(self.module).parallel_env(**self.kwargs))

    def agents_die(self) -> bool:
        """Whether agents leave before the episode ends (SB3 then needs black_death_v3)."""
        return self.module.startswith("magent2.") or "knights_archers_zombies" in self.module


def spaces_of(spec: EnvSpec) -> tuple[gymnasium.Space, gymnasium.Space, int, str | None]:
    """The first agent's observation and action spaces, the agent count, and why not every agent shares them."""
    env = spec.make()
    agents = env.possible_agents
    obs, act = env.observation_space(agents[0]), env.action_space(agents[0])
    odd = [a for a in agents if env.observation_space(a) != obs or env.action_space(a) != act]
    env.close()
    why = f"{len(odd)} agents ({odd[0]} first) have other spaces than {agents[0]}" if odd else None
    return obs, act, len(agents), why


def horizon(slots: int, obs_size: int, rollout: int) -> int:
    """Steps per rollout for `slots` agent rows: about `rollout` rows, at least MIN_HORIZON steps, fewer where the
    rollout's float32 observations would pass OBS_BYTES_CAP."""
    steps = max(MIN_HORIZON, round(rollout / slots))
    cap = max(1, OBS_BYTES_CAP // (slots * obs_size * 4))
    return max(1, min(steps, cap))


class ActorCritic(nn.Module):
    """The network of every row: flattened observation -> 128-128 ReLU torso -> policy head and value head."""

    def __init__(self, obs_size: int, action_space: gymnasium.Space) -> None:
        super().__init__()
        self.continuous = isinstance(action_space, gymnasium.spaces.Box)
        outputs = int(np.prod(action_space.shape)) if self.continuous else int(action_space.n)
        self.torso = nn.Sequential(nn.Linear(obs_size, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.policy = nn.Linear(HIDDEN, outputs)
        self.value = nn.Linear(HIDDEN, 1)
        self.log_std = nn.Parameter(torch.zeros(outputs)) if self.continuous else None

    def forward_eval(self, obs: torch.Tensor, state: Any = None) -> tuple[Any, torch.Tensor]:
        """(logits, or a Normal for Box actions; value), as PufferLib's policies answer."""
        hidden = self.torso(obs.reshape(len(obs), -1).float())
        out = self.policy(hidden)
        if self.log_std is not None:
            return torch.distributions.Normal(out, self.log_std.exp().expand_as(out)), self.value(hidden)
        return out, self.value(hidden)

    def forward(self, obs: torch.Tensor, state: Any = None) -> tuple[Any, torch.Tensor]:
        return self.forward_eval(obs, state)


def parameters(module: nn.Module) -> int:
    """A module's parameter count."""
    return sum(p.numel() for p in module.parameters())


def versions(*packages: str) -> dict[str, str]:
    """Installed versions of `packages` (those missing left out), with python's."""
    found = {"python": platform.python_version()}
    for name in packages:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


ENV_PACKAGES = ("torch", "numpy", "gymnasium", "pettingzoo", "mpe2", "magent2", "pymunk")


@dataclass
class Row:
    """One peer on one env with K copies, set up and warmed up: `collect(steps)` collects at least that many."""

    peer: str
    copies: int
    collect: Callable[[int], None]  # agent steps wanted -> collects at least that many
    rows_done: Callable[[], int]
    info: dict[str, Any]
    close: Callable[[], None]
    final: Callable[[], dict[str, Any]] = dict  # figures read once all runs are done
    runs: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None  # why a measurement raised (no more runs then)

    def measure(self, steps: int) -> dict[str, Any]:
        """Collect `steps` agent steps (whole rollouts where the collector works so); the figures of that run."""
        decisions0, rows0 = counting.decisions, self.rows_done()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        self.collect(steps)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        done = counting.decisions - decisions0
        return {"agent_steps": done, "rows": self.rows_done() - rows0, "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 4), "agent_steps_per_s": round(done / wall, 1)}


class EndsWhenEmpty(BaseParallelWrapper):
    """Over SuperSuit 3.11.0's `black_death_v3`: ends the episode once the env under it has no agent left.

    black_death_par tells the episode done only when every agent is terminated *and* truncated at once, so an
    episode that ends by truncation (max_cycles) or by terminations never ends there, and the next step goes to an
    env with no agents (magent2's then segfaults). SuperSuit's PR 265 (after 3.11.0) makes that an *or*; this
    wrapper has the same effect: all agents terminated and truncated, and black death's agent list cleared."""

    def step(self, actions: dict[Any, Any]) -> Any:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        if not self.env.env.agents and self.env.agents:
            self.env.agents.clear()
            terminations = truncations = dict.fromkeys(terminations, True)
        return obs, rewards, terminations, truncations, infos


def setup_sb3(spec: EnvSpec, copies: int, args: argparse.Namespace) -> Row:
    """SB3 PPO over SuperSuit's concatenated vector env, timing `collect_rollouts`."""
    import stable_baselines3  # noqa: F401  (missing -> ImportError, the row skipped)
    import supersuit as ss
    from stable_baselines3 import PPO
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class Torso(BaseFeaturesExtractor):
        """The rows' torso as SB3's features extractor (shared by the policy and value heads)."""

        def __init__(self, observation_space: gymnasium.Space) -> None:
            super().__init__(observation_space, features_dim=HIDDEN)
            size = int(np.prod(observation_space.shape))
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(size, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                                     nn.ReLU())

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(obs)

    env = spec.make()
    if spec.agents_die():
        env = EndsWhenEmpty(ss.black_death_v3(env))
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    vec = ss.concat_vec_envs_v1(vec, copies, num_cpus=0, base_class="stable_baselines3")
    obs_size = int(np.prod(vec.observation_space.shape))
    n_steps = horizon(vec.num_envs, obs_size, args.rollout)
    if args.sb3_separate_torsos:
        policy_kwargs: dict[str, Any] = {"net_arch": [HIDDEN, HIDDEN], "activation_fn": nn.ReLU}
    else:
        policy_kwargs = {"features_extractor_class": Torso, "share_features_extractor": True,
                         "net_arch": {"pi": [], "vf": []}}
    model = PPO("MlpPolicy", vec, n_steps=n_steps, batch_size=n_steps * vec.num_envs, device="cpu", verbose=0,
                policy_kwargs=policy_kwargs)  # no seed=: SuperSuit's ConcatVecEnv has no seed()
    _, callback = model._setup_learn(10**12, callback=None)
    per_rollout = n_steps * vec.num_envs
    counter = {"rows": 0}

    def collect(steps: int) -> None:
        start = counting.decisions
        while counting.decisions - start < steps:
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=n_steps)
            counter["rows"] += per_rollout

    collect(1)  # warm-up: one rollout
    info = {"settings": {"n_steps": n_steps, "vector_slots": vec.num_envs, "rows_per_rollout": per_rollout,
                         "black_death": spec.agents_die(), "num_cpus": 0,
                         "net_arch": str(model.policy.net_arch),
                         "features_extractor": type(model.policy.features_extractor).__name__,
                         "share_features_extractor": model.policy.share_features_extractor},
            "params": parameters(model.policy),
            "versions": versions("stable-baselines3", "supersuit", *ENV_PACKAGES)}
    return Row("sb3", copies, collect, lambda: counter["rows"], info, vec.close)


@contextlib.contextmanager
def scratch_cwd() -> Iterator[None]:
    """Work in a scratch directory for a while (`import pufferlib` makes a ./resources symlink)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="pzpeers-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(here)


def import_pufferlib() -> Any:
    """pufferlib, with emulation, vector, pytorch and pufferl loaded, imported from a scratch directory."""
    with scratch_cwd():
        import pufferlib
        import pufferlib.emulation
        import pufferlib.pufferl
        import pufferlib.pytorch
        import pufferlib.vector
    return pufferlib


def puffer_vecenv(spec: EnvSpec, copies: int, seed: int) -> Any:
    """K copies of the env under PettingZooPufferEnv, in PufferLib's Serial backend."""
    pufferlib = import_pufferlib()

    def creator(buf: Any = None, seed: int = 0) -> Any:
        return pufferlib.emulation.PettingZooPufferEnv(env=spec.make(), buf=buf, seed=seed)

    return pufferlib.vector.make(creator, backend=pufferlib.vector.Serial, num_envs=copies, seed=seed)


def puffer_config(pufferlib: Any, seed: int, horizon_steps: int, rows: int) -> dict[str, Any]:
    """PufferLib's [train] defaults (config/default.ini), fit for collecting on a CPU."""
    import ast
    import configparser

    parser = configparser.ConfigParser()
    parser.read(Path(pufferlib.__file__).parent / "config" / "default.ini")
    config: dict[str, Any] = {}
    for key, text in parser["train"].items():
        try:
            config[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            config[key] = text
    batch = rows * horizon_steps
    config.update(seed=seed, device="cpu", optimizer="adam", compile=False, cpu_offload=False, use_rnn=False,
                  batch_size="auto", bptt_horizon=horizon_steps, minibatch_size=batch, max_minibatch_size=batch,
                  total_timesteps=max(10**9, batch), data_dir=tempfile.gettempdir())
    return config


def setup_pufferlib(spec: EnvSpec, copies: int, args: argparse.Namespace) -> Row:
    """PufferLib's own collector, PuffeRL.evaluate, over the Serial vector env."""
    pufferlib = import_pufferlib()

    class Quiet(pufferlib.pufferl.PuffeRL):
        """PuffeRL without its dashboard (printed by __init__ and by train's logging)."""

        def print_dashboard(self, *args: Any, **kwargs: Any) -> None:
            pass

    vec = puffer_vecenv(spec, copies, args.seed)
    obs_size = int(np.prod(vec.single_observation_space.shape))
    steps_per = horizon(vec.num_agents, obs_size, args.rollout)
    config = puffer_config(pufferlib, args.seed, steps_per, vec.num_agents)
    net = ActorCritic(obs_size, vec.single_action_space)
    precision = torch.get_float32_matmul_precision()
    trainer = Quiet(config, vec, net)
    torch.set_float32_matmul_precision(precision)

    per_rollout = config["batch_size"]  # every agent row of every copy, bptt_horizon steps
    counter = {"rows": 0}

    def collect(steps: int) -> None:
        start = counting.decisions
        while counting.decisions - start < steps:
            trainer.evaluate()
            trainer.stats.clear()  # what train()'s logging would take
            counter["rows"] += per_rollout

    def close() -> None:
        trainer.utilization.stop()
        vec.close()

    try:
        collect(1)  # warm-up: one rollout
    except BaseException:
        close()  # its utilisation thread would keep the process alive
        raise
    step0 = trainer.global_step
    info = {"settings": {"backend": "Serial", "num_envs": copies, "agent_rows": vec.num_agents,
                         "bptt_horizon": steps_per, "rows_per_rollout": per_rollout, "optimizer": "adam",
                         "device": "cpu"},
            "params": parameters(net), "versions": versions("pufferlib", *ENV_PACKAGES)}
    return Row("pufferlib", copies, collect, lambda: counter["rows"], info, close,
               final=lambda: {"puffer_global_step": trainer.global_step - step0})


def setup_pufferlib_loop(spec: EnvSpec, copies: int, args: argparse.Namespace) -> Row:
    """A minimal recv / forward / sample / store / send loop over the same Serial vector env."""
    pufferlib = import_pufferlib()
    vec = puffer_vecenv(spec, copies, args.seed)
    obs_space, act_space = vec.single_observation_space, vec.single_action_space
    obs_size = int(np.prod(obs_space.shape))
    steps_per = horizon(vec.num_agents, obs_size, args.rollout)
    net = ActorCritic(obs_size, act_space)
    n = vec.num_agents
    obs_dtype = pufferlib.pytorch.numpy_to_torch_dtype_dict[obs_space.dtype]
    atn_dtype = pufferlib.pytorch.numpy_to_torch_dtype_dict[act_space.dtype]
    store = {"obs": torch.zeros(steps_per, n, *obs_space.shape, dtype=obs_dtype),
             "actions": torch.zeros(steps_per, n, *act_space.shape, dtype=atn_dtype),
             **{key: torch.zeros(steps_per, n) for key in ("logprobs", "values", "rewards", "terminals")}}
    vec.async_reset(args.seed)
    state = {"t": 0, "rows": 0}
    low, high = (act_space.low, act_space.high) if isinstance(act_space, gymnasium.spaces.Box) else (None, None)

    def collect(steps: int) -> None:
        start = counting.decisions
        with torch.no_grad():
            while counting.decisions - start < steps:
                o, r, d, t, _, _, _ = vec.recv()
                obs = torch.as_tensor(o)
                logits, value = net.forward_eval(obs)
                action, logprob, _ = pufferlib.pytorch.sample_logits(logits)
                i = state["t"] % steps_per
                store["obs"][i] = obs
                store["actions"][i] = action.reshape(store["actions"][i].shape)
                store["logprobs"][i] = logprob
                store["values"][i] = value.flatten()
                store["rewards"][i] = torch.as_tensor(r)
                store["terminals"][i] = torch.as_tensor(d | t)
                state["t"] += 1
                state["rows"] += n
                actions = action.numpy()
                if low is not None:
                    actions = np.clip(actions, low, high)
                vec.send(actions)

    collect(steps_per * n)  # warm-up: about one rollout
    info = {"settings": {"backend": "Serial", "num_envs": copies, "agent_rows": n, "ring_steps": steps_per},
            "params": parameters(net), "versions": versions("pufferlib", *ENV_PACKAGES)}
    return Row("pufferlib-loop", copies, collect, lambda: state["rows"], info, vec.close)


SETUPS: dict[str, Callable[[EnvSpec, int, argparse.Namespace], Row]] = {
    "sb3": setup_sb3, "pufferlib": setup_pufferlib, "pufferlib-loop": setup_pufferlib_loop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="module of a PettingZoo parallel env, e.g. mpe2.simple_spread_v3")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument of the env (value read as a Python literal); repeatable")
    parser.add_argument("--steps", type=int, default=20_000, help="agent steps per measurement")
    parser.add_argument("--copies", default="1,2", help="env copies K per row, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per row (interleaved)")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"rows, comma-separated, of {', '.join(PEERS)}")
    parser.add_argument("--rollout", type=int, default=2048, help="vector rows (agent slots x steps) per rollout")
    parser.add_argument("--sb3-separate-torsos", action="store_true",
                        help="SB3's own layout net_arch=[128, 128]: separate policy and value torsos")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    args.command = shlex.join([sys.executable, *sys.argv])
    out = args.json.resolve() if args.json else None  # before any chdir
    peers = args.peers.split(",")
    if set(peers) - set(PEERS):
        parser.error(f"unknown peers {sorted(set(peers) - set(PEERS))}; choose from {PEERS}")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    warnings.filterwarnings("ignore")  # peers' deprecation and version notices (gym under numpy 2, SB3's images)
    spec = EnvSpec(args.env, parse_spec(",".join(["env", *args.env_arg]))[1])
    obs_space, act_space, agents, why_not = spaces_of(spec)
    print(f"{spec.module} {spec.kwargs}: {agents} agents, observation {obs_space}, action {act_space}", flush=True)

    results = set_up(spec, peers, [int(k) for k in args.copies.split(",")], why_not, args)
    rows = [entry["row"] for entry in results if "row" in entry]
    try:
        for _ in range(args.repeats):
            for row in rows:
                if row.failed is None:
                    try:
                        row.runs.append(row.measure(args.steps))
                    except Exception as exc:  # recorded with the runs done before it
                        row.failed = f"{type(exc).__name__}: {exc}"
                        print(f"{row.peer} x{row.copies} failed: {row.failed}", flush=True)
    finally:
        for row in rows:
            row.close()
    report(spec, results, args)
    if out is not None:
        out.write_text(json.dumps({"command": args.command, "env": spec.module, "env_kwargs": spec.kwargs,
                                   "agents": agents, "rows": results}, indent=1))
        print(f"wrote {out}")


def set_up(spec: EnvSpec, peers: list[str], copies: list[int], why_not: str | None,
           args: argparse.Namespace) -> list[dict[str, Any]]:
    """One JSON entry per peer and K: with its set-up, warmed-up "row", or "skipped" and the reason."""
    results: list[dict[str, Any]] = []
    for peer in peers:
        for k in copies:
            entry = {"peer": peer, "collector": COLLECTORS[peer], "env": spec.module, "env_kwargs": spec.kwargs,
                     "copies": k, "command": args.command}
            results.append(entry)
            if why_not is not None:
                owner = "SuperSuit's vector env" if peer == "sb3" else "PettingZooPufferEnv"
                entry["skipped"] = f"{owner} needs one space for all agents: {why_not}"
            else:
                try:
                    entry["row"] = SETUPS[peer](spec, k, args)
                except Exception as exc:  # a missing or unfit peer is reported, never fatal
                    entry["skipped"] = f"{type(exc).__name__}: {exc}"
            if "skipped" in entry:
                print(f"skipping {peer} x{k}: {entry['skipped']}", flush=True)
    return results


def report(spec: EnvSpec, results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Print the table, and turn each measured entry's row into its figures for the JSON."""
    print(f"\n{spec.module} {spec.kwargs}, {args.steps} agent steps x {args.repeats}, agent steps/s (live agents)")
    print(f"{'peer':<16}{'copies':>7}{'median':>12}{'min':>12}{'max':>12}{'rows/decision':>15}")
    for entry in results:
        row = entry.pop("row", None)
        if row is None:
            print(f"{entry['peer']:<16}{entry['copies']:>7}  skipped ({entry['skipped']})")
            continue
        rates = [run["agent_steps_per_s"] for run in row.runs]
        entry["agent_steps_per_s"] = statistics.median(rates) if rates else None
        entry["runs"] = row.runs
        entry.update(row.info, **row.final())
        entry["settings"].update(steps=args.steps, repeats=args.repeats, rollout=args.rollout, torch_threads=1,
                                 cpus=os.cpu_count())
        if row.failed is not None:
            entry["failed"] = row.failed
        if rates:
            padding = sum(r["rows"] for r in row.runs) / max(1, sum(r["agent_steps"] for r in row.runs))
            print(f"{row.peer:<16}{row.copies:>7}{entry['agent_steps_per_s']:>12,.0f}{min(rates):>12,.0f}"
                  f"{max(rates):>12,.0f}{padding:>15.2f}")
        if row.failed is not None:
            print(f"{row.peer:<16}{row.copies:>7}  failed ({row.failed})")


if __name__ == "__main__":
    main()
