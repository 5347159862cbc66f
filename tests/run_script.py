"""A training run in its own process, for signal tests: python run_script.py OUT_DIR SECONDS [ENV_WORKERS [ACTORS]]
(with ENV_WORKERS, 4 env copies stepped by that many env worker processes; with ACTORS, that many actor
processes)."""

import json
import sys

from pzasync import AsyncRunner, RunConfig

if __name__ == "__main__":
    out_dir, seconds = sys.argv[1], float(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    vector = {"envs_per_actor": 4, "env_workers": workers} if workers else {}
    if len(sys.argv) > 4:
        vector["actors"] = int(sys.argv[4])
    learners = {"player_0": ("dqn", {"learning_starts": 200}), "player_1": ("dqn", {"learning_starts": 200})}
    print("starting", flush=True)
    result = AsyncRunner("pettingzoo.classic.connect_four_v3", learners,
                         RunConfig(seed=0, out_dir=out_dir, process_timeout_s=20, learner_processes=2,  # any cores
                                   **vector)).run(seconds=seconds)
    print(json.dumps({"stopped_because": result.stopped_because, "agent_steps": result.agent_steps,
                      "run_dir": result.run_dir}), flush=True)
