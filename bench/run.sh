#!/usr/bin/env bash
# Runs the ddprun benchmark and prints one table per question: how much does
# launching cost next to a plain shell loop (and torchrun), how fast are logs
# carried next to `cat`, and how much memory does the launcher take. See
# bench/README.md for what each row means. Bounded to a few minutes.
#
#   bash bench/run.sh                      # uses build/ddprun, builds it if missing
#   DDPRUN=/path/to/ddprun bash bench/run.sh --reps 50 --nproc 16
#   bash bench/run.sh --torchrun off       # skip torchrun even if installed
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

ddprun=${DDPRUN:-build/ddprun}
if [[ -z "${DDPRUN:-}" && ! -x "$ddprun" ]]; then
  echo "bench: $ddprun not found; building it" >&2
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build --target ddprun -j"${JOBS:-$(nproc)}" >/dev/null
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
exec timeout --kill-after=10 600 "$python" bench/bench.py --ddprun "$(realpath "$ddprun")" "$@"
