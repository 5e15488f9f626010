#!/usr/bin/env bash
# The one command that says whether the tree is good: installs the Debian
# packages, builds with warnings as errors, runs every CTest test (the fuzz
# corpora and regressions among them), a short chaos soak, the tests that
# depend on the platform again on Debian sid's torch 2.14, checks formatting,
# and builds, installs and removes the Debian package. CI runs exactly this
# (.ci/run); run it locally before pushing. It ends with one line per phase
# and its wall time, failed or not, so the budget shows in every log.
#
#   bash scripts/test.sh              # build into build/
#   BUILD_DIR=build-x JOBS=1 bash scripts/test.sh
#
# Every build goes through ccache, its cache outside the clone
# (scripts/ccache-env.sh), so a fresh clone on the same machine recompiles only
# what changed. The long libFuzzer runs are by hand: scripts/fuzz.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

phases=()
started=$SECONDS
phase_started=$SECONDS
phase_name=
begin() { # begin NAME: the previous phase ends here
  [[ -z $phase_name ]] || phases+=("$(printf '%-9s %5d s' "$phase_name" $((SECONDS - phase_started)))")
  phase_name=$1
  phase_started=$SECONDS
}
print_phases() {
  local status=$?
  # A failure before the sid phase leaves the sid build running: it ends too
  # (platform.sh undoes its mounts on SIGTERM).
  if [[ -n $sid_build ]] && kill -0 "$sid_build" 2>/dev/null; then
    kill -TERM "$sid_build" 2>/dev/null || true
    wait "$sid_build" 2>/dev/null || true
  fi
  begin ""
  echo "test.sh: wall time by phase:"
  printf 'test.sh:   %s\n' "${phases[@]}"
  printf 'test.sh:   %-9s %5d s (%d min)%s\n' total $((SECONDS - started)) $(((SECONDS - started + 59) / 60)) \
    "$( ((status == 0)) || echo ", failed in '${failed_in:-?}'")"
  exit "$status"
}
failed_in=
sid_build=
trap 'failed_in=$phase_name' ERR
trap print_phases EXIT

begin deps
bash scripts/install-deps.sh

# ccache for the host build (scripts/ccache-env.sh); scripts/platform.sh
# mounts the sid root's own cache into it.
source scripts/ccache-env.sh
ccache --zero-stats >/dev/null

# The sid leg's root (debootstrap and its packages when not cached: minutes of
# downloads) and its build run beside the host's build and tests at the lowest
# CPU priority (SCHED_IDLE): they get only the CPU time the host leaves idle
# (downloads, links, the tests' waits on their processes), so the host legs
# run as without them. The sid phase below waits for it, then runs the tests.
if ((EUID == 0)); then
  sid_build_log=$(mktemp)
  chrt --idle 0 timeout --kill-after=60 3600 bash scripts/platform.sh sid --build >"$sid_build_log" 2>&1 &
  sid_build=$!
fi

begin build
# -O2 as the package is built (and so its warnings), without the debug
# information that the package strips and nothing here reads: a sixth of every
# file's compile time. A developer's default build is RelWithDebInfo.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DDDPRUN_WERROR=ON \
  "${ccache_cmake_args[@]}"
cmake --build "$build_dir" -j"$jobs"
echo "test.sh: ccache: $(ccache --print-stats | ccache_hits)"

begin ctest
# Each test has its own TIMEOUT in CMake; this bounds the run as a whole, so a
# hung test cannot hold a CI runner for hours.
timeout --kill-after=30 1800 \
  ctest --test-dir "$build_dir" --output-on-failure -j2 --timeout 300 -LE '^fuzz$'

begin fuzz
# Every saved fuzz input (tests/fuzz/corpus and regressions) through its parser,
# built by the normal compiler (label fuzz). The libFuzzer runs, with clang and
# sanitizers, are by hand: scripts/fuzz.sh.
ctest --test-dir "$build_dir" --output-on-failure -j2 --timeout 300 -L '^fuzz$'

begin chaos
# A short chaos soak (scripts/chaos.sh): elastic jobs of 8 agents over c10d and
# a 3-member etcd under random faults, every invariant checked after each job.
# A fixed seed, so that a failure here replays with the same command; the long
# runs (an hour and more, docs/reliability.md) are run by hand.
DURATION=${CHAOS_SECONDS:-90} SEED=${CHAOS_SEED:-2700} BUILD_DIR="$build_dir" \
  timeout --kill-after=30 900 bash scripts/chaos.sh

begin sid
# Today's PyTorch: Debian sid (torch 2.14, g++ 16, Boost 1.92, Python 3.14) in
# a debootstrap root (scripts/platform.sh): every target built with -Werror,
# then the tests labelled `platform` (tests/CMakeLists.txt: what touches
# torch, Python, the compiler's and Boost's and CLI11's behaviour); the Debian
# 12 run above ran every test. The whole suite there is
# `bash scripts/platform.sh sid --full`.
if ((EUID == 0)); then
  sid_build_status=0
  wait "$sid_build" || sid_build_status=$?
  sid_build=
  cat "$sid_build_log"
  rm -f "$sid_build_log"
  if ((sid_build_status != 0)); then
    echo "test.sh: the sid root or build failed (exit $sid_build_status)" >&2
    false
  fi
  timeout --kill-after=60 2400 bash scripts/platform.sh sid
else
  echo "test.sh: not root: the Debian sid leg (scripts/platform.sh sid) is skipped"
fi

begin format
# Formatting is checked after the tests so that a misplaced space does not
# hide a real failure.
mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.h')
unformatted=()
for source in "${sources[@]}"; do
  clang-format --dry-run --Werror "$source" >/dev/null 2>&1 || unformatted+=("$source")
done
if ((${#unformatted[@]} > 0)); then
  echo "test.sh: not clang-formatted: ${unformatted[*]}" >&2
  echo "test.sh: fix with: clang-format -i ${unformatted[*]}" >&2
  false
fi

begin package
# The Debian package from the same build (scripts/package.sh: CPack, computed
# Depends, lintian), installed, used for a one-node and a 2x2 job from
# /usr/bin/ddprun, and removed (scripts/package-check.sh). Root only: it
# installs into the system.
if ((EUID == 0)); then
  BUILD_DIR="$build_dir" JOBS="$jobs" OUT_DIR="$build_dir/dist" bash scripts/package.sh
  deb=$(find "$build_dir/dist" -maxdepth 1 -name 'ddprun_*.deb' | sort | tail -1)
  timeout --kill-after=30 600 bash scripts/package-check.sh "$deb"
else
  echo "test.sh: not root: the package install check is skipped"
fi
echo "test.sh: all tests passed"
