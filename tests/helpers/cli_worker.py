"""A script for ``stoker launch`` tests: reports what each process sees, or waits for a signal.

    python cli_worker.py OUT_DIR settings   # writes OUT_DIR/rank_{r}.json: the Accelerator's settings and the env
    python cli_worker.py OUT_DIR signal     # writes ready_{r}, then on SIGTERM writes sigterm_{r} and exits 0
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def report_settings(out: Path) -> None:
    from stoker import Accelerator

    accelerator = Accelerator()  # no arguments: the launcher's settings apply
    facts = {
        "pid": os.getpid(), "rank": accelerator.process_index, "num_processes": accelerator.num_processes,
        "mixed_precision": accelerator.mixed_precision,
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
        "device": str(accelerator.device), "distributed_type": accelerator.distributed_type,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("STOKER_", "ACCELERATE_"))
                or k in ("WORLD_SIZE", "OMP_NUM_THREADS")},
    }
    accelerator.wait_for_everyone()
    (out / f"rank_{facts['rank']}.json").write_text(json.dumps(facts))
    accelerator.end_training()


def wait_for_sigterm(out: Path) -> None:
    rank = os.environ.get("RANK", "0")

    def on_sigterm(signum: int, frame: object) -> None:
        (out / f"sigterm_{rank}").write_text(str(signum))
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    (out / f"ready_{rank}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120  # never outlive a broken test
    while time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)


if __name__ == "__main__":
    out_dir, mode = Path(sys.argv[1]), sys.argv[2]
    report_settings(out_dir) if mode == "settings" else wait_for_sigterm(out_dir)
