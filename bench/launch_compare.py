#!/usr/bin/env python3
"""Launch time and launcher memory of ddprun next to a shell loop and torchrun.

Why it exists: bench/run.sh measures torchrun through Debian's torch 1.13; this
is the same question, asked with whatever torch the running python3 has (a
GPU machine's torch 2.x, say), in one short run:

    python3 bench/launch_compare.py build/ddprun [--nproc 8] [--reps 10]

Each tool starts --nproc workers of `true`: the median and minimum wall time.
Then --nproc workers of `sleep 2`: the launcher's resident memory (every process
of the tool's tree but the workers, summed), the highest of samples every 20 ms.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

def launcher_rss_kib(pid):
    """Summed VmRSS of pid and its descendants that are not `sleep` workers."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except OSError:
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if fields.get("Name", "").strip() != "sleep" and "VmRSS" in fields:
            total += int(fields["VmRSS"].split()[0])
    return total


def peak_launcher_rss_kib(argv, env):
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        peak = max(peak, launcher_rss_kib(process.pid))
        time.sleep(0.02)
    return peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ddprun")
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    n = args.nproc
    # Each tool as a function of the worker's command (one word).
    tools = {
        "shell loop": lambda w: ["sh", "-c", f"for i in $(seq {n}); do {w} & done; wait"],
        "ddprun": lambda w: [args.ddprun, f"--nproc_per_node={n}", *w.split()],
    }
    if importlib.util.find_spec("torch") is not None:
        tools["torchrun --monitor-interval=0.1"] = lambda w: [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
            "--monitor-interval=0.1", "--no-python", *w.split(),
        ]
    # No GPUs: the launch is what is measured, and n may exceed the machine's GPUs.
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "HOME": "/tmp"}
    if "LD_LIBRARY_PATH" in os.environ:
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    print(f"{n} workers; {args.reps} runs of `true` each, then one of `sleep 2`")
    print(f"{'launcher':34} {'median ms':>10} {'min ms':>8} {'launcher RSS MiB':>17}")
    for name, argv in tools.items():
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            code = subprocess.run(argv("true"), env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode
            times.append((time.perf_counter() - start) * 1000)
            if code != 0:
                print(f"{name}: exit code {code}")
                break
        peak_mib = peak_launcher_rss_kib(argv("sleep 2"), env) / 1024
        print(f"{name:34} {statistics.median(times):10.1f} {min(times):8.1f} {peak_mib:17.1f}")

if __name__ == "__main__":
    main()
