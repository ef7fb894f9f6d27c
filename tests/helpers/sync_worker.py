"""Worker for tests/perf/test_sync_free.py: syncs counted on this rank, for the tutorial loop in each precision
(``accelerator``) or for ``Trainer.fit`` (fp32, bf16, fp16) with ``self.log`` every step, the progress bar and a CSV logger
(``trainer``)."""

from __future__ import annotations

import sys
import tempfile

from dist_common import write_result  # noqa: E402  (puts the repo on sys.path)

from tests.helpers.sync_loops import accelerator_loop, trainer_fit


def main(out_dir: str, mode: str) -> None:
    result = {}
    if mode == "accelerator":
        for precision in ("no", "bf16", "fp16"):
            counter, accelerator = accelerator_loop(precision, warmup_steps=2, counted_steps=6)
            result[precision] = {"count": counter.count, "report": counter.report(), "steps": accelerator.step,
                                 "processes": accelerator.num_processes,
                                 "strategy": type(accelerator.strategy).__name__}
        accelerator.end_training()
    else:
        for precision in ("fp32", "bf16", "fp16"):
            with tempfile.TemporaryDirectory() as root:
                counter, trainer = trainer_fit(precision, root=root, counted_steps=6)
            result[precision] = {"count": counter.count, "report": counter.report(), "steps": trainer.global_step,
                                 "processes": trainer.accelerator.num_processes,
                                 "strategy": type(trainer.accelerator.strategy).__name__}
    write_result(out_dir, result)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "accelerator")
