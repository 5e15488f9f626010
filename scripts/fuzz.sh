#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs
# each for a bounded time, starting from the seeds in tests/fuzz/corpus/<target>/
# and the saved crashes in tests/fuzz/regressions/<target>/. Run by hand: CI
# (scripts/test.sh) replays the corpora and regressions through the normal
# build (ctest -L fuzz), and this finds new inputs.
#
#   bash scripts/fuzz.sh                      # every target, 20 s each
#   FUZZ_SECONDS=300 bash scripts/fuzz.sh cli # one target, longer
#   BUILD_DIR=build-fuzz JOBS=1 bash scripts/fuzz.sh
#
# Exit status: 0 when no target crashed; 1 when one did (or a saved regression
# still fails). A crashing input is copied to tests/fuzz/regressions/<target>/,
# where the normal build replays it (ddprun_fuzz_regressions): commit it with
# the fix. Needs clang-14 and libclang-rt-14-dev (scripts/install-deps.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build-fuzz}
jobs=${JOBS:-$(nproc)}
seconds=${FUZZ_SECONDS:-20}
cxx=${FUZZ_CXX:-clang++-14}
all_targets=(cli error_file node_info failure_record hostlist round_result elastic file_timer progress hosts fan_out signed_record)
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")

if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found; install clang-14 and libclang-rt-14-dev (scripts/install-deps.sh)" >&2
  exit 1
fi

# Through ccache, as the other builds (scripts/ccache-env.sh).
source scripts/ccache-env.sh
# Only the library and the fuzz targets: no tests, benchmarks or libtorch plugin.
CXX=$cxx cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${ccache_cmake_args[@]}" \
  -DDDPRUN_BUILD_FUZZERS=ON -DDDPRUN_BUILD_TESTS=OFF -DDDPRUN_BUILD_BENCH=OFF \
  -DDDPRUN_WITH_TORCH=OFF >/dev/null
cmake --build "$build_dir" -j"$jobs" --target "${targets[@]/#/fuzz_}"

# Inputs longer than this only make a run slower: the longest real command
# line, record or host list is far shorter. A host list expands to up to
# 100000 names, so its inputs are kept shorter still to bound memory. FileTimer
# requests come in a stream of lines: longer inputs reach the overlong-line path.
max_len_of() {
  case $1 in
    hostlist | hosts) echo 256 ;;
    file_timer) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

failed=()
for target in "${targets[@]}"; do
  binary="$build_dir/tests/fuzz/fuzz_$target"
  seeds="tests/fuzz/corpus/$target"
  regressions="tests/fuzz/regressions/$target"
  work="$build_dir/fuzz-work/$target"
  mkdir -p "$work/corpus" "$work/artifacts" "$regressions"
  rm -f "$work/artifacts/"*

  # Saved crashes first: each must pass now.
  mapfile -t saved < <(find "$regressions" -type f ! -name .gitkeep | sort)
  if ((${#saved[@]} > 0)) && ! "$binary" "${saved[@]}" >"$work/regressions.log" 2>&1; then
    echo "fuzz.sh: $target: a saved regression still fails (see $work/regressions.log)" >&2
    tail -20 "$work/regressions.log" >&2
    failed+=("$target")
    continue
  fi

  echo "fuzz.sh: $target: fuzzing for ${seconds}s"
  # New inputs go to the work corpus (first directory); the seeds are only read.
  # -timeout: one input taking this long is a hang, reported like a crash.
  if ! "$binary" "$work/corpus" "$seeds" -max_total_time="$seconds" \
    -max_len="$(max_len_of "$target")" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 >"$work/fuzz.log" 2>&1; then
    failed+=("$target")
    echo "fuzz.sh: $target: crashed; the report:" >&2
    grep -v '^#[0-9]' "$work/fuzz.log" | tail -40 >&2
    for artifact in "$work/artifacts/"*; do
      [[ -f $artifact ]] || continue
      cp "$artifact" "$regressions/"
      echo "fuzz.sh: $target: saved $regressions/$(basename "$artifact");" \
        "reproduce: $binary $regressions/$(basename "$artifact")" >&2
    done
  else
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$work/fuzz.log" | sed "s/^/fuzz.sh: $target: /" || true
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no crashes in ${targets[*]}"
