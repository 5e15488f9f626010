#!/usr/bin/env bash
# Builds and tests ddprun on a newer Debian than this machine's, in a root file
# system made by debootstrap: the platforms users run today's PyTorch on.
#
#   bash scripts/platform.sh sid       # torch 2.14, g++ 16, Python 3.14
#   bash scripts/platform.sh trixie    # Debian 13: torch 2.6, g++ 14
#   bash scripts/platform.sh sid --full    # every unit and integration test
#   bash scripts/platform.sh sid --build   # make the root and build, run no test
#   bash scripts/platform.sh sid --shell   # a shell in the prepared root
#   bash scripts/platform.sh sid --prepare # only make (or check) the root
#   DDPRUN_PLATFORM_TESTS='^TorchTitan\.' bash scripts/platform.sh sid
#                                          # only the tests whose CTest name matches
#
# The root is cached under $DDPRUN_PLATFORM_ROOTS (default
# /var/cache/ddprun/platforms) and made anew when this script's package list
# changes (or with DDPRUN_PLATFORM_REFRESH=1), from the Debian archive this
# machine's apt uses (or $DDPRUN_PLATFORM_MIRROR). Inside it, the source tree
# is mounted read-only at /ddprun/src and every target is built with -Werror
# in /ddprun/build (kept, so a second run builds incrementally) through ccache,
# whose cache is mounted from outside the root ($DDPRUN_CCACHE_DIR/<platform>,
# default /var/cache/ddprun/ccache/<platform>), so a remade root keeps it.
# Then the tests labelled `platform` run (tests/CMakeLists.txt names them:
# the store plugin and the c10d store, multi-node and elastic jobs over c10d,
# Python and torch workers, the FileTimer, the known-error hints, the worker
# environment against the platform's torchrun, the CLI, and every unit test);
# with --full, every unit and integration test. DDPRUN_PLATFORM_TESTS, a CTest
# -R regex (a gtest name: 'TorchrunOptions\.|TorchTitan\.'), narrows either set
# to the tests it matches, after the same full build; none matching is a
# failure. Every mount made here is undone on exit, and every process still
# running in the root is ended by pid. Root only.
set -euo pipefail
# The whole script is one function, read before it runs: an edit to this file
# while it runs (a long build) cannot change what the running copy does.
main() {

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source_dir=$(pwd)

usage() {
  echo "usage: bash scripts/platform.sh trixie|sid [--full|--build|--shell|--prepare]" >&2
  exit 2
}
(($# >= 1)) || usage
platform=$1
shift
shell=0
prepare_only=0
full=0
build_only=0
case ${1:-} in
  --full) full=1 ;;
  --build) build_only=1 ;;
  --shell) shell=1 ;;
  --prepare) prepare_only=1 ;;
  "") ;;
  *) usage ;;
esac
case $platform in
  trixie | sid) ;;
  *)
    echo "platform.sh: unknown platform '$platform': use trixie (Debian 13) or sid" >&2
    exit 2
    ;;
esac
say() { echo "platform.sh [$platform]: $*"; }
fail() {
  echo "platform.sh [$platform]: FAILED: $*" >&2
  exit 1
}
((EUID == 0)) || fail "needs root (debootstrap, chroot and mounts)"

# What the root holds: the build and test dependencies of the tests that run
# here, and the ssh client that --hosts checks for (no sshd, Slurm, Open MPI
# or fuzzing: those do not depend on libtorch and run in the Debian 12 suite).
packages=(
  build-essential cmake git
  libspdlog-dev libfmt-dev libcli11-dev libboost-dev libboost-process-dev nlohmann-json3-dev
  libssl-dev
  libgtest-dev libgmock-dev googletest
  libtorch-dev libgloo-dev
  python3 python3-torch
  # torch.distributed.debug's frontend (the debug server test)
  python3-jinja2 python3-tabulate
  etcd-server etcd-client openssl openssh-client
  procps iproute2 elfutils
  # every target builds there: the benchmarks too; ccache for the build
  libbenchmark-dev ccache
)

# The Debian archive of this machine's own apt sources (deb822 .sources files,
# then sources.list): the first `deb` entry that serves this release's suite.
# That archive has every Debian release, sid and trixie too.
apt_mirror() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [[ -n $codename ]] || return 1
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] || continue
    awk -v suite="$codename" '
      BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^[ \t]*#/) continue
          split($i, kv, ":"); key = tolower(kv[1]); value = substr($i, length(kv[1]) + 2)
          gsub(/^[ \t]+|[ \t]+$/, "", value)
          if (key == "types") types = value
          else if (key == "uris") uris = value
          else if (key == "suites") suites = value
          else if (key == "enabled") enabled = tolower(value)
        }
        if (enabled != "no" && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ")) {
          split(uris, uri, /[ \t]+/); print uri[1]; exit
        }
      }' "$file" | grep . && return 0
  done
  [[ -f /etc/apt/sources.list ]] || return 1
  sed -E 's/\[[^]]*\]//' /etc/apt/sources.list |
    awk -v suite="$codename" '$1 == "deb" && $3 == suite { print $2; exit }' | grep .
}
mirror=${DDPRUN_PLATFORM_MIRROR:-$(apt_mirror || true)}
[[ -n $mirror ]] || fail "no Debian archive in this machine's apt sources (/etc/apt/sources.list.d/*.sources," \
  "/etc/apt/sources.list): set DDPRUN_PLATFORM_MIRROR to one"
roots=${DDPRUN_PLATFORM_ROOTS:-/var/cache/ddprun/platforms}
root=$roots/$platform
key=$(printf '%s\n' "$platform" "$mirror" "${packages[@]}" | sha256sum | cut -c1-16)
stamp=$root/etc/ddprun-platform

mkdir -p "$roots"
exec 9>"$roots/$platform.lock"
flock -w 3600 9 || fail "another platform.sh holds $roots/$platform.lock"

# The sid archive's Release file may be past its Valid-Until date here (sid
# is rebuilt daily, mirrors lag): accept that for this one archive of this
# one root, nowhere else. trixie's Release is checked as usual.
sources_line() {
  case $platform in
    sid) echo "deb [check-valid-until=no] $mirror sid main" ;;
    *) echo "deb $mirror $platform main" ;;
  esac
}

active_root=$root # where unmount_all looks for processes left running
unmount_all() {
  local status=$?
  # Anything still running inside the root (a test's leftover) ends first,
  # found by its root directory, so that the mounts can go.
  local pid real_root
  real_root=$(readlink -f "$active_root")
  for pid in /proc/[0-9]*; do
    [[ "$(readlink "$pid/root" 2>/dev/null)" == "$real_root" ]] || continue
    kill -KILL "${pid#/proc/}" 2>/dev/null || true
  done
  # What was mounted here and what the tests mounted inside (`ip netns add`
  # mounts /run/netns on itself), deepest first.
  local target
  while read -r target; do
    umount "$target" 2>/dev/null || umount -l "$target" ||
      echo "platform.sh [$platform]: cannot unmount $target" >&2
  done < <(findmnt -rno TARGET | awk -v root="$real_root" 'index($0 "/", root "/") == 1' | sort -r)
  return $status
}
trap unmount_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount_into() { # mount_into TARGET MOUNT-ARGS...
  local target=$1
  shift
  mkdir -p "$target"
  mount "$@" "$target"
}

mount_system() { # the kernel's file systems, for apt, the build and the tests
  local dir=$1
  # The root a mount point of its own (private: nothing mounted in it shows
  # elsewhere), so that `ip -n NS`'s `mount --make-rslave /` works inside.
  mount_into "$dir" --bind "$dir"
  mount --make-private "$dir"
  mount_into "$dir/proc" -t proc proc
  mount_into "$dir/sys" --bind /sys
  mount_into "$dir/dev" --bind /dev
  mount_into "$dir/dev/pts" --bind /dev/pts
  mount_into "$dir/dev/shm" -t tmpfs -o mode=1777 shm
  cp /etc/hosts "$dir/etc/hosts"
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
}

# Makes the root in $root.new and moves it into place only once complete, so
# an interrupted run leaves no half-made root behind.
make_root() {
  local new=$root.new
  if [[ -e $new ]]; then
    findmnt -rno TARGET | grep -q "^$new/" && fail "$new still has mounts; unmount them first"
    rm -rf --one-file-system "$new"
  fi
  say "debootstrap $platform from $mirror into $new (a minute or two)"
  debootstrap --variant=minbase "$platform" "$new" "$mirror" >"$roots/$platform.debootstrap.log" 2>&1 ||
    fail "debootstrap failed: see $roots/$platform.debootstrap.log"
  sources_line >"$new/etc/apt/sources.list"
  # Packages must not start their daemons (etcd) in the root; the tests start their own.
  printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
  chmod 755 "$new/usr/sbin/policy-rc.d"
  active_root=$new
  mount_system "$new"
  say "installing ${#packages[@]} packages"
  chroot "$new" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    apt-get -q update >"$roots/$platform.apt.log" 2>&1 ||
    fail "apt-get update failed: see $roots/$platform.apt.log"
  chroot "$new" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    apt-get -y -q install --no-install-recommends "${packages[@]}" >>"$roots/$platform.apt.log" 2>&1 ||
    fail "apt-get install failed: see $roots/$platform.apt.log"
  chroot "$new" apt-get clean
  unmount_all
  echo "$key" >"$new/etc/ddprun-platform"
  if [[ -e $root ]]; then
    findmnt -rno TARGET | grep -q "^$root/" && fail "$root still has mounts; unmount them first"
    rm -rf --one-file-system "$root"
  fi
  mv "$new" "$root"
  active_root=$root
}

if [[ ${DDPRUN_PLATFORM_REFRESH:-0} == 1 || ! -f $stamp || "$(cat "$stamp")" != "$key" ]]; then
  make_root
else
  say "using the cached root $root"
fi
((prepare_only == 0)) || exit 0

mount_system "$root"
mount_into "$root/ddprun/src" --bind -o ro "$source_dir"
mount -o remount,bind,ro "$root/ddprun/src"
mkdir -p "$root/ddprun/build"
# ccache's objects outside the root, so that a root made anew keeps them.
ccache_dir=${DDPRUN_CCACHE_DIR:-/var/cache/ddprun/ccache}/$platform
mkdir -p "$ccache_dir"
mount_into "$root/ddprun/ccache" --bind "$ccache_dir"

root_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 CI="${CI:-}"
  CCACHE_DIR=/ddprun/ccache)
# Waited for rather than run in the foreground: bash runs the TERM trap (and so
# undoes the mounts) only once a foreground command ends, which a build does
# not for minutes; `wait` returns at the signal.
in_root() {
  chroot "$root" "${root_env[@]}" "$@" &
  wait $!
}

if ((shell)); then
  chroot "$root" "${root_env[@]}" bash -l
  exit $?
fi

say "$(in_root sh -c '. /etc/os-release; echo "$PRETTY_NAME"'), $(in_root g++ --version | head -1)," \
  "torch $(in_root /usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"

jobs=${JOBS:-$(nproc)}
source scripts/ccache-env.sh # for ccache_hits; the root's ccache has its own settings
# -O2, as the Debian 12 build (and so the same warnings), without the debug
# information that nothing reads here: a sixth of each file's compile time.
in_root cmake -S /ddprun/src -B /ddprun/build -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DDDPRUN_WERROR=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >"$roots/$platform.cmake.log" 2>&1 ||
  fail "cmake could not configure the build: see $roots/$platform.cmake.log"
say "building every target"
in_root ccache --zero-stats >/dev/null
in_root cmake --build /ddprun/build -j"$jobs" >"$roots/$platform.build.log" 2>&1 || {
  grep -E 'error|warning' "$roots/$platform.build.log" | head -20 >&2
  fail "the build failed: see $roots/$platform.build.log"
}
say "ccache: $(in_root ccache --print-stats | ccache_hits)"
((build_only == 0)) || exit 0

# The tests labelled platform, or with --full every unit and integration test;
# the --hosts tests skip, saying so, as the root has no sshd, and so do the
# Slurm and MPI ones (label scheduler), never run here.
if ((full)); then
  say "running every unit and integration test"
  labels=(-L '^(unit|integration)$' -LE scheduler)
else
  say "running the tests labelled platform (the whole suite: --full)"
  labels=(-L '^platform$')
fi
if [[ -n ${DDPRUN_PLATFORM_TESTS:-} ]]; then
  say "only the tests matching '$DDPRUN_PLATFORM_TESTS' (DDPRUN_PLATFORM_TESTS)"
  labels+=(-R "$DDPRUN_PLATFORM_TESTS" --no-tests=error)
fi
if ! in_root timeout --kill-after=30 2400 \
  ctest --test-dir /ddprun/build --output-on-failure -j2 --timeout 300 "${labels[@]}" -E '_NOT_BUILT'; then
  fail "tests failed (build tree: $root/ddprun/build)"
fi
say "all tests passed"
}

main "$@"
exit
