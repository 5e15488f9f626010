#!/usr/bin/env python3
"""A 2x2 job's wall time: ddprun, torchrun of the same torch, and no launcher.

Why it exists: the launch cost users feel is a whole job's, start to end, on
two nodes: two agents (on 127.0.0.1 and 127.0.0.2 here) meeting over their
rendezvous, four ranks forming a gloo process group, training and leaving.
This runs the same job, with the same worker and the torch of the python3 that
runs it, three ways: the four ranks started directly with the environment set
by hand (the baseline: no launcher at all), ddprun, and torchrun (through
torchrun_compat.py, which makes it start on a torch without libuv):

    python3 bench/two_nodes.py build/ddprun [--reps 3] [--steps 5]

Prints the median and minimum wall time per way and what each launcher adds
to the baseline. Every run must exit 0 on both nodes, or the script stops.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "examples", "ddp_train.py")
NODES = ("127.0.0.1", "127.0.0.2")
NPROC = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def no_launcher(worker, port):
    """The four ranks, each with the variables a launcher would set."""
    world = len(NODES) * NPROC
    ranks = []
    for rank in range(world):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank % NPROC), "WORLD_SIZE": str(world),
               "LOCAL_WORLD_SIZE": str(NPROC), "MASTER_ADDR": NODES[0], "MASTER_PORT": str(port)}
        ranks.append((worker, env))
    return ranks


def ddprun(path, worker, port):
    return [([path, f"--nnodes={len(NODES)}", f"--node_rank={node}", f"--nproc_per_node={NPROC}",
              f"--master_addr={NODES[0]}", f"--master_port={port}", f"--local_addr={address}",
              *worker], {}) for node, address in enumerate(NODES)]


def torchrun(worker, port):
    compat = os.path.join(HERE, "torchrun_compat.py")
    return [([sys.executable, compat, f"--nnodes={len(NODES)}", f"--node_rank={node}",
              f"--nproc_per_node={NPROC}", f"--master_addr={NODES[0]}", f"--master_port={port}",
              "--monitor_interval=0.1", "--no_python", *worker], {}) for node in range(len(NODES))]


def run_job(processes, base_env):
    """Starts every process at once; the seconds until the last one exits."""
    start = time.perf_counter()
    running = [subprocess.Popen(argv, env={**base_env, **env}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE) for argv, env in processes]
    failed = []
    for process in running:
        _, err = process.communicate(timeout=300)
        if process.returncode != 0:
            failed.append(f"exit {process.returncode}: {err.decode(errors='replace')[-2000:]}")
    elapsed = time.perf_counter() - start
    if failed:
        sys.exit("two_nodes.py: a run failed:\n" + "\n".join(failed))
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ddprun")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    import torch  # the torch whose torchrun is measured; fails clearly when absent

    worker = [sys.executable, WORKER, "--steps", str(args.steps)]
    # No GPUs: CPU and gloo. USE_LIBUV=0 for a torch built without libuv (Debian's 2.x).
    base_env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "CUDA_VISIBLE_DEVICES": "",
                "USE_LIBUV": "0", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    ways = {
        "no launcher (4 ranks by hand)": lambda port: no_launcher(worker, port),
        "ddprun": lambda port: ddprun(os.path.abspath(args.ddprun), worker, port),
        f"torchrun {torch.__version__}": lambda port: torchrun(worker, port),
    }
    print(f"2 nodes x {NPROC} ranks of examples/ddp_train.py --steps {args.steps}, torch "
          f"{torch.__version__}, Python {sys.version.split()[0]}; {args.reps} runs each")
    print(f"{'launcher':34} {'median s':>9} {'min s':>7} {'added s':>8}")
    baseline = None
    for name, processes in ways.items():
        times = [run_job(processes(free_port()), base_env) for _ in range(args.reps)]
        median = statistics.median(times)
        baseline = median if baseline is None else baseline
        print(f"{name:34} {median:9.2f} {min(times):7.2f} {median - baseline:8.2f}", flush=True)


if __name__ == "__main__":
    main()
