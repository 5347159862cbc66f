#!/usr/bin/env bash
# Vectorised acting (docs/benchmarks.md, "Vectorised acting"): env copies per actor, actor processes and env workers against
# the single-env references, on connect_four and pistonball; the peers' vectorised collectors; and time to
# target against the one-ply player with 16 env copies against one. About 70 minutes on 2 cores.
# PEERS_PYTHON: a virtualenv with tianshou 2.0.1, stable-baselines3, supersuit, mpe2 and pzasync (default
# /tmp/peers/bin/python; the peer rows are skipped without it).
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS_PYTHON=${PEERS_PYTHON:-/tmp/peers/bin/python}
pzasync bench --steps 20000 --seeds 3 --configs bare_random,bare_policy,async_idle --envs-per-actor 1,4,16,64 \
    --env-workers 0,1 --json docs/bench/vector_c4.json --plot docs/bench/vector_c4.png
pzasync bench --steps 20000 --seeds 5 --configs bare_random,bare_policy,async_idle --envs-per-actor 1,16,64 \
    --actors 1,2 --json docs/bench/actors_c4.json --plot docs/bench/actors_c4.png
PYTHONPATH=. pzasync bench examples.pistonball_shared:make_env --env-arg continuous=False --group "pistons=piston_*" \
    --learner-for pistons=dqn --steps 8000 --seeds 3 --configs bare_random,bare_policy,async_idle \
    --envs-per-actor 1,16 --env-workers 0,1,2 --json docs/bench/vector_pistonball.json \
    --plot docs/bench/vector_pistonball.png
if [ -x "$PEERS_PYTHON" ]; then
    "$PEERS_PYTHON" benchmarks/peers.py --steps 20000 --repeats 3 --vector-envs 8 --pzasync-envs 16 \
        --json docs/bench/peers_vector.json
    "$PEERS_PYTHON" benchmarks/peers.py --steps 20000 --repeats 3 --vector-envs 8 --pzasync-envs 8 \
        --json docs/bench/peers_vector8.json
    "$PEERS_PYTHON" benchmarks/peers.py --simple-spread --vector-envs 8 --steps 24000 --repeats 3 \
        --json docs/bench/peers_spread.json
fi
# Time to target at two replay ratios: 0.1, where the learner sets the pace of both configurations, and 0.05,
# where the single-env actor does.
pzasync bench --learner "dqn,gamma=0.9" --group "players=*" --option "league={'*': 'latest=0.5;snapshot=0.5'}" \
    --steps 300000 --seeds 5 --configs async_double_buffer --envs-per-actor 1,16 --replay-ratio 0.1 --target 0.3 \
    --eval-every 15000 --eval-episodes 60 --json docs/bench/vector_yardstick_rr01.json \
    --plot docs/bench/vector_yardstick_rr01.png
pzasync bench --learner "dqn,gamma=0.9" --group "players=*" --option "league={'*': 'latest=0.5;snapshot=0.5'}" \
    --steps 500000 --seeds 5 --configs async_double_buffer --envs-per-actor 1,16 --replay-ratio 0.05 --target 0.3 \
    --eval-every 25000 --eval-episodes 60 --json docs/bench/vector_yardstick_rr005.json \
    --plot docs/bench/vector_yardstick_rr005.png
