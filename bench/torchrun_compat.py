#!/usr/bin/python3
"""torchrun, made to start where it cannot by itself, for benchmarks and tests.

Why it exists: torch 1.13's torchrun crashes on its own defaults under
Python 3.11. Std.from_str("0") returns None because Python 3.11 stopped
yielding the zero member (Std.NONE) when iterating an IntFlag, so the default
--redirects 0 / --tee 0 becomes None and start_processes fails with
"'NoneType' object has no attribute 'get'". This wrapper maps that None back
to Std.NONE and then runs torchrun's own main() unchanged, so the benchmark
measures torchrun as it would behave with the bug fixed.

Why it also exists, for torch 2.4 and later: TCPStore defaults to its libuv
server, and torchrun's rendezvous creates its store without a way to ask for
the other one; a torch built without libuv (Debian's 2.6 and 2.14) fails every
start with "use_libuv was requested but PyTorch was built without libuv
support". torch's own env:// honours USE_LIBUV=0; this wrapper makes the
rendezvous' stores honour it the same way, and changes nothing else.

    /usr/bin/python3 bench/torchrun_compat.py --nproc_per_node=8 --no_python true
    USE_LIBUV=0 python3 bench/torchrun_compat.py --nproc_per_node=2 --no_python env
"""

import os
import sys

import torch.distributed
from torch.distributed.elastic.multiprocessing import api

_original_from_str = api.Std.from_str.__func__


def _from_str(cls, value):
    parsed = _original_from_str(cls, value)
    if parsed is None:
        return cls.NONE
    if isinstance(parsed, dict):
        return {rank: cls.NONE if std is None else std for rank, std in parsed.items()}
    return parsed


api.Std.from_str = classmethod(_from_str)


def _honour_use_libuv():
    original = torch.distributed.TCPStore

    def tcp_store(*args, **kwargs):
        kwargs.setdefault("use_libuv", os.environ.get("USE_LIBUV", "1") != "0")
        return original(*args, **kwargs)

    import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend as c10d_backend
    import torch.distributed.elastic.rendezvous.static_tcp_rendezvous as static_backend

    for module in (c10d_backend, static_backend):
        if getattr(module, "TCPStore", None) is original:
            module.TCPStore = tcp_store

    # torch 2.x's c10d rendezvous hosts a second store for the workers (the agent
    # store they share) through dist.TCPStore, with libuv's default as well.
    import torch.distributed.elastic.rendezvous.dynamic_rendezvous as dynamic

    handler = dynamic.DynamicRendezvousHandler
    if hasattr(handler, "_create_tcp_store_server"):
        hosts = handler._create_tcp_store_server

        def create_tcp_store_server(self, *args, **kwargs):
            dynamic.dist.TCPStore = tcp_store
            try:
                return hosts(self, *args, **kwargs)
            finally:
                dynamic.dist.TCPStore = original

        handler._create_tcp_store_server = create_tcp_store_server


# use_libuv is a TCPStore argument from torch 2.2 on; before, there is nothing to honour.
if "use_libuv" in (torch.distributed.TCPStore.__init__.__doc__ or ""):
    _honour_use_libuv()
    # And in the workers' clients of its store (torchrun_site/sitecustomize.py).
    _site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_site")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [_site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

from torch.distributed.run import main  # noqa: E402  (must follow the patch)

if __name__ == "__main__":
    sys.exit(main())
