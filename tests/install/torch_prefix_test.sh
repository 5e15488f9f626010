#!/usr/bin/env bash
# The store plugin built against a libtorch that is not the system's, as a
# user of a pip, conda or libtorch-zip torch builds it (docs/install.md):
# a copy of this machine's libtorch in a prefix of its own (its libraries
# copied, so that what loads from there is really that copy), named with
# CMAKE_PREFIX_PATH. The plugin must find that libtorch at run time through
# its own RUNPATH, installed too (no LD_LIBRARY_PATH), --version must name it
# and the version it was built against, and a 2-node c10d job must load it
# from there (a worker reads its agent's /proc/PID/maps).
#
#   bash tests/install/torch_prefix_test.sh SOURCE_DIR BUILD_DIR
# Exits 77 (skipped) where the system has no libtorch to copy.
set -euo pipefail

source_dir=$(realpath "${1:?usage: torch_prefix_test.sh SOURCE_DIR BUILD_DIR}")
build=$(realpath "${2:?usage: torch_prefix_test.sh SOURCE_DIR BUILD_DIR}")
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
system_cmake=/usr/lib/$arch/cmake
if [[ ! -f $system_cmake/Torch/TorchConfig.cmake ]]; then
  echo "torch_prefix_test: skipped: no system libtorch ($system_cmake/Torch) to copy"
  exit 77
fi
scratch=$(mktemp -d)
node0=
cleanup() {
  [[ -z $node0 ]] || kill -KILL "$node0" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The prefix: lib/<arch> with copies of libtorch's three libraries (and their
# links), lib/<arch>/cmake with its CMake files (they find everything relative
# to themselves), include with its headers.
prefix=$scratch/other-torch
mkdir -p "$prefix/lib/$arch/cmake" "$prefix/include"
for package in Torch Caffe2 ATen; do
  [[ ! -d $system_cmake/$package ]] || cp -r "$system_cmake/$package" "$prefix/lib/$arch/cmake/"
done
for library in c10 torch_cpu torch; do
  real=$(readlink -f "/usr/lib/$arch/lib$library.so")
  cp --reflink=auto "$real" "$prefix/lib/$arch/"
  name=$(basename "$real")
  soname=$(objdump -p "$real" | awk '$1 == "SONAME" { print $2 }')
  [[ $soname == "$name" ]] || ln -sf "$name" "$prefix/lib/$arch/$soname"
  ln -sf "$name" "$prefix/lib/$arch/lib$library.so"
done
for dir in torch ATen c10 caffe2; do
  [[ -d /usr/include/$dir ]] && ln -s "/usr/include/$dir" "$prefix/include/$dir"
done

# Only the plugin is built against it (one file); the main build's ddprun loads it.
cmake -S "$source_dir" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$prefix" -DDDPRUN_BUILD_TESTS=OFF \
  -DDDPRUN_BUILD_BENCH=OFF >"$scratch/cmake.log" 2>&1 || {
  cat "$scratch/cmake.log" >&2
  fail "cmake with CMAKE_PREFIX_PATH=$prefix failed"
}
grep -q "Torch_DIR:PATH=$prefix/" "$scratch/build/CMakeCache.txt" ||
  fail "find_package(Torch) did not take the prefix's libtorch: $(grep Torch_DIR "$scratch/build/CMakeCache.txt")"
cmake --build "$scratch/build" --target ddprun_store -j"$(nproc)" >"$scratch/build.log" 2>&1 || {
  tail -20 "$scratch/build.log" >&2
  fail "the plugin did not build against $prefix"
}
cmake --install "$scratch/build" --component store_plugin --prefix "$scratch/install" >/dev/null
built=$scratch/build/libddprun_store.so
installed=$(find "$scratch/install" -name libddprun_store.so)
[[ -n $installed ]] || fail "cmake --install --component store_plugin installed no plugin"

for plugin in "$built" "$installed"; do
  runpath=$(objdump -p "$plugin" | awk '$1 == "RUNPATH" || $1 == "RPATH" { print $2 }')
  [[ ":$runpath:" == *":$prefix/lib/$arch:"* ]] ||
    fail "$plugin: RUNPATH '$runpath' does not name $prefix/lib/$arch"
  version=$(env -u LD_LIBRARY_PATH DDPRUN_STORE_PLUGIN="$plugin" "$build/ddprun" --version)
  echo "$version"
  grep -q "^libtorch: $prefix/lib/$arch/libc10" <<<"$version" ||
    fail "--version with $plugin does not load libtorch from $prefix"
  grep -qE '^store plugin built against: libtorch [0-9]+\.[0-9]+' <<<"$version" ||
    fail "--version does not say which libtorch the plugin was built against"
done

# A 2-node c10d job through the installed plugin; each node's worker reports which
# libc10 its agent (the worker's parent) mapped.
port=$(free_port)
two_nodes=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port"
  --rdzv_id=torch-prefix-test --no-python /bin/sh -c 'grep -m1 -o "/[^ ]*libc10[^ ]*" /proc/$PPID/maps')
env -u LD_LIBRARY_PATH DDPRUN_STORE_PLUGIN="$installed" timeout 60 "$build/ddprun" --node_rank=0 \
  --local_addr=127.0.0.1 "${two_nodes[@]}" >"$scratch/node0.out" 2>&1 &
node0=$!
env -u LD_LIBRARY_PATH DDPRUN_STORE_PLUGIN="$installed" timeout 60 "$build/ddprun" --node_rank=1 \
  --local_addr=127.0.0.2 "${two_nodes[@]}" >"$scratch/node1.out" 2>&1 ||
  fail "node 1 failed: $(cat "$scratch/node1.out")"
wait "$node0" || fail "node 0 failed: $(cat "$scratch/node0.out")"
node0=
for node in 0 1; do
  grep -q "$prefix/lib/$arch/libc10" "$scratch/node$node.out" ||
    fail "node $node's agent did not map the prefix's libc10: $(cat "$scratch/node$node.out")"
done

# The same plugin once its libtorch is gone (the torch it was built for
# uninstalled, or another environment activated): the job stops at once with
# one line naming the plugin, the libtorch it was built against and the
# command that builds one for the torch at hand.
# The system's libc10 (the same version) would be found next, so it is hidden
# too, by an empty file mounted over it in a mount namespace of the job's own.
if [[ $(id -u) != 0 ]]; then
  echo "torch_prefix_test: skipped: hiding the system's libc10 needs root (unshare -m)"
  exit 77
fi
rm "$prefix/lib/$arch"/libc10.so*
status=0
env -u LD_LIBRARY_PATH DDPRUN_STORE_PLUGIN="$installed" unshare -m sh -c '
  for library in /usr/lib/'"$arch"'/libc10.so*; do mount --bind /dev/null "$library"; done
  exec "$@"' sh timeout 60 "$build/ddprun" --node_rank=0 \
  --local_addr=127.0.0.1 "${two_nodes[@]}" >"$scratch/gone.out" 2>&1 || status=$?
echo "without its libtorch: exit $status: $(cat "$scratch/gone.out")"
[[ $status == 75 ]] || fail "a plugin whose libtorch is gone: exit $status, not 75 (README: Exit codes)"
errors=$(grep '^ddprun: error: ' "$scratch/gone.out") || fail "a plugin whose libtorch is gone: no error line"
[[ $(wc -l <<<"$errors") == 1 ]] || fail "a plugin whose libtorch is gone: more than one error line"
for expected in "$installed" "built against \(libtorch [0-9]" "libc10\.so" "cmake -S .* --target ddprun_store"; do
  grep -qE -- "$expected" <<<"$errors" || fail "a plugin whose libtorch is gone: no '$expected' in: $errors"
done
echo "torch_prefix_test: passed"
