#!/usr/bin/env bash
# Shows ddprun doing real work: installs what is needed, builds, then runs a
# real distributed job as two "nodes" on this machine (agents on 127.0.0.1 and
# 127.0.0.2, two workers each): first examples/train.cpp (C++, libtorch,
# ProcessGroupGloo), then examples/ddp_train.py (PyTorch DDP). Each trainer
# checks that every rank ends with identical parameters.
#
#   bash scripts/demo.sh
#   BUILD_DIR=build-x JOBS=1 bash scripts/demo.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}

bash scripts/install-deps.sh

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir" --target ddprun ddprun_store train -j"${JOBS:-$(nproc)}"

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# Two agents, as on two machines: the same command apart from --node_rank and
# --local_addr. Node 0 hosts the rendezvous store at --rdzv_endpoint.
two_nodes() {
  local port
  port=$(free_port)
  local common=(--nnodes=2 --nproc_per_node=2 --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=demo)
  echo "demo: ddprun ${common[*]} --node_rank={0,1} $*"
  "$build_dir/ddprun" "${common[@]}" --node_rank=0 --local_addr=127.0.0.1 "$@" &
  local node0=$!
  local rc1=0 rc0=0
  "$build_dir/ddprun" "${common[@]}" --node_rank=1 --local_addr=127.0.0.2 "$@" || rc1=$?
  wait "$node0" || rc0=$?
  echo "demo: node 0 exited $rc0, node 1 exited $rc1"
  ((rc0 == 0 && rc1 == 0))
}

two_nodes "$build_dir/examples/train"

# Debian's torch lives under /usr/bin/python3; the python3 first on PATH may be
# another interpreter without it.
PYTHON_EXEC=/usr/bin/python3 two_nodes examples/ddp_train.py
