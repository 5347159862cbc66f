#!/usr/bin/env bash
# Async against sequential, time to a win rate against the one-ply player (docs/benchmarks.md,
# "Time to target against the one-ply player"). About 37 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
pzasync bench --learner "dqn,gamma=0.9" --group "players=*" --option "league={'*': 'latest=0.5;snapshot=0.5'}" \
    --steps 300000 --seeds 5 --configs sequential,async_double_buffer --replay-ratio 0.1 --target 0.3 \
    --eval-every 15000 --eval-episodes 60 --json docs/bench/c4_yardstick.json --plot docs/bench/c4_yardstick.png
