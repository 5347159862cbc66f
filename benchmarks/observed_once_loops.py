"""The env's own parallel loop through PettingZoo's `aec_to_parallel` conversion, against the same conversion
computing each observation once a cycle: random actions, one process, no policy, alternating runs.

    python benchmarks/observed_once_loops.py --seconds 2 --rounds 2 --json docs/bench/observed_once_loops.json

PettingZoo's conversion (the `parallel_env()` of every butterfly, SISL and MPE env in PettingZoo 1.27, and what
SuperSuit's observation wrappers put around a parallel env) calls `last()` before each agent's move and drops the
observation it computes, then observes every agent at the cycle's end. "Observed once" is pzasync's
`core/observed_once.py`, which builds each conversion over `LastWithoutObservation`, whose `last()` passes
`observe=False`; whole runs are compared by benchmarks/paired_train.py (docs/bench/observed_once_train_*.json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
import warnings
from typing import Any

from pzasync.core.observed_once import observed_once
from pzasync.core.wrappers import parse_wrapper, resolve_wrapper
from pzasync.recipes.registry import IMAGE_WRAPPERS

#: (label, env id, env kwargs, wrappers): the suite's envs whose parallel API is PettingZoo's conversion.
CASES: tuple[tuple[str, str, dict[str, Any], tuple[str, ...]], ...] = (
    ("pistonball_v6, the recipe's frames", "pettingzoo.butterfly.pistonball_v6", {"render_mode": "rgb_array"},
     IMAGE_WRAPPERS),
    ("knights_archers_zombies_v11", "pettingzoo.butterfly.knights_archers_zombies_v11", {}, ()),
    ("knights_archers_zombies_v11, obs_method=image and the same frames",
     "pettingzoo.butterfly.knights_archers_zombies_v11", {"obs_method": "image"}, IMAGE_WRAPPERS),
    ("simple_spread_v3", "mpe2.simple_spread_v3", {}, ()),
    ("multiwalker_v9", "pettingzoo.sisl.multiwalker_v9", {}, ()),
    ("pursuit_v5", "pettingzoo.sisl.pursuit_v5", {}, ()),
)


def pettingzoos(env_id: str, kwargs: dict[str, Any], wrappers: tuple[str, ...], fix: Any = lambda env: env) -> Any:
    """The module's `parallel_env()` wrapped by SuperSuit itself; `fix` applied to it and after each wrapper."""
    env = fix(importlib.import_module(env_id).parallel_env(**kwargs))
    for text in wrappers:
        name, options = parse_wrapper(text)
        env = fix(resolve_wrapper(name)(env, **options))
    return env


def observing_once(env_id: str, kwargs: dict[str, Any], wrappers: tuple[str, ...]) -> Any:
    """The same env and wrappers, every conversion observing once (`observed_once`)."""
    return pettingzoos(env_id, kwargs, wrappers, fix=observed_once)


def agent_steps_per_s(env: Any, seconds: float, seed: int = 0) -> float:
    """Random actions through `env.step` for `seconds`, resetting at each episode's end."""
    env.reset(seed=seed)
    for agent in env.possible_agents:
        env.action_space(agent).seed(seed)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        env.step(actions)
        steps += len(actions)
        if not env.agents:
            env.reset()
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for label, env_id, kwargs, wrappers in CASES:
        rates: dict[str, list[float]] = {"pettingzoo": [], "observed_once": []}
        for _ in range(args.rounds):
            for key, make in (("pettingzoo", pettingzoos), ("observed_once", observing_once)):
                rates[key].append(agent_steps_per_s(make(env_id, kwargs, wrappers), args.seconds))
        medians = {key: statistics.median(values) for key, values in rates.items()}
        rows.append({"label": label, "env": env_id, "kwargs": kwargs, "wrappers": list(wrappers),
                     "agent_steps_per_s": {k: [round(v, 1) for v in values] for k, values in rates.items()},
                     "median": {k: round(v, 1) for k, v in medians.items()},
                     "ratio": round(medians["observed_once"] / medians["pettingzoo"], 3)})
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        report = {"what": "the env's parallel loop alone, random actions, one process: PettingZoo's aec_to_parallel "
                          "against the same conversion observing each agent once a cycle, alternating",
                  "command": f"python benchmarks/observed_once_loops.py --seconds {args.seconds:g} "
                             f"--rounds {args.rounds} --json {args.json}",
                  "rows": rows}
        with open(args.json, "w") as out:
            out.write(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
