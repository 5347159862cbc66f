"""What the self-play league costs the actor: acting throughput with and without it (docs/benchmarks.md).

    python benchmarks/league_cost.py [--steps 60000] [--repeats 3] [--envs-per-actor N] [--frozen]

Both configurations are the same async run on connect_four (both seats share one DQN through an agent group; the
learner runs free, so the actor never waits for it and its rate is the acting cost); "league" adds the opponent mix
latest=0.5;snapshot=0.5 with a snapshot every 2,000 decisions, so that snapshot opponents change often. Runs are
interleaved (off, on, off, on, ...) and the medians compared. Agent steps per second count every decision, the
opponents' included.

League episodes against past snapshots are shorter than self-play ones, so part of the measured drop is the
env's own reset cost rather than the league's. `--frozen` trains with a learning rate of 1e-12: versions are
still published and snapshotted, but every snapshot plays like the latest policy, so both configurations
play the same distribution of games and what remains is the league's own cost.
"""

from __future__ import annotations

import argparse
import statistics

from pzasync import AsyncRunner, RunConfig

ENV = "pettingzoo.classic.connect_four_v3"


def run(league: bool, steps: int, seed: int, envs_per_actor: int = 1, frozen: bool = False) -> tuple[float, dict]:
    config = RunConfig(seed=seed, agent_groups={"players": ["player_0", "player_1"]},
                       league={"players": "latest=0.5;snapshot=0.5"} if league else {},
                       league_snapshot_every=2000, envs_per_actor=envs_per_actor)
    options = {"learning_starts": 1000, **({"lr": 1e-12} if frozen else {})}
    result = AsyncRunner(ENV, ("dqn", options), config).run(agent_steps=steps)
    return result.actor_steps_per_second, (result.league or {}).get("games", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs-per-actor", type=int, default=1)
    parser.add_argument("--frozen", action="store_true", help="learning rate 1e-12: snapshots play like the latest")
    args = parser.parse_args()
    rates: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.repeats):
        for league in (False, True):
            rate, games = run(league, args.steps, i, args.envs_per_actor, args.frozen)
            rates[league].append(rate)
            print(f"repeat {i}: league {'on ' if league else 'off'} {rate:8,.0f} agent-steps/s  {games}")
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median: off {off:,.0f}/s, on {on:,.0f}/s, on/off = {on / off:.3f}")


if __name__ == "__main__":
    main()
