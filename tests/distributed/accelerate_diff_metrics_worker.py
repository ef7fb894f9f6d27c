"""One rank of ``test_accelerate_diff_metrics.py``: evaluation loops that gather per-batch values the ways the
Hugging Face example scripts do, over datasets that do not fill the last step. Usage: ``... OUT``; writes
``{OUT}/rank{r}.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator
from stoker.utils import DataLoaderConfiguration

OUT = Path(sys.argv[1])


def gathered(samples: int, batch_size: int, **config: bool) -> dict[str, list]:
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(**config))
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(samples).float()), batch_size=batch_size))
    ids, repeated, objects = [], [], []
    per_process = batch_size // accelerator.num_processes if config.get("split_batches") else batch_size
    for (x,) in loader:
        ids += accelerator.gather_for_metrics(x).tolist()
        # one value per batch, repeated to the per-process batch size (run_clm_no_trainer.py's eval loss)
        repeated += accelerator.gather_for_metrics(x.mean().repeat(per_process)).tolist()
        objects += accelerator.gather_for_metrics([0] * per_process, use_gather_object=True)
    return {"ids": ids, "repeated": repeated, "objects": objects, "total_batch_size": loader.total_batch_size}


CONFIGS = {"even": {}, "split": {"split_batches": True}, "uneven": {"even_batches": False}}
# (11 samples without even batches would leave process 1 out of the last step: not a loop that can gather)
results = {f"{n}_{key}": gathered(n, 4, **CONFIGS[key]) for n, keys in ((11, ("even", "split")), (13, tuple(CONFIGS)),
                                                                        (16, tuple(CONFIGS))) for key in keys}
with open(OUT / f"rank{os.environ.get('RANK', '0')}.json", "w") as f:
    json.dump(results, f)
