#!/usr/bin/env python3
"""A worker guarded by torch's FileTimer watchdog, as served by ddprun.

Why it exists: a step that hangs (a collective waiting for a peer that died,
a stuck data loader) holds its GPU forever. torch's FileTimer lets the worker
say "this block takes at most N seconds"; the launcher's watchdog kills the
worker when it takes longer, and the launcher's failure path (stop the job,
restart it with --max_restarts) takes over. ddprun serves the same protocol
as torchrun:

    TORCHELASTIC_ENABLE_FILE_TIMER=1 ddprun --nproc_per_node=2 examples/file_timer.py
    TORCHELASTIC_ENABLE_FILE_TIMER=1 ddprun --nproc_per_node=2 examples/file_timer.py --hang-rank 1

The first runs five quick steps on each rank and exits 0. The second makes
rank 1's third step hang: ddprun prints "rank 1 (pid ...): FileTimer scope
'step' expired (set for 2 s); sent SIGKILL" and the job ends with exit code
137. Debian's /usr/bin/python3 has torch 1.13 (python3-torch); set
PYTHON_EXEC=/usr/bin/python3 if `python3` on PATH has no torch.
"""

import argparse
import os
import sys
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-timeout", type=float, default=2.0, help="seconds a step may take")
    parser.add_argument("--hang-rank", type=int, default=-1, help="this rank hangs in step 3")
    args = parser.parse_args()

    timer_file = os.environ.get("TORCHELASTIC_TIMER_FILE")
    if timer_file is None:
        # The launcher serves no watchdog: run unguarded rather than fail.
        print("TORCHELASTIC_TIMER_FILE is not set (run with TORCHELASTIC_ENABLE_FILE_TIMER=1)",
              file=sys.stderr)
    else:
        # The client writes one JSON line per acquire/release to the launcher's FIFO.
        # Its default signal is SIGKILL: a hung step cannot be trusted to handle SIGTERM.
        configure(FileTimerClient(timer_file))

    rank = int(os.environ["RANK"])
    for step in range(args.steps):
        if timer_file is None:
            train_step(rank, step, args.hang_rank)
            continue
        # Leaving the block releases the timer; staying past the timeout gets the signal.
        with expires(after=args.step_timeout, scope="step"):
            train_step(rank, step, args.hang_rank)
    print(f"rank {rank}: {args.steps} steps done")
    return 0


def train_step(rank: int, step: int, hang_rank: int) -> None:
    print(f"rank {rank}: step {step}")
    if rank == hang_rank and step == 2:
        time.sleep(3600)  # a hang: the watchdog ends it
    time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
