#!/usr/bin/env python3
"""A PyTorch DDP job that survives restarts and membership changes.

Why it exists: an elastic launcher stops every worker with SIGTERM when a
worker fails or a node joins or leaves, then starts them all again, perhaps
with a different WORLD_SIZE. Training survives that only through checkpoints.
This program shows the whole cycle on a tiny deterministic model (linear
regression on synthetic data): rank 0 saves a checkpoint atomically every
--save-every steps, every rank resumes from it at whatever world size it now
has, and the step count and the loss carry on across the restart.

    ddprun --nproc_per_node=2 --max_restarts=3 examples/elastic_train.py /tmp/ckpt
    ddprun --nnodes=1:3 --nproc_per_node=2 --rdzv_endpoint=node-a \\
        examples/elastic_train.py /shared/ckpt --steps 400 --step-time 0.5

Each global batch is the same whatever the world size (it is generated from
the step number and split between the ranks), so the result does not depend
on how many workers there were, up to floating-point summation order.
CHECKPOINT_DIR must be shared by every node whose worker can become rank 0.
Running it again after it finished resumes at the end and trains no more
(raise --steps to go on).

Exits 0 when training finished and every rank ended with the same parameters,
1 with a one-line message otherwise, 2 on a usage error, and 128+N at once on
SIGTERM, SIGINT or SIGHUP (the checkpoint on disk stays the last complete
one). Debian's /usr/bin/python3 has torch 1.13 (python3-torch).
"""

import argparse
import datetime
import io
import os
import signal
import sys
import tempfile
import threading
import time

CHECKPOINT_NAME = "checkpoint.pt"
TEMP_PREFIX = ".checkpoint.pt."  # mkstemp's temporary files, same directory
FEATURES = 8
GLOBAL_BATCH = 48  # split between the ranks: equal shares for 1, 2, 3, 4, 6, 8... workers
SEED = 1234
NOISE = 0.01
LEARNING_RATE = 0.01
MOMENTUM = 0.5  # slow enough that the loss visibly falls over ~150 steps
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
UMASK = os.umask(0o022)
os.umask(UMASK)

# What the stop-signal thread reports: the step the main thread is at and the
# step of the last checkpoint this process wrote or resumed from.
progress = {"step": None, "checkpoint_step": None}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR", help="where rank 0 keeps " + CHECKPOINT_NAME)
    parser.add_argument(
        "--steps", type=int, default=200, metavar="N", help="total training steps, across restarts (default 200)"
    )
    parser.add_argument(
        "--save-every", type=int, default=10, metavar="K", help="rank 0 saves a checkpoint every K steps (default 10)"
    )
    parser.add_argument(
        "--step-time",
        type=float,
        default=0.05,
        metavar="S",
        help="seconds to sleep per step, so the job can be scaled while it runs (default 0.05)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds to wait for the other ranks, at start and in every collective (default 60)",
    )
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.save_every < 1:
        parser.error(f"--save-every must be at least 1, got {args.save_every}")
    if args.step_time < 0:
        parser.error(f"--step-time must not be negative, got {args.step_time}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    return args


class CheckFailed(Exception):
    pass


def require_env(name):
    value = os.environ.get(name)
    if value is None:
        raise CheckFailed(f"environment variable {name} is not set; run this under a launcher (ddprun)")
    return value


def int_env(name):
    value = require_env(name)
    try:
        return int(value)
    except ValueError:
        raise CheckFailed(f"environment variable {name} is '{value}', not an integer") from None


def stop_on_signals():
    """Exit 128+N at once on a stop signal, even from inside a collective.

    A Python signal handler runs only when the main thread returns to the
    interpreter, which it does not while gloo waits for a peer that is gone.
    So every thread blocks the stop signals (threads inherit the mask: this
    runs before torch starts any) and one thread takes them with sigwait.
    The checkpoint stays consistent: it is only ever replaced whole.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def wait():
        signum = signal.sigwait(STOP_SIGNALS)
        step = progress["step"]
        saved = progress["checkpoint_step"]
        where = "before training" if step is None else f"at step {step}"
        last = "none" if saved is None else f"step {saved}"
        message = (
            f"elastic_train: rank {os.environ.get('RANK', '?')}: {signal.Signals(signum).name} {where}; "
            f"exiting (last checkpoint: {last})\n"
        )
        # os.write: no Python stream lock, which the main thread may hold.
        os.write(2, message.encode())
        os._exit(128 + signum)

    threading.Thread(target=wait, name="stop-signals", daemon=True).start()


def pick_device(torch, local_rank):
    if not torch.cuda.is_available():
        return "gloo", torch.device("cpu")
    count = torch.cuda.device_count()
    # A launcher that gives each worker its own CUDA_VISIBLE_DEVICES leaves it
    # one device, cuda:0; with every device visible, LOCAL_RANK picks one.
    index = 0 if count == 1 else local_rank
    if index >= count:
        raise CheckFailed(f"LOCAL_RANK {local_rank} but only {count} CUDA devices are visible")
    torch.cuda.set_device(index)
    return "nccl", torch.device("cuda", index)


def true_weights(torch):
    generator = torch.Generator().manual_seed(SEED)
    return torch.randn(FEATURES, 1, generator=generator), torch.randn(1, generator=generator)


def global_batch(torch, step, weight, bias):
    # A function of the step alone, so a restart at any world size sees the
    # same data from the step it resumes at.
    generator = torch.Generator().manual_seed(SEED * 1_000_003 + step)
    inputs = torch.randn(GLOBAL_BATCH, FEATURES, generator=generator)
    targets = inputs @ weight + bias + NOISE * torch.randn(GLOBAL_BATCH, 1, generator=generator)
    return inputs, targets


def load_checkpoint(torch, path):
    """Rank 0's view of the checkpoint: None, or the dict it holds."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CheckFailed(f"cannot read checkpoint {path}: {error.strerror}") from None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu")
    except Exception as error:  # pickle errors, a truncated file...
        text = " ".join(str(error).split()) or "(no message)"
        raise CheckFailed(f"checkpoint {path} is unreadable: {type(error).__name__}: {text}") from None
    if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= state.keys():
        raise CheckFailed(f"checkpoint {path} was not written by elastic_train.py (no step/model/optimizer)")
    if not isinstance(state["step"], int) or state["step"] < 0:
        raise CheckFailed(f"checkpoint {path} has a bad step {state['step']!r}")
    return state


def share_checkpoint(torch, dist, rank, path):
    """Rank 0 reads the checkpoint and sends it to every rank.

    Every rank resumes from exactly what rank 0 read, even where
    CHECKPOINT_DIR is not shared, and a checkpoint rank 0 cannot read fails
    every rank at once instead of leaving the others waiting in a collective.
    """
    message = [None]
    if rank == 0:
        try:
            message[0] = ("ok", load_checkpoint(torch, path))
        except CheckFailed as error:
            message[0] = ("error", str(error))
    dist.broadcast_object_list(message, src=0)
    kind, payload = message[0]
    if kind == "error":
        raise CheckFailed(payload if rank == 0 else f"rank 0: {payload}")
    return payload


def save_checkpoint(torch, directory, state):
    # A whole new file, then os.replace: a reader (or a restart after SIGKILL
    # in the middle of this) sees the old checkpoint or the new one, never half.
    descriptor, temp_path = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
    try:
        os.fchmod(descriptor, 0o666 & ~UMASK)  # mkstemp's 0600 would hide it from other users
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_path, os.path.join(directory, CHECKPOINT_NAME))
    except BaseException:
        try:
            os.unlink(temp_path)
        except OSError:
            pass
        raise
    directory_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


def remove_stale_temp_files(directory):
    # Left by a rank 0 killed while saving; the checkpoint itself is whole.
    for name in os.listdir(directory):
        if name.startswith(TEMP_PREFIX):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


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
    from torch.nn.parallel import DistributedDataParallel

    rank = int_env("RANK")
    world_size = int_env("WORLD_SIZE")
    local_rank = int_env("LOCAL_RANK")
    master = f"{require_env('MASTER_ADDR')}:{require_env('MASTER_PORT')}"
    job_round = os.environ.get("DDPRUN_ROUND", "-")
    restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "-")
    directory = args.checkpoint_dir
    path = os.path.join(directory, CHECKPOINT_NAME)

    torch.set_num_threads(1)
    backend, device = pick_device(torch, local_rank)
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=args.timeout))
    if dist.get_rank() != rank or dist.get_world_size() != world_size:
        raise CheckFailed(
            f"process group says rank {dist.get_rank()}/{dist.get_world_size()}, "
            f"environment says {rank}/{world_size}"
        )

    setup_error = None
    if rank == 0:
        try:
            os.makedirs(directory, exist_ok=True)
            remove_stale_temp_files(directory)
        except OSError as error:
            # Raised after the broadcast below, so no rank waits for rank 0.
            setup_error = f"cannot use checkpoint directory {directory}: {error.strerror}"
    errors = [setup_error]
    dist.broadcast_object_list(errors, src=0)
    if errors[0] is not None:
        raise CheckFailed(errors[0] if rank == 0 else f"rank 0: {errors[0]}")

    torch.manual_seed(SEED)
    model = torch.nn.Linear(FEATURES, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    state = share_checkpoint(torch, dist, rank, path)
    start = 0
    loss_value = None
    head = f"rank {rank}/{world_size} round {job_round}"
    tail = f"; local_rank {local_rank}, restart {restarts}, {backend}, master {master}"
    if state is None:
        print(f"{head}: starting at step 0 (no checkpoint in {directory}){tail}", flush=True)
    else:
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as error:
            text = " ".join(str(error).split()) or type(error).__name__
            raise CheckFailed(f"checkpoint {path} does not fit this model: {text}") from None
        start = state["step"]
        loss_value = state.get("loss")
        origin = f"saved in round {state.get('round', '-')} by world {state.get('world_size', '?')}"
        past = f"; already past --steps {args.steps}" if start >= args.steps else ""
        print(f"{head}: resuming at step {start} (checkpoint {path}, {origin}){past}{tail}", flush=True)
        progress["checkpoint_step"] = start

    # DDP broadcasts rank 0's parameters, and every rank got the same
    # optimizer state above, so all ranks step in lockstep from here.
    ddp_model = DistributedDataParallel(model, device_ids=None if device.type == "cpu" else [device.index])
    weight, bias = true_weights(torch)

    step = start
    progress["step"] = step
    while step < args.steps:
        inputs, targets = global_batch(torch, step, weight, bias)
        local_inputs = torch.tensor_split(inputs, world_size)[rank].to(device)
        local_targets = torch.tensor_split(targets, world_size)[rank].to(device)
        optimizer.zero_grad()
        squared_error = ((ddp_model(local_inputs) - local_targets) ** 2).sum()
        # DDP averages gradients over the ranks; scaling by world_size makes
        # the result the gradient of the mean over the whole global batch,
        # whatever share each rank had.
        (squared_error * (world_size / GLOBAL_BATCH)).backward()
        optimizer.step()
        step += 1
        progress["step"] = step

        if step % args.save_every == 0 or step == args.steps:
            total = squared_error.detach().clone()
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            loss_value = total.item() / GLOBAL_BATCH
            if rank == 0:
                save_checkpoint(
                    torch,
                    directory,
                    {
                        "step": step,
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "loss": loss_value,
                        "world_size": world_size,
                        "round": job_round,
                    },
                )
                print(f"step {step}/{args.steps} loss {loss_value:.6f} world {world_size}", flush=True)
            progress["checkpoint_step"] = step
        if args.step_time > 0 and step < args.steps:
            time.sleep(args.step_time)

    check_params_identical(torch, dist, model, world_size)
    if rank == 0:
        loss_text = "?" if loss_value is None else f"{loss_value:.6f}"
        print(
            f"done: step {step}/{args.steps} loss {loss_text} world {world_size}, params identical",
            flush=True,
        )
    # Everyone leaves together, so no rank tears down the process group
    # while another still talks to it.
    dist.barrier()


def main():
    args = parse_args()
    stop_on_signals()
    code = 0
    try:
        run(args)
    except CheckFailed as error:
        print(f"elastic_train: rank {os.environ.get('RANK', '?')}: {error}", file=sys.stderr)
        code = 1
    except Exception as error:  # a peer vanished, a timeout, a bad MASTER_PORT...
        text = " ".join(str(error).split()) or "(no message)"
        print(f"elastic_train: rank {os.environ.get('RANK', '?')}: {type(error).__name__}: {text}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # torch 1.13 under Python 3.11 can deadlock in ProcessGroupGloo's
    # destructor at interpreter exit (a gloo thread waits for the GIL the
    # exiting thread holds). Skip interpreter teardown entirely.
    os._exit(code)


if __name__ == "__main__":
    main()
