#!/usr/bin/env bash
# Runs the ddprun benchmark and prints one table per question: how much does
# launching cost next to a plain shell loop (and torchrun), how fast are logs
# carried next to `cat`, and how much memory does the launcher take; then,
# with two agents on loopback, how fast a failure on one node stops the
# other, what a real 2x2 training job costs next to the same processes
# started by hand, and what a multi-node agent takes in memory next to a
# process that only loads libtorch; how long a restart takes next to starting
# the same workers by hand, how the rendezvous scales with N real agents
# and with N simulated ones, and how fast an elastic job (--nnodes=MIN:MAX)
# runs again after a node joins, dies, hangs or leaves; last, how fast
# --hang-timeout stops a hung job, what a progress beat costs a worker and
# whether beats slow the output path; and for --hosts, the preflight's fan-out
# to N hosts and a 3-host job over ssh next to its agents started by hand; and what
# --metrics-port's scrapes cost the agent. See bench/README.md for
# what each row means. Bounded to 15 minutes; about 8-11 on 2 cores.
#
#   bash bench/run.sh                      # uses build/, builds what is missing
#   DDPRUN=/path/to/ddprun bash bench/run.sh --reps 50 --nproc 16
#   bash bench/run.sh --torchrun off       # skip torchrun even if installed
#   bash bench/run.sh --multinode off      # skip what needs the store plugin
#   bash bench/run.sh --only restart,i     # only these sections (names or letters)
#   bash bench/run.sh --only elastic       # (j) alone, about 2 minutes
#   bash bench/run.sh --only hangs         # (k) alone, about a minute
#   bash bench/run.sh --only hosts         # (l) alone, about a minute (root: a real sshd)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

ddprun=${DDPRUN:-build/ddprun}
if [[ -z "${DDPRUN:-}" && ! -x "$ddprun" ]]; then
  echo "bench: $ddprun not found; building it" >&2
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build --target ddprun -j"${JOBS:-$(nproc)}" >/dev/null
fi
# (k) and (l) run tests/fake_worker beside ddprun; (l) also bench/stand_in_ssh and
# bench/sshd_for_bench.
if [[ -z "${DDPRUN:-}" && ( ! -x build/tests/fake_worker || ! -x build/bench/stand_in_ssh \
        || ! -x build/bench/sshd_for_bench ) ]]; then
  echo "bench: building tests/fake_worker, bench/stand_in_ssh and bench/sshd_for_bench" >&2
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build --target fake_worker stand_in_ssh sshd_for_bench -j"${JOBS:-$(nproc)}" >/dev/null
fi
# The multi-node sections need the store plugin beside ddprun, the C++
# example and bench/rendezvous_scale; they exist only where libtorch is
# installed, so a build without them skips those sections instead of failing.
if [[ -z "${DDPRUN:-}" && ( ! -e build/libddprun_store.so || ! -x build/examples/train \
        || ! -x build/bench/rendezvous_scale || ! -x build/bench/status_scale ) ]] \
    && [[ " $* " != *" --multinode off "* && " $* " != *" --multinode=off "* ]]; then
  echo "bench: building the store plugin, examples/train, bench/rendezvous_scale and bench/status_scale" >&2
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build --target ddprun_store train rendezvous_scale status_scale -j"${JOBS:-$(nproc)}" >/dev/null \
    || echo "bench: could not build them (no libtorch?); the multi-node sections will be skipped" >&2
fi
if [[ ! -x /usr/bin/time ]]; then
  echo "bench: /usr/bin/time (GNU time) is missing; run scripts/install-deps.sh" >&2
  exit 1
fi

# /usr/bin/python3 is the interpreter with Debian's torch (for the torchrun
# rows); the harness itself needs only the standard library.
python=/usr/bin/python3
[[ -x "$python" ]] || python=python3

# The harness cleans up its own temporary files and process trees; this
# bounds the whole run even if something hangs in a way it did not foresee.
exec timeout --kill-after=10 900 "$python" bench/bench.py --ddprun "$(realpath "$ddprun")" "$@"
