#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the install copied somewhere
# else: the binary must find its store and OpenSSL plugins in both places
# without LD_LIBRARY_PATH (a path relative to itself, src/plugin_path.cpp):
# --version must say so and a 2-node c10d job with a job secret (agents on
# 127.0.0.1 and 127.0.0.2) must run; a single-node job must run, the man page
# must render, and with a plugin gone an agent that needs it must fail with
# the usual one-line error.
#
#   bash tests/install/install_test.sh BUILD_DIR
set -euo pipefail

build=$(realpath "${1:?usage: install_test.sh BUILD_DIR}")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$scratch/first" >/dev/null
first=$scratch/first
for path in bin/ddprun share/man/man1/ddprun.1.gz share/bash-completion/completions/ddprun \
  share/ddprun/completion/ddprun.tcsh share/doc/ddprun/README.md share/doc/ddprun/copyright; do
  [[ -e $first/$path ]] || fail "cmake --install did not install $path"
done
# Every page of the manual beside the README, which links them as docs/NAME.md.
source_docs=$(dirname "${BASH_SOURCE[0]}")/../../docs
pages=0
for page in "$source_docs"/*.md; do
  [[ -e $first/share/doc/ddprun/docs/${page##*/} ]] \
    || fail "cmake --install did not install share/doc/ddprun/docs/${page##*/}"
  pages=$((pages + 1))
done
((pages > 0)) || fail "no docs/*.md found in $source_docs"
[[ -e $first/share/doc/ddprun/docs/install.md ]] || fail "cmake --install did not install docs/install.md"
zsh_completion=$(find "$first/share/zsh" -name _ddprun)
[[ -n $zsh_completion ]] || fail "no zsh completion under $first/share/zsh"
plugin=$(find "$first" -name libddprun_store.so)
openssl_plugin=$(find "$first" -name libddprun_openssl.so)
[[ -n $openssl_plugin ]] || fail "cmake --install did not install libddprun_openssl.so"

# Moved elsewhere: whatever was found must be found again, under the new path.
mv "$first" "$scratch/moved"
prefix=$scratch/moved
version=$(env -u DDPRUN_STORE_PLUGIN -u LD_LIBRARY_PATH "$prefix/bin/ddprun" --version)
echo "$version"
[[ $(head -1 <<<"$version") == "ddprun "*" (commit "*")" ]] || fail "first line of --version: $version"
moved_openssl_plugin=${openssl_plugin/#$first/$prefix}
grep -qxF "openssl plugin: $moved_openssl_plugin" <<<"$version" \
  || fail "--version of the moved install does not name $moved_openssl_plugin"
grep -q '^OpenSSL: /.*libcrypto' <<<"$version" || fail "--version names no libcrypto"
if [[ -n $plugin ]]; then
  moved_plugin=${plugin/#$first/$prefix}
  grep -qxF "store plugin: $moved_plugin" <<<"$version" \
    || fail "--version of the moved install does not name $moved_plugin"
  grep -q '^libtorch: /' <<<"$version" || fail "--version names no libtorch"
  # The c10d store through the moved plugin, every record signed through the
  # moved OpenSSL plugin: two agents (127.0.0.1, 127.0.0.2).
  export DDPRUN_RDZV_SECRET=install-test-secret-of-at-least-32-bytes
  port=$(free_port)
  two_nodes=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port"
    --rdzv_id=install-test)
  env -u DDPRUN_STORE_PLUGIN -u LD_LIBRARY_PATH timeout 60 "$prefix/bin/ddprun" "${two_nodes[@]}" \
    --node_rank=0 --local_addr=127.0.0.1 /bin/true &
  node0=$!
  env -u DDPRUN_STORE_PLUGIN -u LD_LIBRARY_PATH timeout 60 "$prefix/bin/ddprun" "${two_nodes[@]}" \
    --node_rank=1 --local_addr=127.0.0.2 /bin/true || fail "node 1 of a 2-node job through the moved plugin failed"
  wait "$node0" || fail "node 0 of a 2-node job through the moved plugin failed"
  unset DDPRUN_RDZV_SECRET
else
  echo "install_test: built without libtorch: no store plugin to find"
fi

env -u DDPRUN_STORE_PLUGIN "$prefix/bin/ddprun" --nproc_per_node=2 /bin/true \
  || fail "a single-node job from the install failed"

warnings=$(MANWIDTH=80 man --warnings -l "$prefix/share/man/man1/ddprun.1.gz" 2>&1 >/dev/null) || true
[[ -z $warnings ]] || fail "man reports: $warnings"

# Without the plugin: the one-line error that names what is missing.
if [[ -n $plugin ]]; then
  rm "$moved_plugin"
  status=0
  output=$(env -u DDPRUN_STORE_PLUGIN timeout 60 "$prefix/bin/ddprun" --nnodes=2 --node_rank=0 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$(free_port)" /bin/true 2>&1) || status=$?
  [[ $status -ne 0 ]] || fail "a c10d job without the plugin succeeded"
  errors=$(grep -c 'ddprun: error:' <<<"$output" || true)
  grep -q "libddprun_store.so not found in $prefix/bin or $(dirname "$moved_plugin")" <<<"$output" \
    || fail "the error does not say where the plugin was looked for: $output"
  ((errors == 1)) || fail "expected one error line, got: $output"
  version=$(env -u DDPRUN_STORE_PLUGIN "$prefix/bin/ddprun" --version)
  grep -q '^store plugin: not found' <<<"$version" || fail "--version without the plugin: $version"
fi
# Without the OpenSSL plugin: an etcd agent says so in one line (before it
# would look for etcd), and --version too.
rm "$moved_openssl_plugin"
status=0
output=$(env -u DDPRUN_OPENSSL_PLUGIN -u LD_LIBRARY_PATH timeout 60 "$prefix/bin/ddprun" --nnodes=2 \
  --node_rank=0 --rdzv_backend=etcd --rdzv_endpoint="127.0.0.1:$(free_port)" /bin/true 2>&1) || status=$?
[[ $status -ne 0 ]] || fail "an etcd job without the OpenSSL plugin succeeded"
grep -q "libddprun_openssl.so not found in $prefix/bin or $(dirname "$moved_openssl_plugin")" \
  <<<"$output" || fail "the error does not say where the OpenSSL plugin was looked for: $output"
errors=$(grep -c 'ddprun: error:' <<<"$output" || true)
((errors == 1)) || fail "expected one error line, got: $output"
version=$(env -u DDPRUN_OPENSSL_PLUGIN "$prefix/bin/ddprun" --version)
grep -q '^openssl plugin: not found' <<<"$version" || fail "--version without the OpenSSL plugin: $version"
echo "install_test: all checks passed"
