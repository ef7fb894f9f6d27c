"""Two ranks agree on a preemption signal (``agree_on_signal``) for several combinations; prints each result."""

from __future__ import annotations

import signal

import dist_common as common

from stoker import Accelerator
from stoker.trainer.preemption import agree_on_signal

acc = Accelerator(cpu=True)
rank = common.rank()
cases = [(signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, None), (signal.SIGUSR1, signal.SIGTERM), (None, None)]
for case in cases:
    print("agreed", agree_on_signal(acc, case[rank]), flush=True)
acc.end_training()
