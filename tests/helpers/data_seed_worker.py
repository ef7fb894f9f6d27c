"""Child process of tests/accelerator/test_data_seed.py: resumes a loader's position in a process whose global RNG
differs from the saving one, and prints the batches it then yields.

    python tests/helpers/data_seed_worker.py CHECKPOINT   # prints {"different_seed": [...], "set_seed_after": [...]}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:  # run as a script: make `stoker` and `tests` importable
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from stoker import Accelerator, DataLoaderConfiguration, set_seed  # noqa: E402
from tests.helpers.data_seed_common import EPOCHS, make_loader, rest_of_run  # noqa: E402


def resume(checkpoint: str, global_seed: int, set_seed_after_prepare: bool) -> list:
    torch.manual_seed(global_seed)  # not the saving run's seed: prepare draws another shuffle seed
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    loaders = accelerator.prepare(*make_loader())
    if set_seed_after_prepare:
        set_seed(0)  # the saving run's seed, but too late to reach the loaders' own generator
    accelerator.load_state(checkpoint)
    return rest_of_run(loaders, EPOCHS)


if __name__ == "__main__":
    folder = sys.argv[1]
    print(json.dumps({"different_seed": resume(folder, 1234, False), "set_seed_after": resume(folder, 99, True)}))
