#!/usr/bin/env python3
"""The worker of scripts/chaos.py: trains a tiny model with checkpoints and beats.

    chaos_worker.py CHECKPOINT_DIR --steps N --step-time SECONDS

Pure Python (no torch), so that eight agents restarting again and again fit on
two CPUs: linear regression by SGD on data generated from the step number.
Rank 0 saves {step, weights} atomically after every step; every rank starts
from the last checkpoint, at whatever world size it now has. Each line it
prints is numbered from 0 in this process (`chaos SEQ ...`), so the driver can
tell a lost or mixed line from a killed worker's last one. Exits 0 once the
checkpoint's step reaches N, 143 on SIGTERM.
"""

import argparse
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from ddprun_progress import beat  # noqa: E402

SEQUENCE = 0


def say(text):
    global SEQUENCE
    sys.stdout.write(f"chaos {SEQUENCE} pid={os.getpid()} {text}\n")
    sys.stdout.flush()
    SEQUENCE += 1


def load(path):
    try:
        with open(path) as f:
            state = json.load(f)
        return int(state["step"]), [float(w) for w in state["w"]]
    except (OSError, ValueError, KeyError):
        return 0, [0.0, 0.0]


def save(path, step, weights):
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump({"step": step, "w": weights}, f)
    os.replace(temporary, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-time", type=float, default=0.05)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    round_ = int(os.environ.get("DDPRUN_ROUND", "0"))
    path = os.path.join(args.checkpoint_dir, "checkpoint.json")
    step, weights = load(path)
    say(f"start round={round_} rank={rank} world={world} step={step}")
    while step < args.steps:
        beat(f"step {step}")
        data = random.Random(step * 1000 + rank)
        x = data.uniform(-1, 1)
        y = 3.0 * x + 0.5
        error = weights[0] * x + weights[1] - y
        weights = [weights[0] - 0.1 * error * x, weights[1] - 0.1 * error]
        time.sleep(args.step_time)
        step += 1
        if rank == 0:
            save(path, step, weights)
        say(f"step round={round_} rank={rank} world={world} step={step}")
    say(f"done round={round_} rank={rank} world={world} step={step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
