#!/usr/bin/env bash
# Drives the generated bash completion (build/docs/ddprun.bash) the way bash
# does on TAB: flags in both spellings, the closed sets of values, files for
# the program, and nothing of ddprun's after the program. Skipped (77) where
# the bash-completion package is not installed (its helpers are what
# completions under /usr/share/bash-completion rely on).
#
#   bash tests/install/bash_completion_test.sh build/docs/ddprun.bash
set -uo pipefail

script=${1:?usage: bash_completion_test.sh COMPLETION_SCRIPT}
framework=/usr/share/bash-completion/bash_completion
if [[ ! -r $framework ]]; then
  echo "SKIP: $framework missing (apt-get install bash-completion)"
  exit 77
fi
# shellcheck disable=SC1090
source "$framework"
# shellcheck disable=SC1090
source "$script"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/logs" && touch "$scratch/train.py" "$scratch/hosts.txt"
cd "$scratch" || exit 1

failures=0
# complete WORD... : the words of the line as bash splits them (a "=" is a word
# of its own), the last one being completed; prints the candidates sorted.
complete() {
  COMP_WORDS=(ddprun "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  # As typed: "--flag=value" has no blanks around its "=".
  COMP_LINE="${COMP_WORDS[*]}"
  COMP_LINE=${COMP_LINE// = /=}
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _ddprun
  printf '%s\n' "${COMPREPLY[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//'
}
expect() {  # expect "CANDIDATES" WORD...
  local want=$1 got
  shift
  got=$(complete "$@")
  if [[ $got != "$want" ]]; then
    echo "FAIL: ddprun $* <TAB>: got '$got', want '$want'"
    ((failures++))
  fi
}
expect_has() {  # expect_has CANDIDATE WORD...
  local want=$1 got
  shift
  got=" $(complete "$@") "
  if [[ $got != *" $want "* ]]; then
    echo "FAIL: ddprun $* <TAB>: '$want' not in '$got'"
    ((failures++))
  fi
}

expect "--rdzv_backend --rdzv_conf --rdzv_endpoint --rdzv_id" --rdzv_
expect "--nproc-per-node" --nproc-
expect "--numa-binding --numa_binding" --numa
expect "c10d etcd static" --rdzv_backend ""
expect "etcd" --rdzv-backend = e
expect "gpu" --nproc_per_node g
expect "auto cpu gpu" --nproc-per-node = ""
expect "socket" --numa-binding s
expect "SIGTERM,SIGURG SIGTERM,SIGUSR1 SIGTERM,SIGUSR2" --signals_to_handle SIGTERM,SIGU
expect "logs" --log_dir ""
expect "hosts.txt" --hostfile h
expect "" --master_addr ""
# The program: files and commands.
expect_has "train.py" --nproc_per_node 2 tr
expect_has "true" --nproc_per_node 2 tr
expect_has "train.py" -m tr
expect_has "train.py" --standalone ""
# After the program, its own arguments: never ddprun's flags.
expect "" ./train.py --nnod
expect "" --nproc_per_node=2 ./train.py --nnod
expect "" -- --nnod

if ((failures > 0)); then
  echo "bash completion: $failures failures"
  exit 1
fi
echo "bash completion: all checks passed"
