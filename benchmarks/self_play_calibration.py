"""The calibration of tests/test_learning.py's self-play bar: the test's body over several seeds.

    python benchmarks/self_play_calibration.py STEPS SEEDS        # e.g. 60000 0,1,2,3,4

For each seed: one DQN for both tictactoe seats trained by the sequential runner in a self-play league for
STEPS agent steps, then the share of 100 games against the perfect player each seat draws or wins (the test's
bar: the first seat at least 80%). Prints one line per seed (docs/bench/tests_learning_bars.json).
"""

from __future__ import annotations

import sys
import tempfile

from pzasync import RunConfig, SequentialRunner
from pzasync.evaluation.evaluate import evaluate_against, load_run_policies

TTT = "pettingzoo.classic.tictactoe_v3"
OPTIONS = {"gamma": 0.9, "learning_starts": 500, "epsilon_decay_steps": 5000, "epsilon_end": 0.1,
           "target_update_interval": 100, "lr": 1e-3, "n_step": 3}


def held(steps: int, seed: int) -> dict[str, float]:
    """Each seat's share of draws or wins against the perfect player after `steps` agent steps of self-play."""
    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig(seed=seed, replay_ratio=0.5, agent_groups={"players": ["*"]},
                           league={"*": "latest=0.5;snapshot=0.5"}, league_snapshot_every=2000, out_dir=tmp)
        result = SequentialRunner(TTT, ("dqn", OPTIONS), config).run(agent_steps=steps)
        results = evaluate_against(TTT, load_run_policies(result.run_dir), "perfect", 100, seed=99)
        return {r.agent: sum(x >= 0 for x in r.returns) / len(r.returns) for r in results}


def main() -> None:
    steps, seeds = int(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
    for seed in seeds:
        shares = held(steps, seed)
        print(f"{steps} agent steps, seed {seed}: first seat {shares['player_1']:.0%}, "
              f"second seat {shares['player_2']:.0%}", flush=True)


if __name__ == "__main__":
    main()
