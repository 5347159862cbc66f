#!/usr/bin/env bash
# The parallel path (docs/benchmarks.md, "The parallel path"): the actor with idle learners against the parallel
# API's own loop with one batched forward per policy and cycle (bare_parallel, the same network), and against the
# AEC loop with one forward per decision (bare_policy), at 1, 8 and 16 env copies, with 0, 1 and 2 env workers;
# then the peers' collection on the same envs (benchmarks/peers/parallel_collection.py: SB3 + SuperSuit, PufferLib
# 3.0). About 40 minutes on 2 cores. SB3_PYTHON / PUFFER_PYTHON: the peers' virtualenvs (benchmarks/peers/
# setup_sb3.sh, setup_pufferlib.sh; default /tmp/pzpeers/{sb3,puffer}/bin/python; a missing one is skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
SB3_PYTHON=${SB3_PYTHON:-/tmp/pzpeers/sb3/bin/python}
PUFFER_PYTHON=${PUFFER_PYTHON:-/tmp/pzpeers/puffer/bin/python}
CONFIGS=bare_policy,bare_parallel,async_idle
COPIES="--envs-per-actor 1,8,16 --env-workers 0,1,2"

bench() {  # NAME STEPS ENV [ARGS...]: one env's pzasync figures
    local name=$1 steps=$2
    shift 2
    pzasync bench "$@" --steps "$steps" --seeds 2 --configs "$CONFIGS" $COPIES --json "docs/bench/parallel_$name.json"
}
bench spread3 40000 mpe2.simple_spread_v3 --env-arg N=3 --learner dqn --group "team=agent_*"
bench spread20 40000 mpe2.simple_spread_v3 --env-arg N=20 --learner dqn --group "team=agent_*"
bench pursuit 40000 pettingzoo.sisl.pursuit_v5 --learner dqn --group "pursuers=pursuer_*"
bench pistonball 8000 pettingzoo.butterfly.pistonball_v6 --env-arg continuous=False --learner dqn,torso=mlp \
    --group "pistons=piston_*"
bench battle 400000 magent2.environments.battle_v4 --learner dqn,torso=mlp --group "red=red_*" --group "blue=blue_*"

peers() {  # NAME STEPS ENV [ARGS...]: the peers' collection, one virtualenv at a time
    local name=$1 steps=$2
    shift 2
    if [ -x "$SB3_PYTHON" ]; then
        "$SB3_PYTHON" benchmarks/peers/parallel_collection.py "$@" --steps "$steps" --copies 1,2 --repeats 3 \
            --peers sb3 --json "docs/bench/parallel_${name}_sb3.json"
    fi
    if [ -x "$PUFFER_PYTHON" ]; then
        "$PUFFER_PYTHON" benchmarks/peers/parallel_collection.py "$@" --steps "$steps" --copies 1,2 --repeats 3 \
            --peers pufferlib,pufferlib-loop --json "docs/bench/parallel_${name}_pufferlib.json"
    fi
}
peers spread3 40000 --env mpe2.simple_spread_v3 --env-arg N=3
peers spread20 40000 --env mpe2.simple_spread_v3 --env-arg N=20
peers pursuit 40000 --env pettingzoo.sisl.pursuit_v5
peers pistonball 8000 --env pettingzoo.butterfly.pistonball_v6 --env-arg continuous=False
peers battle 400000 --env magent2.environments.battle_v4
