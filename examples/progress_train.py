#!/usr/bin/env python3
"""A PyTorch DDP loop (gloo, CPU) that beats once per step for ddprun's hang
detection, and can be told to hang one rank to see what ddprun reports.

    ddprun --nproc_per_node=4 --hang-timeout=10 --log_dir=/tmp/logs \\
        examples/progress_train.py --steps 1000 --stall-rank 3 --stall-step 5

Each step: compute, beat("step N"), all_reduce. With --stall-rank R, rank R
sleeps in the compute of step --stall-step, so the other ranks beat once more
and wait in all_reduce: ddprun names rank R as the one that stopped beating
first (a step earlier than the others), and its
summary shows rank R in time.sleep and the others in all_reduce (their full
stacks, Python and native, are in --log_dir's stacks.txt).
"""

import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddprun_progress import beat  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-time", type=float, default=0.05, help="seconds of 'compute' per step")
    parser.add_argument("--stall-rank", type=int, default=-1, help="this rank hangs (-1: none)")
    parser.add_argument("--stall-step", type=int, default=5)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    value = torch.zeros(1)
    for step in range(args.steps):
        time.sleep(args.step_time)  # the step's compute
        if rank == args.stall_rank and step == args.stall_step:
            time.sleep(3600)  # the bug: this rank never reaches the collective
        beat(f"step {step}")  # done computing; the others wait for it in all_reduce
        value.fill_(float(rank))
        dist.all_reduce(value)
    if rank == 0:
        print(f"progress_train: {args.steps} steps, last sum {value.item()}", flush=True)
    dist.barrier()
    sys.stdout.flush()
    # torch 1.13 under Python 3.11 can deadlock in gloo's teardown at exit: skip it.
    os._exit(0)


if __name__ == "__main__":
    main()
