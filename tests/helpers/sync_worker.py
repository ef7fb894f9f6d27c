"""Worker for tests/perf/test_sync_free.py: the tutorial loop in each precision, syncs counted on this rank."""

from __future__ import annotations

import sys

from dist_common import write_result  # noqa: E402  (puts the repo on sys.path)

from tests.helpers.sync_loops import accelerator_loop


def main(out_dir: str) -> None:
    result = {}
    for precision in ("no", "bf16", "fp16"):
        counter, accelerator = accelerator_loop(precision, warmup_steps=2, counted_steps=6)
        result[precision] = {"count": counter.count, "report": counter.report(), "steps": accelerator.step,
                             "processes": accelerator.num_processes, "strategy": accelerator.distributed_type}
    accelerator.end_training()
    write_result(out_dir, result)


if __name__ == "__main__":
    main(sys.argv[1])
