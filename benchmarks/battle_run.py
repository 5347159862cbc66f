"""Issue 55's many-agent figures on magent2's battle_v4 (162 agents in two teams of 81, 13x13x5 observations, 21
actions), re-run on today's code (docs/benchmarks.md, "The parallel path"):

    python benchmarks/battle_run.py [--steps 200000] [--minutes 3] [--json docs/bench/battle_run.json]

1. Loops over the env's parallel API, one core (torch on one thread), the same 2x128 MLP as `pzasync bench ...
   --learner dqn,torso=mlp` builds: random actions; one batched forward over each team's agents per cycle; one
   forward per agent. `pzasync bench` gives the rest of that table (bare_parallel, bare_policy, the actor).
2. `pzasync train magent2.environments.battle_v4 --minutes M` as a new user runs it (the recipe-less defaults:
   DQN for each team's group, scored by sides against random): agent-steps/s of the whole run, the evaluation
   rows written while training, and the final evaluation's seconds against the run's (the bound: a quarter).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ENV = "magent2.environments.battle_v4"


def loops(steps: int, seed: int = 0) -> dict[str, float]:
    """Agent-steps/s of the three loops over the parallel API (module docstring, 1)."""
    from pzasync.core.environments import EnvSpec
    from pzasync.learners import resolve_learner

    torch.set_num_threads(1)
    spec = EnvSpec.of(ENV)
    env = spec.make_parallel()
    agents = list(env.possible_agents)
    cls, options = resolve_learner(("dqn", {"torso": "mlp"}), agents[0])
    from pzasync.core.spaces import env_layouts, probe_info_masks

    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe))
    probe.close()
    teams = {team: cls.build_policy(layouts[f"{team}_0"], cls.validate_config(f"{team}_0", options))
             for team in ("red", "blue")}
    rng = np.random.default_rng(seed)
    out = {}
    for mode in ("random", "batched", "per_agent"):
        done, first = 0, True
        start = time.perf_counter()
        while done < steps:
            observations, _ = env.reset(seed=seed if first else None)
            first = False
            while env.agents and done < steps:
                live = env.agents
                if mode == "random":
                    actions = {a: int(rng.integers(21)) for a in live}
                elif mode == "batched":
                    actions = {}
                    for team, policy in teams.items():
                        mine = [a for a in live if a.startswith(team)]
                        if mine:
                            chosen, _ = policy.act({"obs": np.stack([observations[a] for a in mine])}, None, True)
                            actions.update(zip(mine, chosen.tolist()))
                else:
                    actions = {a: int(teams[a.split("_")[0]].act({"obs": observations[a][None]}, None, True)[0][0])
                               for a in live}
                observations, *_ = env.step(actions)
                done += len(actions)
        out[mode] = done / (time.perf_counter() - start)
    env.close()
    return out


def train_run(minutes: float) -> dict:
    """`pzasync train` on battle for `minutes`, through its library form (module docstring, 2): the final
    evaluation is timed from the first game that sizes it to its last."""
    from pzasync.training import Trainer

    trainer = Trainer(ENV, minutes=minutes, options={"out_dir": "/tmp/pzasync-battle-runs"})
    trainer.build()
    banner = trainer.describe()
    run = trainer.train()
    started = time.monotonic()
    episodes = trainer.final_episodes_for(run)
    evaluation = trainer.final_evaluation(run, episodes) if episodes else None
    final_s = time.monotonic() - started
    rows = [json.loads(line) for line in (Path(run.run_dir) / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r.get("kind") == "eval"]
    return {"minutes": minutes, "agent_steps": run.agent_steps, "wall_s": round(run.wall_seconds, 1),
            "agent_steps_per_s": round(run.actor_steps_per_second), "eval_rows_while_training": len(evals),
            "eval_rounds_while_training": len({r["round"] for r in evals}),
            "first_eval_row_s": min((r["wall_s"] for r in evals), default=None),
            "eval_games_per_row": sorted({r["episodes"] for r in evals}),
            "final_evaluation_games": evaluation.episodes if evaluation is not None else 0,
            "final_evaluation_units": list(evaluation.units) if evaluation is not None else [],
            "final_evaluation_s": round(final_s, 1), "final_over_run": round(final_s / run.wall_seconds, 3),
            "notes": trainer.notes, "banner": banner}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--json", default="docs/bench/battle_run.json")
    args = parser.parse_args()
    report = {"command": "python " + " ".join(["benchmarks/battle_run.py", *sys.argv[1:]]), "env": ENV,
              "loops_agent_steps_per_s": {k: round(v) for k, v in loops(args.steps).items()},
              "train": train_run(args.minutes)}
    print(json.dumps(report, indent=1))
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
