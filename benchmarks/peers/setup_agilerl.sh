#!/usr/bin/env bash
# A virtualenv for the AgileRL peer (benchmarks/peers/agilerl_train.py), apart from pzasync's environment.
#
#   bash benchmarks/peers/setup_agilerl.sh VENV_DIR    # e.g. /tmp/pzpeers/agilerl, outside the repository
#
# torch is installed first and pinned, as in setup_sb3.sh, so pip keeps the CPU build it finds and nothing pulls a
# multi-GB CUDA build. pettingzoo and mpe2 are pinned as in pzasync's environment, so the peer trains on the env it
# is scored on. agilerl 2.58.0 accepts torch 2.13 (>=2.11) but declares pettingzoo<1.27, and every dependency of
# its RL, LLM, offline, cloud and HPO parts (jax, minari[all], google-cloud-storage, redis, hydra, pre-commit, ...).
# So agilerl and agilerl-arena (its namespace twin, which agilerl.algorithms imports) are installed with --no-deps,
# beside what importing IPPO and AsyncPettingZooVecEnv needs: agilerl's own pins where it has them (tensordict,
# peft and transformers from its cpu-llm extra, which agilerl 2.58.0 imports unconditionally through
# agilerl.distributed), and the versions measured in docs/benchmarks.md otherwise. VENV_DIR/versions.txt records all.
# pip then reports agilerl's declared dependencies left out, and pettingzoo 1.27.0 against its <1.27: expected.
set -euo pipefail
VENV="${1:?usage: setup_agilerl.sh VENV_DIR}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet "torch==2.13.0"
"$VENV/bin/pip" install --quiet "pettingzoo==1.27.0" "mpe2==1.1.1"
"$VENV/bin/pip" install --quiet --no-deps "agilerl==2.58.0" "agilerl-arena==1.29.0"
"$VENV/bin/pip" install --quiet "tensordict==0.13.0" "peft==0.21.0" "transformers==5.14.1" "accelerate==1.15.0" \
    "lazy-loader==0.6" "pydantic==2.14.4" "pyyaml==6.0.4" "rich==15.0.0" "dill==0.4.1" "fastrand==3.1.0" \
    "flatten-dict==0.5.0" "tqdm==4.70.1" "termcolor==3.3.0" "tabulate==0.10.0" "pillow==13.0.0" "wandb==0.31.0"
"$VENV/bin/pip" freeze > "$VENV/versions.txt"
"$VENV/bin/python" -c "from agilerl.algorithms import IPPO; from agilerl.vector.pz_async_vec_env import \
AsyncPettingZooVecEnv; import importlib.metadata as m, torch, pettingzoo; print('torch', torch.__version__, \
'| agilerl', m.version('agilerl'), '| pettingzoo', pettingzoo.__version__, '| mpe2', m.version('mpe2'))"
