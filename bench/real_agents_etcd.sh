#!/bin/bash
# N real ddprun agents (processes, one worker each: /bin/true) meeting through
# one etcd that this script starts on loopback: every agent must exit 0.
# A check that the join works past etcd's 128 operations per transaction with
# real agents, and how long a job of N agents takes end to end on this
# machine (agents, supervisors and workers all share its CPUs).
#
#   bash bench/real_agents_etcd.sh [N] [NNODES]     # N agents (default 130);
#                                                   # NNODES e.g. 120:130 (elastic)
set -u
N=${1:-130}
NNODES=${2:-$N}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DDPRUN=${DDPRUN:-$ROOT/build/ddprun}
ETCD=${ETCD:-/usr/bin/etcd}
[[ -x $DDPRUN ]] || { echo "real_agents_etcd: no $DDPRUN: build first" >&2; exit 2; }
[[ -x $ETCD ]] || { echo "real_agents_etcd: no $ETCD: apt-get install etcd-server" >&2; exit 2; }

dir=$(mktemp -d /tmp/ddprun-etcd-real-XXXXXX)
port=$((12000 + RANDOM % 5000))
peer=$((port + 1))
"$ETCD" --name=m0 --data-dir="$dir/m0" \
    --listen-client-urls="http://127.0.0.1:$port" --advertise-client-urls="http://127.0.0.1:$port" \
    --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="m0=http://127.0.0.1:$peer" --logger=zap --log-level=error >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
agents=()
cleanup() {
    for pid in "${agents[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    kill "$etcd_pid" 2>/dev/null
    wait "$etcd_pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
done

ulimit -n "$(ulimit -Hn)"
start=$(date +%s%N)
for i in $(seq 0 $((N - 1))); do
    "$DDPRUN" --nnodes="$NNODES" --nproc_per_node=1 --rdzv_backend=etcd \
        --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="real$N" --rdzv_conf=join_timeout=120 \
        /bin/true >"$dir/agent$i.out" 2>"$dir/agent$i.err" &
    agents+=($!)
done
failed=0
for i in "${!agents[@]}"; do
    if ! wait "${agents[$i]}"; then
        failed=$((failed + 1))
        echo "agent $i failed: $(tail -1 "$dir/agent$i.err")"
    fi
done
end=$(date +%s%N)
agents=()
echo "agents=$N nnodes=$NNODES failed=$failed wall_ms=$(((end - start) / 1000000))"
[[ $failed == 0 ]]
