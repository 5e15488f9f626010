"""Progress beats for ddprun's hang detection (--hang-timeout), in one call.

    from ddprun_progress import beat
    for step in range(steps):
        beat(f"step {step}")     # a no-op when not run under ddprun --hang-timeout
        train_one_step()

Nothing more is needed: ddprun gives each worker a file descriptor named in
DDPRUN_PROGRESS_FD; every write to it is a beat and the last line written is
the rank's label in ddprun's reports. The write never blocks, even while
ddprun itself is stopped. This module only saves the lookup; the fd alone is
enough (os.write(int(os.environ["DDPRUN_PROGRESS_FD"]), b"step 3\n")).
"""

import os

_FD = int(os.environ.get("DDPRUN_PROGRESS_FD", "-1"))


def beat(label: str = "") -> None:
    """One beat; `label` (one line) says where the rank is, e.g. "step 1200"."""
    if _FD >= 0:
        os.write(_FD, (label.replace("\n", " ") + "\n").encode())
