"""One rank of a 2-process run with a TensorBoard tracker and two custom trackers (``main_process_only`` True and
False): writes ``rank{r}.json`` with the trackers this rank holds, what ``get_tracker`` gives it and the calls each
custom tracker received."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from stoker import Accelerator
from stoker.tracking import GeneralTracker


class Recorder(GeneralTracker):
    requires_logging_directory = False

    def __init__(self, name: str, main_process_only: bool) -> None:
        self.name, self.main_process_only, self.calls = name, main_process_only, []
        super().__init__()

    tracker = property(lambda self: self.calls)

    def start(self) -> None:
        self.calls.append("start")

    def store_init_configuration(self, values: dict) -> None:
        self.calls.append("config")

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.calls.append("log")

    def finish(self) -> None:
        self.calls.append("finish")


def main(out: str) -> None:
    main_only, everywhere = Recorder("main_only", True), Recorder("everywhere", False)
    accelerator = Accelerator(cpu=True, log_with=["tensorboard", main_only, everywhere], project_dir=out)
    accelerator.init_trackers("exp", config={"lr": 0.1})
    accelerator.log({"loss": 0.5}, step=0)
    result = {"trackers": [t.name for t in accelerator.trackers],
              "get_tensorboard": type(accelerator.get_tracker("tensorboard")).__name__,
              "get_everywhere": accelerator.get_tracker("everywhere") is everywhere}
    accelerator.end_training()
    result.update(main_only=main_only.calls, everywhere=everywhere.calls)
    with open(os.path.join(out, f"rank{accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
