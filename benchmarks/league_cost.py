"""What the self-play league costs the actor: acting throughput with and without it (docs/benchmarks.md).

    python benchmarks/league_cost.py [--steps 60000] [--repeats 3]

Both configurations are the same async run on connect_four (both seats share one DQN through an agent group;
the learner runs free, so the actor never waits for it and its rate is the acting cost); "league" adds the opponent mix latest=0.5;snapshot=0.5 with a snapshot every
2,000 decisions, so that snapshot opponents change often. Runs are interleaved (off, on, off, on, ...) and
the medians compared. Agent steps per second count every decision, the opponents' included.
"""

from __future__ import annotations

import argparse
import statistics

from pzasync import AsyncRunner, RunConfig

ENV = "pettingzoo.classic.connect_four_v3"


def run(league: bool, steps: int, seed: int) -> tuple[float, dict]:
    config = RunConfig(seed=seed, agent_groups={"players": ["player_0", "player_1"]},
                       league={"players": "latest=0.5;snapshot=0.5"} if league else {},
                       league_snapshot_every=2000)
    result = AsyncRunner(ENV, ("dqn", {"learning_starts": 1000}), config).run(agent_steps=steps)
    return result.actor_steps_per_second, (result.league or {}).get("games", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.repeats):
        for league in (False, True):
            rate, games = run(league, args.steps, seed=i)
            rates[league].append(rate)
            print(f"repeat {i}: league {'on ' if league else 'off'} {rate:8,.0f} agent-steps/s  {games}")
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median: off {off:,.0f}/s, on {on:,.0f}/s, on/off = {on / off:.3f}")


if __name__ == "__main__":
    main()
