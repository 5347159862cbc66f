"""Runtime figures: actor overhead against a bare loop, learner updates/s, policy lag.

Usage: python benchmarks/actor_and_learners.py [ENV] [AGENT_STEPS]   (default connect_four, 40000)
Prints JSON. Numbers from this machine are in docs/benchmarks.md. `pzasync bench` (a later issue) will
make the full async-against-sequential comparison.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.bench.harness import bare_loop, summarize

ENV = sys.argv[1] if len(sys.argv) > 1 else "pettingzoo.classic.connect_four_v3"
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 40_000
REPEATS = 3


def learner_figures(result) -> dict:
    acting = result.acting_seconds
    return {
        "actor_steps_per_s": result.actor_steps_per_second,
        "updates_per_s": {a: x.updates / acting for a, x in result.agents.items()},
        "updates_per_agent_step": result.updates_per_agent_step,
        "lag_mean": {a: x.policy_lag_mean for a, x in result.agents.items()},
        "lag_p95": {a: x.policy_lag_p95 for a, x in result.agents.items()},
        "actor_wait_s": {a: x.actor_wait_s for a, x in result.agents.items()},
        "dropped": {a: x.transitions_dropped for a, x in result.agents.items()},
    }


def main() -> None:
    out: dict = {"env": ENV, "agent_steps": STEPS, "cpus": os.cpu_count()}
    idle = ("dqn", {"learning_starts": 10**9})  # learner processes exist but never update
    out["bare_random"] = summarize([bare_loop(ENV, None, STEPS) for _ in range(REPEATS)])
    bare, actor = [], []
    for _ in range(REPEATS):  # interleaved, so drifts in machine speed hit both alike
        bare.append(bare_loop(ENV, idle, STEPS))
        actor.append(AsyncRunner(ENV, idle, RunConfig(seed=0)).run(agent_steps=STEPS).actor_steps_per_second)
    out["bare_policy"], out["async_idle_learners"] = summarize(bare), summarize(actor)
    out["actor_over_bare"] = out["async_idle_learners"]["median"] / out["bare_policy"]["median"]
    with tempfile.TemporaryDirectory() as tmp:
        trained = SequentialRunner(ENV, ("dqn", {"learning_starts": 10}), RunConfig(seed=0, out_dir=tmp)).run(
            agent_steps=200)
        fixed = {a: ("fixed", {"checkpoint": os.path.join(trained.run_dir, "checkpoints", f"{a}.pt")})
                 for a in trained.agents}
        bare, actor = [], []
        for _ in range(REPEATS):
            bare.append(bare_loop(ENV, fixed, STEPS))
            actor.append(AsyncRunner(ENV, fixed, RunConfig(seed=0)).run(agent_steps=STEPS).actor_steps_per_second)
    out["bare_fixed_policy"], out["async_fixed_players"] = summarize(bare), summarize(actor)
    out["fixed_actor_over_bare"] = out["async_fixed_players"]["median"] / out["bare_fixed_policy"]["median"]
    for label, ratio in (("free", None), ("ratio_0.25", 0.25)):
        result = AsyncRunner(ENV, "dqn", RunConfig(seed=0, replay_ratio=ratio)).run(agent_steps=STEPS * 2)
        out[f"async_dqn_{label}"] = learner_figures(result)
    result = AsyncRunner(ENV, ("ppo", {"batch_size": 512}), RunConfig(seed=0)).run(agent_steps=STEPS * 2)
    out["async_ppo_free"] = learner_figures(result)
    result = AsyncRunner(ENV, ("ppo", {"batch_size": 512}), RunConfig(seed=0, backpressure=True)).run(
        agent_steps=STEPS * 2)
    out["async_ppo_backpressure"] = learner_figures(result)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
