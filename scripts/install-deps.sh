#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing, benchmarking and
# running the examples of ddprun needs. Why a script: CI starts from a bare
# Debian image, and developers should get the same set with one command.
#
# Idempotent: when everything is already installed it does nothing (no
# apt-get update, no network). Run as root, or as a user with sudo.
set -euo pipefail

packages=(
  # build; ccache keeps compiled objects between runs of scripts/test.sh
  build-essential cmake clang-format ccache
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  # Boost.Process v2 (the workers' launcher) first ships in 1.80; Debian 12's
  # default Boost is 1.74, so its 1.81 (Asio and Beast come with it)
  libboost1.81-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # fuzzing (scripts/fuzz.sh) and the network-partition test
  clang-14 libclang-rt-14-dev iproute2
  procps time git
  # the multi-node store (c10d::TCPStore) and the C++ example
  libtorch-dev libgloo-dev
  # Python workers (examples/ddp_train.py): /usr/bin/python3 with torch 1.13
  python3 python3-torch
  # real schedulers for the integration tests (tests/integration/slurm_*,
  # mpi_*): the harness starts munged, slurmctld and two slurmd itself
  slurm-wlm munge openmpi-bin
  # the etcd rendezvous backend: TLS through OpenSSL; a real etcd (and etcdctl,
  # openssl for a test CA) that the tests start themselves
  libssl-dev openssl etcd-server etcd-client
  # --hosts reaches its hosts over the OpenSSH client; its tests start their
  # own sshd on loopback addresses (tests/support/sshd_server.hpp)
  openssh-server openssh-client
  # stacks of a hung worker (src/stack_capture.cpp): eu-stack, with gdb as the
  # slower fallback when only that is installed
  elfutils
  # the Debian package (scripts/package.sh): dpkg-shlibdeps computes Depends,
  # lintian checks it, man renders ddprun(1) in the install test; the
  # completions are tested against bash-completion's helpers, an interactive zsh
  # and an interactive tcsh
  dpkg-dev lintian man-db bash-completion zsh tcsh
  # the newer platforms' roots (scripts/platform.sh: Debian sid and 13)
  debootstrap
  # --metrics-port: promtool checks the endpoint's text, a real Prometheus the tests
  # start scrapes two agents, curl asks for /healthz (tests/integration/test_metrics.cpp)
  prometheus curl
)

installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: missing packages (${missing[*]}) and not root; rerun as root" >&2
    exit 1
  fi
  sudo=(sudo)
fi

apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

# Only reached when something is missing, so the network is needed anyway; a
# bare image has empty package lists and a long-lived one may have stale ones.
"${apt_get[@]}" update

# slurm-wlm, munge, etcd-server and openssh-server start their daemons from
# their postinst; the tests start their own (temp dirs, free ports) and the
# machine's must not be left running. policy-rc.d (exit 101: "action forbidden") stops invoke-rc.d for
# the duration of the install; one that was already there is left alone.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod 755 "$policy"
  own_policy=1
fi
remove_policy() { ((own_policy == 0)) || "${sudo[@]}" rm -f "$policy"; }
trap remove_policy EXIT

"${apt_get[@]}" install --no-install-recommends "${missing[@]}"
echo "install-deps: done"
