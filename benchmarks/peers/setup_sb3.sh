#!/usr/bin/env bash
# A virtualenv for the SB3 peers (benchmarks/peers/sb3_ppo.py, SB3 + SuperSuit PPO; sb3_maskable.py, sb3-contrib's
# MaskablePPO on turn-based games; parallel_collection.py's sb3 rows), apart from pzasync's environment.
#
#   bash benchmarks/peers/setup_sb3.sh VENV_DIR        # e.g. /tmp/pzpeers/sb3, outside the repository
#
# torch is installed first and pinned, so that pip keeps the CPU build it finds (a wheel in pip's find-links,
# or a CPU index given by PIP_EXTRA_INDEX_URL) and stable-baselines3 does not pull a multi-GB CUDA build.
# Versions pinned to those measured in docs/benchmarks.md ("The peers"): pettingzoo and mpe2 as
# in pzasync's environment, so the peer trains on the env it is scored on; VENV_DIR/versions.txt records all.
set -euo pipefail
VENV="${1:?usage: setup_sb3.sh VENV_DIR}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet "torch==2.13.0"
"$VENV/bin/pip" install --quiet "stable-baselines3==2.9.2" "sb3-contrib==2.9.2" "supersuit==3.11.0" "pettingzoo==1.27.0" "mpe2==1.1.1" \
    "pymunk==7.3.1" "Box2D==2.3.10" "rlcard==1.2.0" \
    "magent2==0.3.4"  # pistonball, multiwalker, leduc (pettingzoo[butterfly,sisl,classic]), battle; pygame-ce comes with supersuit
"$VENV/bin/pip" freeze > "$VENV/versions.txt"
"$VENV/bin/python" -c "import torch, stable_baselines3, supersuit, pettingzoo, mpe2, magent2; print('torch', torch.__version__, \
'| stable-baselines3', stable_baselines3.__version__, '| supersuit', supersuit.__version__, \
'| pettingzoo', pettingzoo.__version__)"
