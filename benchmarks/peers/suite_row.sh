#!/usr/bin/env bash
# One row of the learning suite's table (docs/benchmarks.md, "Learning suite"): pzasync's suite runs of ENV and the
# SB3 peer's runs of it, MINUTES of wall time per seed, SEEDS seeds, one run at a time; then both sides scored alike
# by pzasync's evaluator and drawn side by side.
#
#   bash benchmarks/peers/suite_row.sh ENV OUT [MINUTES=10] [SEEDS=3] [SB3_VENV=/tmp/pzpeers/sb3]
#   bash benchmarks/peers/suite_row.sh pettingzoo.sisl.pursuit_v5 rows/pursuit
#
# Run it in pzasync's environment, from the repository's root, on an otherwise quiet machine: every run is timed
# by the wall clock. SB3_VENV is made by benchmarks/peers/setup_sb3.sh. Set PEER=none to run pzasync's side alone,
# or SKIP_PZASYNC=1 to add the peer to an OUT whose suite/ is already there.
#
# OUT/suite/ is `pzasync suite ENV`'s (suite.json, the plot, the runs); OUT/sb3_s{0,1,...}/ are the peer's runs
# (run.json, policy.pt) with score10.json (the suite's at-budget episodes: 10 on seed 9001 + seed) and score50.json
# (the suite's baseline episodes: 50 on seed 10007, random players beside); OUT/side_by_side.{json,png} is the row.
# On Box-action envs (pistonball, multiwalker) both sides are also scored sampling their Gaussians
# (score10_sampled.json, score50_sampled.json; OUT/side_by_side_sampled.{json,png}); ACTING="greedy sampled"
# asks for that on any env.
#
# EVAL_EPISODES (10) and BASELINE_EPISODES (50) set the at-budget and baseline episode counts of both sides; on
# pursuit (episodes of 500 cycles of 8 agents, 4,000 agent steps each) they default to 5 and 20.
set -euo pipefail
ENV_ID="${1:?usage: suite_row.sh ENV OUT [MINUTES] [SEEDS] [SB3_VENV]}"
OUT="${2:?usage: suite_row.sh ENV OUT [MINUTES] [SEEDS] [SB3_VENV]}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
MINUTES="${3:-10}"
SEEDS="${4:-3}"
VENV="${5:-/tmp/pzpeers/sb3}"
PEERS="$(dirname "$0")"
BUDGET_S="$(awk -v m="$MINUTES" 'BEGIN { print m * 60 }')"

# The peer's script and arguments per env: SB3 + SuperSuit PPO with one shared policy (its tutorial's settings,
# sb3_ppo.py's TUTORIALS), with the wrappers that give every agent one space and keep dying agents in the vector
# env; MaskablePPO for the turn-based games with action masks.
PEER_SCRIPT="sb3_ppo.py"
DEFAULT_ACTING="greedy"
case "$ENV_ID" in
  *pistonball_v6|*multiwalker_v9) DEFAULT_ACTING="greedy sampled" ;;
esac
ACTING="${ACTING:-$DEFAULT_ACTING}"
DEFAULT_EVAL_EPISODES=10
DEFAULT_BASELINE_EPISODES=50
case "$ENV_ID" in
  *pursuit_v5) DEFAULT_EVAL_EPISODES=5; DEFAULT_BASELINE_EPISODES=20 ;;
esac
EVAL_EPISODES="${EVAL_EPISODES:-$DEFAULT_EVAL_EPISODES}"
BASELINE_EPISODES="${BASELINE_EPISODES:-$DEFAULT_BASELINE_EPISODES}"
case "$ENV_ID" in
  *simple_speaker_listener_v4) PEER_ARGS=(--wrapper pad_observations_v0 --wrapper pad_action_space_v0) ;;
  *knights_archers_zombies_v11) PEER_ARGS=(--wrapper black_death_v3) ;;
  *pistonball_v6) PEER_ARGS=(--wrapper color_reduction_v0,mode=full --wrapper resize_v1,x_size=64,y_size=64
                             --wrapper frame_stack_v1,stack_size=3) ;;
  *connect_four_v3|*leduc_holdem_v4) PEER_SCRIPT="sb3_maskable.py"; PEER_ARGS=() ;;
  *) PEER_ARGS=() ;;
esac

echo "$(date -u +%FT%TZ) start: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/row.log"
if [ -z "${SKIP_PZASYNC:-}" ]; then
  pzasync suite "$ENV_ID" --minutes "$MINUTES" --seeds "$SEEDS" --eval-episodes "$EVAL_EPISODES" \
      --baseline-episodes "$BASELINE_EPISODES" --out "$OUT/suite"
  echo "$(date -u +%FT%TZ) pzasync done: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/row.log"
fi
PEER_FLAGS=()
if [ "${PEER:-sb3}" != "none" ]; then
  for ((s = 0; s < SEEDS; s++)); do
    "$VENV/bin/python" "$PEERS/$PEER_SCRIPT" "$ENV_ID" "${PEER_ARGS[@]}" --seconds "$BUDGET_S" --seed "$s" \
        --out "$OUT/sb3_s$s"
    echo "$(date -u +%FT%TZ) SB3 seed $s done: load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/row.log"
  done
  for acting in $ACTING; do
    suffix="$([ "$acting" = greedy ] || echo "_$acting")"
    for ((s = 0; s < SEEDS; s++)); do
      python "$PEERS/score.py" "$OUT/sb3_s$s" --episodes "$EVAL_EPISODES" --seed $((9001 + s)) --acting "$acting" \
          --json "$OUT/sb3_s$s/score10$suffix.json"
      python "$PEERS/score.py" "$OUT/sb3_s$s" --episodes "$BASELINE_EPISODES" --seed 10007 --baselines --acting "$acting" \
          --json "$OUT/sb3_s$s/score50$suffix.json"
    done
  done
  PEER_FLAGS=(--peer "SB3 ($PEER_SCRIPT)=$OUT/sb3_s*")
fi
for acting in $ACTING; do
  suffix="$([ "$acting" = greedy ] || echo "_$acting")"
  python "$PEERS/side_by_side.py" "$OUT/suite" "${PEER_FLAGS[@]}" --acting "$acting" --out "$OUT/side_by_side$suffix"
done
echo "$(date -u +%FT%TZ) done" | tee -a "$OUT/row.log"
