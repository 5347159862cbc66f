"""What a recurrent core costs the actor: CPU time per decision of the whole acting loop (env steps, batched
forwards, transitions) with a feed-forward `ppo` policy against the same policy with `memory="gru"`, at 1 and
16 env copies, runs interleaved.

    python benchmarks/recurrent_acting.py --env pettingzoo.classic.connect_four_v3 --copies 1,16 --repeats 5

Each run is one `Actor` (runtime/actor.py) in this process, stepping its copies for `--steps` decisions with
the learners' policies (never updated) and writing to in-memory writers; the figure is this thread's CPU
time per decision (`time.thread_time`, so another process on the machine slows it less than wall time
would), median over the repeats. The GRU's extra work is its cell, the memory gathered and scattered per
(copy, agent), and the memory stored with each transition.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


class ListWriter:
    def __init__(self) -> None:
        self.rows = 0

    def write(self, t: object) -> None:
        self.rows += 1


class Counters:
    stop_requested = False

    def record_steps(self, *args: object) -> None:
        pass

    def record_episodes(self, *args: object) -> None:
        pass

    def get(self, *args: object) -> int:
        return 0


def one_run(env_id: str, copies: int, memory: str, steps: int, seed: int) -> float:
    from pzasync.core.environments import EnvSpec
    from pzasync.core.spaces import env_layouts, probe_info_masks
    from pzasync.learners.ppo import PPOLearner
    from pzasync.runtime.actor import ActingAgent, Actor

    spec = EnvSpec.of(env_id)
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    options = PPOLearner.validate_config("*", {"memory": memory})
    torch.manual_seed(seed)
    agents = {a: ActingAgent(a, layout, PPOLearner.build_policy(layout, options), learns=False, buffer=ListWriter(),
                             tracks=copies) for a, layout in layouts.items()}
    actor = Actor([spec.make() for _ in range(copies)], agents, Counters(), replay_ratio=None, max_lead=64,
                  backpressure=False)
    actor.run(agent_steps=500, seed=seed, keep_going=lambda: True, on_episode=lambda s: None)  # warm up
    start = time.thread_time()
    actor.run(agent_steps=steps, seed=seed + 1, keep_going=lambda: True, on_episode=lambda s: None)
    seconds = time.thread_time() - start
    actor.close()
    return seconds / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="pettingzoo.classic.connect_four_v3")
    parser.add_argument("--copies", default="1,16")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for copies in (int(c) for c in args.copies.split(",")):
        times: dict[str, list[float]] = {"none": [], "gru": []}
        for repeat in range(args.repeats):
            for memory in times:
                times[memory].append(one_run(args.env, copies, memory, args.steps, repeat))
        ff, gru = statistics.median(times["none"]), statistics.median(times["gru"])
        print(f"{copies:>3} copies: feed-forward {ff * 1e6:7.1f} us/decision, gru {gru * 1e6:7.1f} us/decision, "
              f"+{(gru - ff) * 1e6:.1f} us ({gru / ff:.2f}x); runs ff {[round(t * 1e6) for t in times['none']]} "
              f"gru {[round(t * 1e6) for t in times['gru']]}", flush=True)


if __name__ == "__main__":
    main()
