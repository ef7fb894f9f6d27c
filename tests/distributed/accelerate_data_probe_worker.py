"""One rank of ``test_accelerate_data_probe.py``: what each process of two sees of loaders that leave the last
step short. Usage: ``... OUT``; writes ``{OUT}/rank{r}.json``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import Accelerator, skip_first_batches
from stoker.utils import DataLoaderConfiguration


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(self.n))


def batches(loader) -> list[list[int]]:
    return [b.tolist() for b in loader]


def main() -> dict[str, object]:
    result: dict[str, object] = {}
    for samples in (10, 11):  # split_batches: a short last batch is completed from the epoch's start
        acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(split_batches=True))
        result[f"split_{samples}"] = batches(acc.prepare(DataLoader(torch.arange(samples), batch_size=4)))
    for dispatch in (None, True, False):  # an iterable dataset's short last step
        acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
        loader = acc.prepare(DataLoader(Stream(10), batch_size=3))
        result[f"stream_{dispatch}"] = batches(loader)
        result[f"stream_{dispatch}_gathered"] = [acc.gather_for_metrics(b).tolist() for b in loader]
        result[f"stream_{dispatch}_skip1"] = batches(skip_first_batches(loader, 1))
    acc = Accelerator(cpu=True)  # drop_last drops the short last round, [6, 7, 8] and [9]
    loader = acc.prepare(DataLoader(Stream(10), batch_size=3, drop_last=True))
    result["stream_drop_last"] = batches(loader)
    result["map_drop_last"] = batches(acc.prepare(DataLoader(list(range(10)), batch_size=3, drop_last=True)))
    result["stream_drop_last_gathered"] = [acc.gather_for_metrics(b).tolist() for b in loader]
    acc = Accelerator(cpu=True)  # a batch of a tuple dataset is a list of tensors: each is cut, not the list
    loader = acc.prepare(DataLoader(TensorDataset(torch.arange(10), torch.arange(10) * 10), batch_size=3))
    result["tuple_gathered"] = [[t.tolist() for t in acc.gather_for_metrics(batch)] for batch in loader]
    return result


if __name__ == "__main__":
    out = main()
    with open(Path(sys.argv[1]) / f"rank{os.environ.get('RANK', '0')}.json", "w") as f:
        json.dump(out, f)
