"""torchrun's workers on a torch without libuv, for benchmarks and tests.

Why it exists: torch 2.4 to 2.6 create a worker's client of torchrun's store
(TORCHELASTIC_USE_AGENT_STORE) without passing use_libuv, so it defaults to
True and, on a torch built without libuv (Debian 13's 2.6), every
init_process_group(env://) under torchrun fails with "use_libuv was requested
but PyTorch was build without libuv support", USE_LIBUV=0 or not. Later torch
passes it. torchrun_compat.py puts this directory on the workers' PYTHONPATH;
here the client honours USE_LIBUV=0 as torch's own env:// server does, and
nothing else changes. A use_libuv given explicitly still wins.
"""

import importlib
import os

# Invisible to the worker and its children: the environment they see is torchrun's.
_here = os.path.dirname(os.path.abspath(__file__))
_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _here]
if _path:
    os.environ["PYTHONPATH"] = os.pathsep.join(_path)
else:
    os.environ.pop("PYTHONPATH", None)

if os.environ.get("USE_LIBUV") == "0":
    try:
        # The module: torch.distributed.rendezvous as an attribute is a function of it.
        _rendezvous = importlib.import_module("torch.distributed.rendezvous")
    except ImportError:  # not a torch worker, or a torch without distributed
        _rendezvous = None
    _original = getattr(_rendezvous, "TCPStore", None)
    if _original is not None and "use_libuv" in (_original.__init__.__doc__ or ""):

        def _tcp_store(*args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            return _original(*args, **kwargs)

        _rendezvous.TCPStore = _tcp_store
