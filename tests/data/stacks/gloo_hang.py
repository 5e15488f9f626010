import os, sys, time
import torch
import torch.distributed as dist
def train_step(t):
    dist.all_reduce(t)
def main():
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=2)
    t = torch.ones(4)
    print(f"rank {rank} ready", flush=True)
    if rank == 0:
        train_step(t)
    else:
        time.sleep(1000)
main()
