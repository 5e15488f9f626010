# Sourced by the scripts that build on this machine (test.sh, fuzz.sh): builds
# go through ccache, with its cache outside the clone so that a fresh clone on
# the same machine (CI's) finds what an earlier one compiled. The cache is
# $DDPRUN_CCACHE_DIR/host (default /var/cache/ddprun/ccache/host as root,
# else ccache's own ~/.cache/ccache); scripts/platform.sh keeps each platform
# root's beside it. CCACHE_BASEDIR makes the clone's absolute paths relative,
# and cmake/CompilerCache.cmake maps it out of the debug information, so two
# checkouts hash alike. ccache's checks are its defaults: a changed header or
# flag still recompiles. Sets ccache_cmake_args for the configure step, and
# ccache_hits: a line of hits and misses from `ccache --print-stats` on stdin.
ccache_hits() {
  awk -F'\t' '$1 ~ /^(direct|preprocessed)_cache_hit$|^cache_miss$/ {printf "%s %s ", $1, $2}'
}
ccache_cmake_args=()
if command -v ccache >/dev/null; then
  if [[ -n ${DDPRUN_CCACHE_DIR:-} ]]; then
    export CCACHE_DIR=$DDPRUN_CCACHE_DIR/host
  elif ((EUID == 0)); then
    export CCACHE_DIR=/var/cache/ddprun/ccache/host
  fi
  CCACHE_BASEDIR=$(pwd)
  export CCACHE_BASEDIR
  ccache_cmake_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  echo "$(basename "$0"): ccache not found (scripts/install-deps.sh installs it): building without it" >&2
fi
