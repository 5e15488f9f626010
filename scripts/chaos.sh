#!/usr/bin/env bash
# The chaos soak: elastic jobs of 8 agents, over c10d and over a 3-member
# etcd, under random faults drawn from a seed (agents and workers SIGKILLed or
# frozen, a node's network cut, an etcd member killed, agents joining, a
# hang), with the invariants checked after every job (scripts/chaos.py says
# which). Why: the suite tests each fault once; a trusted launcher also runs
# many at once for a long time. As root each node is a network namespace of
# its own (10.233.0.N, removed at the end); otherwise nodes are 127.0.0.N and
# no network is cut. scripts/test.sh (CI) runs a short one with a fixed seed.
#
#   bash scripts/chaos.sh                          # 10 minutes, a random seed
#   DURATION=3600 bash scripts/chaos.sh            # an hour
#   SEED=4242 DURATION=120 bash scripts/chaos.sh   # replay seed 4242's faults
#
# DURATION  seconds of faults (default 600); each job then runs to its end
# SEED      the faults' seed (default: from the clock; printed in the summary)
# AGENTS    agents per job (default 8)
# BACKEND   c10d, etcd or both (default: both, alternating)
# BUILD_DIR the build tree with ddprun (default build/)
# KEEP=1    keep the logs of a clean run too (a violation always keeps them)
# NETNS=0   nodes on 127.0.0.N even as root (no network cuts)
#
# One summary line: seed, time, jobs, faults by kind, violations (exit 1 if any).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
[[ -x $build_dir/ddprun ]] || { echo "chaos.sh: no $build_dir/ddprun: build it first" >&2; exit 2; }
args=(--duration "${DURATION:-600}" --agents "${AGENTS:-8}" --backend "${BACKEND:-both}"
  --ddprun "$build_dir/ddprun")
[[ -n ${SEED:-} ]] && args+=(--seed "$SEED")
[[ ${KEEP:-0} == 1 ]] && args+=(--keep)
[[ ${NETNS:-1} == 0 ]] && args+=(--no-netns)
exec python3 scripts/chaos.py "${args[@]}"
