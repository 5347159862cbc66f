#!/usr/bin/env bash
# Pistonball from pixels: which frames let PPO see the ball (docs/bench/pistonball_frames.json).
#
# Every arm trains PPO with Butterfly-Baselines' tuned settings (config/pistonball_v4.json) for STEPS agent steps
# (or MINUTES), the arms side by side; only the frames differ:
#   recipe  SuperSuit's grey from the blue channel (mode B), 64x64, 3 stacked (the recipe's IMAGE_WRAPPERS)
#   full64  grey as luminance (mode full), 64x64, 3 stacked
#   full96  luminance, 96x96, 4 stacked: Butterfly-Baselines' frames
# Usage: bash benchmarks/pistonball_frames.sh OUT_DIR [DEVICE]   (DEVICE: cpu or cuda; ARMS, SEEDS, STEPS override)
set -u
OUT=${1:?usage: pistonball_frames.sh OUT_DIR [DEVICE]}
DEVICE=${2:-cpu}
STEPS=${STEPS:-400000}
MINUTES=${MINUTES:-5}
ARMS=${ARMS:-"recipe:0 full64:0 full96:0 full96:1"}
LEARNER="ppo,lr=0.000597,gamma=0.98,gae_lambda=0.8,clip=0.1,epochs=10,ent_coef=0.0994,vf_coef=0.967"
LEARNER="$LEARNER,max_grad_norm=0.9,minibatch_size=256,batch_size=8192,activation=relu"
mkdir -p "$OUT"
frames() {
  case $1 in
    recipe) echo "--wrapper color_reduction_v0,mode=B --wrapper resize_v1,x_size=64,y_size=64 --wrapper frame_stack_v1,stack_size=3" ;;
    full64) echo "--wrapper color_reduction_v0,mode=full --wrapper resize_v1,x_size=64,y_size=64 --wrapper frame_stack_v1,stack_size=3" ;;
    full96) echo "--wrapper color_reduction_v0,mode=full --wrapper resize_v1,x_size=96,y_size=96 --wrapper frame_stack_v1,stack_size=4" ;;
  esac
}
for arm in $ARMS; do
  name=${arm%%:*}; seed=${arm##*:}
  # shellcheck disable=SC2046
  "${PYTHON:-python}" -m pzasync.cli train pettingzoo.butterfly.pistonball_v6 --learner "$LEARNER" $(frames "$name") \
    --steps "$STEPS" --minutes "$MINUTES" --seed "$seed" --device "$DEVICE" --backpressure --env-workers 2 \
    --torch-threads 1 --eval-every 45 --eval-episodes 2 --final-episodes 6 --out "$OUT/$name-$seed" \
    > "$OUT/$name-$seed.log" 2>&1 &
done
wait
