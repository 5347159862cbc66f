#!/usr/bin/env bash
# A virtualenv for the PufferLib peer (benchmarks/peers/parallel_collection.py), apart from pzasync's environment:
# PufferLib 3.0.0 beside PettingZoo 1.27: the steps below are what it takes to install (its release does not build as is).
#
#   bash benchmarks/peers/setup_pufferlib.sh VENV_DIR        # e.g. /tmp/pzpeers/puffer, outside the repository
#
# - torch first and pinned, so that pip keeps the CPU build it finds (a wheel in pip's find-links, or a CPU index
#   given by PIP_EXTRA_INDEX_URL).
# - PufferLib 3.0.0 exists only as a source distribution. Its setup.py downloads raylib and box2d for its own C
#   envs ("Ocean"), which fails offline; NO_OCEAN=1 skips them but then raises NameError: c_extension_paths (the
#   name is defined only under `if not NO_OCEAN:`). The unpacked sdist is mended with `c_extension_paths = []`
#   before that `if`. pip's download of the sdist runs the same setup.py for its metadata, so during the download
#   alone a sitecustomize gives that name as a builtin.
# - An nvcc on PATH (a shim without a GPU here) makes it build a CUDA extension and fail on CUDA_HOME: the build
#   runs with every directory holding an nvcc left out of PATH, which gives the CPU extension (pufferlib._C).
# - It pins numpy<2, gymnasium<=0.29.1, pettingzoo<=1.24.1 and gym<=0.23, which PettingZoo 1.27 (gymnasium>=1.0)
#   contradicts: built with --no-deps --no-build-isolation (build deps first), then its runtime deps by hand and
#   the envs at the versions of pzasync's environment and of setup_sb3.sh (numpy 2.x included). pip then prints
#   "dependency conflicts" with those pins (and with the loggers it asks for: wandb, neptune, pynvml...): expected.
# - `import pufferlib` makes a ./resources symlink in the current directory, so the check below imports it from a
#   scratch directory (parallel_collection.py does the same).
# VENV_DIR/versions.txt records every version.
set -euo pipefail
VENV="${1:?usage: setup_pufferlib.sh VENV_DIR}"
VENV="$(mkdir -p "$VENV" && cd "$VENV" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet "torch==2.13.0"
"$VENV/bin/pip" install --quiet "setuptools==84.2.1" "wheel==0.48.0" "Cython==3.3.1" "numpy<2"  # its build deps

BUILD_PATH="$PATH"
while NVCC="$(PATH="$BUILD_PATH" command -v nvcc)"; do
    BUILD_PATH="$(tr ':' '\n' <<<"$BUILD_PATH" | grep -vxF "$(dirname "$NVCC")" | paste -sd:)"
done

mkdir "$WORK/shim"
echo 'import builtins; builtins.c_extension_paths = []  # for the metadata step of pip download only' \
    > "$WORK/shim/sitecustomize.py"
NO_OCEAN=1 PATH="$BUILD_PATH" PYTHONPATH="$WORK/shim" "$VENV/bin/pip" download --quiet --no-deps \
    --no-build-isolation --no-binary pufferlib "pufferlib==3.0.0" -d "$WORK"
tar xzf "$WORK/pufferlib-3.0.0.tar.gz" -C "$WORK"
"$VENV/bin/python" - "$WORK/pufferlib-3.0.0/setup.py" <<'EOF'
import sys
from pathlib import Path

path = Path(sys.argv[1])
old = "c_extensions = []\nif not NO_OCEAN:\n"
text = path.read_text()
assert text.count(old) == 1, "setup.py is not the 3.0.0 one this patch was made for"
path.write_text(text.replace(old, "c_extensions = []\nc_extension_paths = []\nif not NO_OCEAN:\n"))
EOF
(cd "$WORK/pufferlib-3.0.0" && NO_OCEAN=1 PATH="$BUILD_PATH" "$VENV/bin/pip" install --quiet --no-deps \
    --no-build-isolation .)

# PufferLib's runtime deps (those emulation, vector and pufferl import), then the envs and their extras' deps:
# pettingzoo[sisl] (pymunk, Box2D), [butterfly] (pymunk); pygame-ce and scipy come with mpe2 and magent2.
"$VENV/bin/pip" install --quiet "gym==0.23.0" "psutil==7.2.2" "rich==15.0.0" "rich-argparse==1.8.0" \
    "heavyball==3.2.1" "pyro-ppl==1.9.2"
"$VENV/bin/pip" install --quiet "numpy==2.4.6" "gymnasium==1.4.0" "pettingzoo==1.27.0" "mpe2==1.1.1" \
    "magent2==0.3.4" "pymunk==7.3.1" "Box2D==2.3.10"
"$VENV/bin/pip" freeze > "$VENV/versions.txt"
(cd "$WORK" && "$VENV/bin/python" -c "import importlib.metadata, torch, pufferlib, pufferlib.emulation, pufferlib.vector, pufferlib.pufferl, \
pettingzoo, mpe2, magent2, numpy; from pufferlib import _C; print('torch', torch.__version__, \
'| pufferlib', importlib.metadata.version('pufferlib'), '| pettingzoo', pettingzoo.__version__, '| numpy', numpy.__version__)")
