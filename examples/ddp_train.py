#!/usr/bin/env python3
"""A real PyTorch DDP job (gloo, CPU) that checks itself.

Why it exists: it is the smallest program that proves a launcher wired a job
correctly. If RANK, WORLD_SIZE, MASTER_ADDR or MASTER_PORT are wrong, the
process group never forms or the collectives disagree; if they are right, the
ranks train a tiny model in lockstep and end with identical parameters.

    ddprun --nproc_per_node=3 examples/ddp_train.py
    ddprun --nproc_per_node=2 examples/ddp_train.py --steps 20

Exits 0 when every check passed, 1 with a message naming the failed check
otherwise. Debian's /usr/bin/python3 has torch 1.13 (python3-torch).
"""

import argparse
import datetime
import os
import sys


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    parser.add_argument("--seed", type=int, default=1234, help="base seed; rank r uses seed+r")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the other ranks (default 60)"
    )
    return parser.parse_args()


def require_env(name):
    value = os.environ.get(name)
    if value is None:
        raise CheckFailed(f"environment variable {name} is not set; run this under a launcher (ddprun)")
    return value


class CheckFailed(Exception):
    pass


def check_all_reduce(torch, dist, rank, world_size):
    # Every rank contributes its rank; the sum 0+1+...+(W-1) proves that each
    # rank joined with a distinct RANK value and that collectives work.
    value = torch.tensor([float(rank)])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    expected = world_size * (world_size - 1) / 2
    if value.item() != expected:
        raise CheckFailed(
            f"all_reduce of ranks gave {value.item()}, expected {expected} "
            f"(duplicate or missing RANK values?)"
        )


def train(torch, rank, steps, seed):
    from torch.nn.parallel import DistributedDataParallel

    # The same model seed on every rank would hide a broken broadcast, so each
    # rank starts from different weights: DDP must make them equal.
    torch.manual_seed(seed + rank)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()

    # Per-rank data (seeded), so gradients differ until all-reduced.
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    inputs = torch.randn(steps, 32, 16, generator=generator)
    targets = inputs.sum(dim=2, keepdim=True)

    loss = torch.tensor(0.0)
    for step in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(inputs[step]), targets[step])
        loss.backward()
        optimizer.step()
    return model, loss.detach()


def check_params_identical(torch, dist, model, world_size):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    for other_rank, other in enumerate(gathered):
        if not torch.equal(other, gathered[0]):
            diff = (other - gathered[0]).abs().max().item()
            raise CheckFailed(f"parameters of rank {other_rank} differ from rank 0 (max abs diff {diff})")


def run(args):
    import torch
    import torch.distributed as dist

    rank = int(require_env("RANK"))
    world_size = int(require_env("WORLD_SIZE"))
    require_env("MASTER_ADDR")
    require_env("MASTER_PORT")
    if args.steps < 1:
        raise CheckFailed(f"--steps must be at least 1, got {args.steps}")

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method="env://", timeout=datetime.timedelta(seconds=args.timeout)
    )
    if dist.get_rank() != rank or dist.get_world_size() != world_size:
        raise CheckFailed(
            f"process group says rank {dist.get_rank()}/{dist.get_world_size()}, "
            f"environment says {rank}/{world_size}"
        )

    check_all_reduce(torch, dist, rank, world_size)
    model, loss = train(torch, rank, args.steps, args.seed)
    check_params_identical(torch, dist, model, world_size)

    # Mean loss across ranks, so the summary line does not depend on rank 0 alone.
    dist.all_reduce(loss, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(
            f"ddp_train: world_size={world_size} steps={args.steps} "
            f"loss={loss.item() / world_size:.6f} params identical",
            flush=True,
        )
    # Everyone leaves together, so no rank tears down gloo while another still
    # talks to it.
    dist.barrier()


def main():
    args = parse_args()
    code = 0
    try:
        run(args)
    except CheckFailed as error:
        print(f"ddp_train: rank {os.environ.get('RANK', '?')}: check failed: {error}", file=sys.stderr)
        code = 1
    except Exception as error:  # a peer vanished, a timeout, a bad MASTER_PORT...
        print(
            f"ddp_train: rank {os.environ.get('RANK', '?')}: {type(error).__name__}: {error}",
            file=sys.stderr,
        )
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # torch 1.13 under Python 3.11 can deadlock in ProcessGroupGloo's
    # destructor at interpreter exit (a gloo thread waits for the GIL the
    # exiting thread holds). Skip interpreter teardown entirely.
    os._exit(code)


if __name__ == "__main__":
    main()
