"""DQN's `fused_adam` (torch.optim.Adam(fused=True)) against torch's loop over the parameters, paired on one
machine: the default connect_four learner's updates per second on one core (benchmarks/learner_updates.py
--paired, rounds alternating the two), and whole runs of `pzasync bench` (sequential and async runners, 1 update
per 4 agent steps, player_1 random) alternating the two settings round by round. Writes the report the results
page's cleanup section reads (docs/bench/fused_adam_c4.json).

    python benchmarks/fused_adam.py OUT docs/bench/fused_adam_c4.json              # measure into OUT, then report
    python benchmarks/fused_adam.py OUT docs/bench/fused_adam_c4.json --assemble   # report what OUT holds
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

LEARNER = "dqn,gamma=0.9,epsilon_end=0.2,mirror=True"
#: `pzasync bench`'s learner for each setting (the cleanup table's: plain `dqn` with its defaults).
BENCH_SPECS = {"loop": "dqn", "fused": "dqn,fused_adam=True"}
BENCH = ("pzasync bench pettingzoo.classic.connect_four_v3 --learner {spec} --learner-for player_1=random "
         "--steps 12000 --seeds 2 --configs sequential,async_double_buffer --json {out}")


def learner_file(out: Path) -> Path:
    return out / "fused_learner.jsonl"


def bench_file(out: Path, setting: str, round_: int) -> Path:
    return out / f"bench_{BENCH_SPECS[setting].replace(',', '_').replace('=', '_')}_r{round_}.json"


def measure(out: Path, rounds: int, learner_rounds: int) -> None:
    """Run the paired learner rounds, then `rounds` rounds of the bench, the loop first in each."""
    out.mkdir(parents=True, exist_ok=True)
    with learner_file(out).open("w") as f:
        subprocess.run(["taskset", "-c", "1", sys.executable, "benchmarks/learner_updates.py", "--paired", ".", ".",
                        "--learner-b", f"{LEARNER},fused_adam=True", "--updates", "300", "--rounds",
                        str(learner_rounds)], stdout=f, check=True, cwd=Path(__file__).parents[1])
    for round_ in range(1, rounds + 1):
        for setting in ("loop", "fused"):
            subprocess.run(BENCH.format(spec=BENCH_SPECS[setting], out=bench_file(out, setting, round_)).split(),
                           check=True, stdout=subprocess.DEVNULL)


def assemble(out: Path) -> dict:
    """The report: the learner's paired rounds (fused over loop: checkout B's learner is the fused one) and each
    bench round's median agent-steps/s."""
    lines = [json.loads(line) for line in learner_file(out).read_text().splitlines() if line.startswith("{")]
    rounds = [line for line in lines if "round" in line]
    summary = next(line for line in lines if "median_ratio_b_over_a" in line)
    bench: dict[str, dict[str, list[float]]] = {"loop": {}, "fused": {}}
    round_ = 1
    while bench_file(out, "loop", round_).exists() and bench_file(out, "fused", round_).exists():
        for setting in ("loop", "fused"):
            data = json.loads(bench_file(out, setting, round_).read_text())
            for config, figures in data["summary"].items():
                bench[setting].setdefault(config, []).append(figures["agent_steps_per_s"]["median"])
        round_ += 1
    return {
        "what": "DQN's fused_adam (torch.optim.Adam(fused=True)) against torch's loop over the parameters "
                "(fused_adam=False), one machine: the default connect_four learner's updates/s on one core in paired "
                "rounds of 300 updates, and `pzasync bench` on connect_four (plain dqn, player_1 random, 1 update "
                "per 4 agent steps, 12,000 agent steps x 2 seeds a run), the two settings alternating run by run; "
                "per round, each run's median over its seeds.",
        "command": f"python benchmarks/fused_adam.py OUT docs/bench/fused_adam_c4.json (rounds of: taskset -c 1 "
                   f"python benchmarks/learner_updates.py --paired . . --learner-b {LEARNER},fused_adam=True "
                   f"--updates 300 --rounds {len(rounds)}; "
                   + BENCH.format(spec="dqn[,fused_adam=True]", out="OUT/RUN.json") + ")",
        "learner": {"updates_per_s": {"fused": summary["b_median_updates_per_s"],
                                      "loop": summary["a_median_updates_per_s"]},
                    "fused_over_loop_per_round": [round(r["b_over_a"], 3) for r in rounds],
                    "fused_over_loop": round(statistics.median(r["b_over_a"] for r in rounds), 3),
                    "rounds": rounds},
        "bench_agent_steps_per_s": bench,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="where the raw outputs go (or are, with --assemble)")
    parser.add_argument("report", type=Path)
    parser.add_argument("--rounds", type=int, default=4, help="bench rounds (each runs both settings)")
    parser.add_argument("--learner-rounds", type=int, default=6)
    parser.add_argument("--assemble", action="store_true", help="only write the report from OUT")
    args = parser.parse_args()
    if not args.assemble:
        measure(args.out, args.rounds, args.learner_rounds)
    args.report.write_text(json.dumps(assemble(args.out), indent=1) + "\n")


if __name__ == "__main__":
    main()
