#!/usr/bin/env bash
# Installs the Debian package built by scripts/package.sh, runs jobs from the
# installed /usr/bin/ddprun (not a build directory): one node, then 2 nodes x 2
# workers as two agents on 127.0.0.1 and 127.0.0.2 over the c10d store, then
# removes the package and checks that none of its files is left. Run as root.
#
#   bash scripts/package-check.sh                 # dist/ddprun_*.deb
#   bash scripts/package-check.sh path/to/ddprun_0.1.0_amd64.deb
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
deb=${1:-}
if [[ -z $deb ]]; then
  shopt -s nullglob
  debs=(dist/ddprun_*.deb)
  ((${#debs[@]} == 1)) || { echo "package-check: want one dist/ddprun_*.deb, found ${#debs[@]}" >&2; exit 1; }
  deb=${debs[0]}
fi
fail() {
  echo "package-check: FAIL: $*" >&2
  exit 1
}

scratch=$(mktemp -d)
installed=0
cleanup() {
  ((installed == 0)) || dpkg -r ddprun >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

dpkg -i "$deb"
installed=1
ddprun=/usr/bin/ddprun
[[ $(command -v ddprun) == "$ddprun" ]] || fail "ddprun on PATH is $(command -v ddprun), not $ddprun"
version=$(env -u DDPRUN_STORE_PLUGIN "$ddprun" --version)
echo "$version"
has_plugin=0
if dpkg -L ddprun | grep -q '/libddprun_store\.so$'; then
  has_plugin=1
  grep -qx "store plugin: $(dpkg -L ddprun | grep '/libddprun_store\.so$')" <<<"$version" \
    || fail "--version does not name the installed plugin"
fi
grep -qx "openssl plugin: $(dpkg -L ddprun | grep '/libddprun_openssl\.so$')" <<<"$version" \
  || fail "--version does not name the installed OpenSSL plugin"
[[ $(man -w ddprun) == /usr/share/man/man1/ddprun.1.gz ]] || fail "man -w ddprun: $(man -w ddprun)"

# One node, two workers.
out=$("$ddprun" --nproc_per_node=2 --log-prefix='' sh -c 'echo "rank=$RANK world=$WORLD_SIZE"' | sort)
[[ $out == $'rank=0 world=2\nrank=1 world=2' ]] || fail "single-node job printed: $out"
echo "package-check: single-node job from $ddprun: ok"

# 2 nodes x 2 workers, two agents meeting over the c10d store on node 0, every
# record signed with a job secret through the installed OpenSSL plugin.
if ((has_plugin)); then
  export DDPRUN_RDZV_SECRET=package-check-secret-of-at-least-32-bytes
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  common=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port"
    --rdzv_id=package-check --log-prefix='')
  worker=(sh -c 'echo "rank=$RANK local_rank=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE"')
  timeout 120 "$ddprun" "${common[@]}" --node_rank=0 --local_addr=127.0.0.1 "${worker[@]}" \
    >"$scratch/node0" 2>"$scratch/node0.err" &
  node0=$!
  rc1=0 rc0=0
  timeout 120 "$ddprun" "${common[@]}" --node_rank=1 --local_addr=127.0.0.2 "${worker[@]}" \
    >"$scratch/node1" 2>"$scratch/node1.err" || rc1=$?
  wait "$node0" || rc0=$?
  ((rc0 == 0 && rc1 == 0)) || fail "2x2 job: node 0 exited $rc0, node 1 exited $rc1: $(cat "$scratch"/node*.err)"
  out=$(sort "$scratch/node0" "$scratch/node1")
  want=$'rank=0 local_rank=0 node=0 world=4\nrank=1 local_rank=1 node=0 world=4\nrank=2 local_rank=0 node=1 world=4\nrank=3 local_rank=1 node=1 world=4'
  [[ $out == "$want" ]] || fail "2x2 job printed: $out"
  echo "package-check: 2x2 job (c10d, 127.0.0.1 + 127.0.0.2, signed) from $ddprun: ok"
  unset DDPRUN_RDZV_SECRET
else
  echo "package-check: the package has no store plugin; the 2x2 c10d job is skipped" >&2
fi

# Removal leaves nothing of the package behind.
dpkg -L ddprun | sort >"$scratch/files"
dpkg -r ddprun
installed=0
status=$(dpkg-query -W -f='${db:Status-Status}' ddprun 2>/dev/null || true)
[[ $status == not-installed || -z $status ]] || fail "after dpkg -r ddprun its status is '$status'"
left=()
while IFS= read -r path; do
  # Directories shared with other packages (/usr/bin, /usr/share/man/man1) stay.
  [[ -e $path && ! -d $path ]] && left+=("$path")
done <"$scratch/files"
((${#left[@]} == 0)) || fail "left behind after dpkg -r: ${left[*]}"
for dir in /usr/lib/ddprun /usr/share/doc/ddprun; do
  [[ ! -e $dir ]] || fail "$dir is still there after dpkg -r"
done
echo "package-check: removed cleanly"
