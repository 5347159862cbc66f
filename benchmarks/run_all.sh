#!/usr/bin/env bash
# Reproduces the bench reports of docs/benchmarks.md (about an hour on 2 cores; then python
# benchmarks/results_page.py rewrites the page's tables). Run from the repository root on an
# otherwise idle machine: the benchmark measures wall time. Outputs go to docs/bench/ (JSON + PNG).
# pzasync bench does not write its command line into a report: put it back as the report's "command" key
# (the page quotes it; tests/test_results_page.py asks for it).
set -euo pipefail
OUT=${OUT:-docs/bench}
mkdir -p "$OUT"
C4=pettingzoo.classic.connect_four_v3
# DQN for connect_four: a slower learning rate and target network than the defaults (tuned for tictactoe),
# with which player_0 reaches 0.9 against random within ~40k agent steps.
DQN="dqn,lr=1e-4,target_update_interval=1000,epsilon_decay_steps=40000"

step() { echo "== $* ($(date -u +%H:%M:%S))"; }

step "throughput: every configuration, DQN vs random"
pzasync bench $C4 --learner "$DQN" --learner-for player_1=random --steps 30000 --seeds 3 \
  --json "$OUT/c4_throughput.json" --plot "$OUT/c4_throughput.png"

step "time to target, 1 update per 4 agent steps, DQN vs random"
pzasync bench $C4 --learner "$DQN" --learner-for player_1=random --steps 80000 --replay-ratio 0.25 --seeds 5 \
  --configs sequential,async_double_buffer,async_snapshot,async_free --target 0.9 --eval-every 4000 \
  --eval-episodes 100 --json "$OUT/c4_target_r025.json" --plot "$OUT/c4_target_r025.png"

step "time to target, 1 update per agent step, DQN vs random"
pzasync bench $C4 --learner "$DQN" --learner-for player_1=random --steps 40000 --replay-ratio 1 --seeds 5 \
  --configs sequential,async_double_buffer --target 0.9 --eval-every 2000 --eval-episodes 100 \
  --json "$OUT/c4_target_r1.json" --plot "$OUT/c4_target_r1.png"

step "time to target, both players learning"
pzasync bench $C4 --learner "$DQN" --steps 100000 --replay-ratio 0.25 --seeds 5 \
  --configs sequential,async_double_buffer --target 0.85 --eval-every 5000 --eval-episodes 100 \
  --json "$OUT/c4_both_r025.json" --plot "$OUT/c4_both_r025.png"

for n in 2 4 8; do
  step "scaling: simple_spread N=$n, every agent a DQN learner"
  pzasync bench mpe2.simple_spread_v3 --env-arg N=$n --learner dqn --steps 20000 --seeds 2 \
    --configs bare_policy,sequential,async_double_buffer --json "$OUT/spread_n$n.json"
done

step "cores: connect_four on 1 core"
pzasync bench $C4 --learner "$DQN" --learner-for player_1=random --steps 20000 --seeds 3 --cores 1 \
  --configs bare_policy,sequential,async_double_buffer --json "$OUT/c4_1core.json"

if [ -x /tmp/peers/bin/python ]; then
  step "peers (tianshou, torchrl in a separate venv)"
  /tmp/peers/bin/python benchmarks/peers.py --steps 20000 --repeats 3 --pzasync-envs 0 --json "$OUT/peers.json"
fi
if python -c "import ray" 2>/dev/null; then
  step "Ray backend against shared memory; learners on simulated nodes"
  python benchmarks/ray_backend.py --steps 30000 --repeats 3 --cluster-steps 15000 \
    --json "$OUT/ray_backend.json" --plot "$OUT/ray_backend.png"
fi

step "vectorised acting: env copies, env workers, peers' vectorised collectors, time to target"
bash benchmarks/run_vector.sh

if [ -x /tmp/rllib-venv/bin/python ]; then
  step "PPO training against RLlib (ray[rllib] in a separate venv)"
  /tmp/rllib-venv/bin/python benchmarks/peers.py --training --steps 40960 --repeats 3 --json "$OUT/peers_training.json"
fi
step done
