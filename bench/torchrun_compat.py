#!/usr/bin/python3
"""torchrun, made to start under Python 3.11, for the benchmark only.

Why it exists: torch 1.13's torchrun crashes on its own defaults under
Python 3.11. Std.from_str("0") returns None because Python 3.11 stopped
yielding the zero member (Std.NONE) when iterating an IntFlag, so the default
--redirects 0 / --tee 0 becomes None and start_processes fails with
"'NoneType' object has no attribute 'get'". This wrapper maps that None back
to Std.NONE and then runs torchrun's own main() unchanged, so the benchmark
measures torchrun as it would behave with the bug fixed.

    /usr/bin/python3 bench/torchrun_compat.py --nproc_per_node=8 --no_python true
"""

import sys

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

from torch.distributed.run import main  # noqa: E402  (must follow the patch)

if __name__ == "__main__":
    sys.exit(main())
