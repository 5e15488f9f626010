#!/usr/bin/python3
"""Every option the torch at hand's torchrun accepts, read from torchrun itself.

Why it exists: ddprun promises that every torchrun flag works unchanged
(docs/DESIGN's CLI contract). A list of flags written by hand goes stale the
day torch adds one; this reads torch.distributed.run.get_args_parser(), the
parser torchrun itself uses, so the conformance test
(TorchrunOptions.* in tests/integration/test_torchrun_conformance.cpp) checks
whatever this torch's torchrun lists, a new option included. It runs under
torch 1.13's Python 3.11 and torch 2.14's Python 3.14 alike.

Writes one JSON object to the file named by its argument, or else to stdout
(a file: torch's own libraries may print on stdout as they load, e.g. UCX's
"failed to get boot id" in a chroot):

    {"torch": "2.14.1",
     "options": [{"dest": "nproc_per_node",
                  "spellings": ["--nproc-per-node", "--nproc_per_node"],
                  "takes_value": true, "choices": null, "default": "1"}, ...]}

-h/--help is left out. A default that is not JSON (an object) is its repr().
Exits 77, saying why on stderr, where torch or its torchrun parser cannot be
imported (the test skips then).
"""

import argparse
import json
import sys


def json_value(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def main():
    try:
        import torch
        from torch.distributed.run import get_args_parser
    except Exception as error:  # noqa: BLE001  (any import failure means: no torchrun here)
        print(f"torchrun_options.py: cannot import torchrun's parser: {error!r}", file=sys.stderr)
        return 77
    options = []
    for action in get_args_parser()._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        options.append({
            "dest": action.dest,
            "spellings": list(action.option_strings),
            # store_true and torchrun's check_env take nothing (nargs 0); every other
            # action of torchrun's takes exactly one value.
            "takes_value": action.nargs != 0,
            "choices": None if action.choices is None else [str(c) for c in action.choices],
            "default": json_value(action.default),
        })
    text = json.dumps({"torch": torch.__version__, "options": options}) + "\n"
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
