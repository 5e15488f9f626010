#!/usr/bin/env bash
# Checks ddprun against a real NVIDIA driver: GPU discovery through NVML, one
# device per worker, the inherited-list and too-many-workers cases, a CUDA
# worker that holds GPU memory when ddprun is SIGKILLed, and the real CPU/NUMA
# topology. Needs a machine with at least one GPU and a python3 with CUDA torch.
#
#   bash scripts/gpu-check.sh [path/to/ddprun]      (default build/ddprun)
#
# Prints one line per check, PASS or FAIL, and exits 1 if any failed.
set -u
ddprun=$(realpath "${1:-build/ddprun}")
python=${PYTHON_EXEC:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

check() {  # check NAME CONDITION-EXIT-STATUS DETAIL
    if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1: $3"; failed=1; fi
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "machine: $gpus GPU(s); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
[ "$gpus" -gt 0 ] || { echo "FAIL no GPU visible to nvidia-smi"; exit 1; }

cat >"$work/probe.py" <<'EOF'
import os, sys, torch
import torch.distributed as dist
cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
n = torch.cuda.device_count()
name = torch.cuda.get_device_name(0) if n else "-"
ok = True
if os.environ.get("PROBE_NCCL") == "1":
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    ok = t.item() == sum(range(1, dist.get_world_size() + 1))
    dist.destroy_process_group()
print(f"probe rank={os.environ['RANK']} local_rank={os.environ['LOCAL_RANK']} cvd={cvd} "
      f"cuda_devices={n} name={name} ok={ok}", flush=True)
sys.exit(0 if ok else 1)
EOF

# 1. Discovery: no CUDA_VISIBLE_DEVICES, --nproc_per_node=gpu starts one worker per GPU,
#    worker i sees device i only and CUDA sees exactly one device; NCCL works.
out=$(env -u CUDA_VISIBLE_DEVICES PROBE_NCCL=1 "$ddprun" --nproc_per_node=gpu "$work/probe.py" 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
started=$(echo "$out" | grep -c 'probe rank=')
good=$(echo "$out" | grep -E 'probe rank=([0-9]+) local_rank=\1 cvd=\1 cuda_devices=1 .* ok=True' | wc -l)
check "nproc_per_node=gpu discovers $gpus GPU(s), one per worker, NCCL all_reduce" \
    $(( rc != 0 || started != gpus || good != gpus )) "rc=$rc started=$started good=$good"

# 2. The dry run shows the discovered devices.
out=$(env -u CUDA_VISIBLE_DEVICES "$ddprun" --dry-run --nproc_per_node=gpu "$work/probe.py" 2>&1)
echo "$out" | sed 's/^/    /'
check "dry run lists $gpus worker(s)" $(( $(echo "$out" | grep -c 'probe.py') != gpus )) "$out"

# 3. An inherited list is used verbatim: the last GPU only, by index.
last=$((gpus - 1))
out=$(CUDA_VISIBLE_DEVICES=$last "$ddprun" --nproc_per_node=gpu "$work/probe.py" 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
echo "$out" | grep -q "probe rank=0 local_rank=0 cvd=$last cuda_devices=1"
found=$?
check "inherited CUDA_VISIBLE_DEVICES=$last is kept" $(( rc != 0 || found != 0 )) "rc=$rc"

# 4. More workers than GPUs: exit 2, one line, nothing started.
out=$(env -u CUDA_VISIBLE_DEVICES "$ddprun" --nproc_per_node=$((gpus + 1)) "$work/probe.py" 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
check "more workers than GPUs is a usage error (exit 2)" \
    $(( rc != 2 || $(echo "$out" | grep -c 'probe rank=') != 0 )) "rc=$rc"

# 5. SIGKILL to ddprun while a worker holds GPU memory: no process is left on the GPU.
cat >"$work/hold.py" <<'EOF'
import os, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB
open(os.environ["HOLD_READY"] + "." + os.environ["RANK"], "w").write(str(os.getpid()))
time.sleep(600)
EOF
env -u CUDA_VISIBLE_DEVICES HOLD_READY="$work/ready" "$ddprun" --nproc_per_node=gpu "$work/hold.py" \
    >"$work/hold.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ "$(ls "$work"/ready.* 2>/dev/null | wc -l)" -ge "$gpus" ] && break; sleep 0.1; done
pids=$(cat "$work"/ready.* 2>/dev/null | tr '\n' ' ')
on_gpu_before=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')
echo "    workers $pids; on the GPU: $on_gpu_before"
kill -KILL "$launcher"
wait "$launcher" 2>/dev/null
survivors=""
for _ in $(seq 100); do
    survivors=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && survivors="$survivors $p"; done
    [ -z "$survivors" ] && break
    sleep 0.1
done
on_gpu_after=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')
echo "    after SIGKILL: survivors '$survivors'; on the GPU: '$on_gpu_after'"
check "SIGKILL to ddprun leaves no worker holding the GPU" \
    $(( ${#pids} == 0 || ${#survivors} != 0 )) "workers '$pids' survivors '$survivors'"
for p in $survivors; do kill -KILL "$p" 2>/dev/null; done

# 6. Real topology: --numa-binding=node gives each worker a non-empty CPU set.
out=$(env -u CUDA_VISIBLE_DEVICES "$ddprun" --nproc_per_node=gpu --numa-binding=node \
    sh -c 'echo "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2) omp=$OMP_NUM_THREADS"' 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
check "--numa-binding=node on the real topology" \
    $(( rc != 0 || $(echo "$out" | grep -c 'cpus=[0-9]') != gpus )) "rc=$rc"

# 7. Figures, not checks: launch time and launcher memory next to this machine's torchrun.
"$python" "$(dirname "$0")/../bench/launch_compare.py" "$ddprun" | sed 's/^/    /'

[ "$failed" -eq 0 ] && echo "all GPU checks passed" || echo "some GPU checks FAILED"
exit "$failed"
