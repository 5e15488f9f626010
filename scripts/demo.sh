#!/usr/bin/env bash
# Shows ddprun doing real work: builds it, then launches a PyTorch DDP job
# (gloo, CPU) whose ranks check each other (examples/ddp_train.py).
#
#   bash scripts/demo.sh
#   BUILD_DIR=build-x JOBS=1 bash scripts/demo.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}

bash scripts/install-deps.sh

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir" --target ddprun -j"${JOBS:-$(nproc)}"

# Debian's torch lives under /usr/bin/python3; the python3 first on PATH may be
# another interpreter without it.
echo "demo: ddprun --nproc_per_node=2 examples/ddp_train.py"
PYTHON_EXEC=/usr/bin/python3 "$build_dir/ddprun" --nproc_per_node=2 examples/ddp_train.py
