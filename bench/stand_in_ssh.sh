#!/bin/sh
# A stand-in for ssh in bench (l): `ddprun --hosts ... --ssh-command
# 'bench/stand_in_ssh.sh {host}'` runs this once per host with the host's
# command line. It plays a remote host without one: it takes the host's
# latency (STAND_IN_SLOWEST_S for the host named "slowest", STAND_IN_DELAY_S
# for the others), then answers a preflight as a ddprun of STAND_IN_VERSION
# would, and a run as a job that succeeded. So the launcher's own cost of
# fanning out to N hosts is measured, not N ddprun processes on this machine.
host=$1
command=$2
if [ "$host" = slowest ]; then sleep "${STAND_IN_SLOWEST_S:-1}"; else sleep "${STAND_IN_DELAY_S:-0.2}"; fi
case "$command" in
  *" --preflight "*) echo "ddprun-preflight ${STAND_IN_VERSION:?} nproc=8" ;;
esac
exit 0
