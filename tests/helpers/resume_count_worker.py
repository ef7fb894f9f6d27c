"""One rank of the process-count resume matrix (``tests/distributed/test_resume_process_count.py``).

Usage: ``resume_count_worker.py OUT PHASE`` where PHASE names the cases this launch runs (see ``PLAN``); each case
is one run: an uninterrupted reference, the first half of an interrupted run (stopped mid-epoch and saved), or its
second half (resumed from that checkpoint with this launch's process count). Several cases share one launch, so
that the whole matrix costs three launches: 2 processes, then 1, then 2.

Every run records, per epoch, the sample ids this process trained on, and the final weights; each rank writes
``{OUT}/{case}-rank{r}.json``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dist_common as common  # also puts the repo on sys.path
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import Accelerator, DataLoaderConfiguration, Trainer, TrainingModule, set_seed

OUT, PHASE = Path(sys.argv[1]), sys.argv[2]
N = 48  # samples per epoch; global batch 8: 6 optimizer steps an epoch, no padding on 1 or 2 processes
EPOCHS = 2  # interrupted 24 samples into the second epoch (see CASES), resumed to the end of the second


def tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g)
    return x, x @ torch.randn(4, 2, generator=g), torch.arange(N)


class Stream(IterableDataset):
    """The same ``N`` items, as a stream (the order is the same every epoch)."""

    def __iter__(self):
        yield from zip(*tensors())


def make_net() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def dataset(kind: str):
    return Stream() if kind == "iterable" else TensorDataset(*tensors())


def accelerator_run(kind: str, batch: int, split: bool, strategy: str, stop: int | None, load: str | None,
                    save: str | None) -> dict:
    """The Accelerator loop: up to ``stop`` optimizer steps in all (from a checkpoint when ``load``; None: to the
    end of the last epoch), then ``save``."""
    set_seed(0)
    acc = Accelerator(cpu=True, strategy=strategy,
                      dataloader_config=DataLoaderConfiguration(split_batches=split, use_stateful_dataloader=True))
    model, opt = make_net(), None
    loader = DataLoader(dataset(kind), batch_size=batch, shuffle=kind == "map")
    model, loader = acc.prepare(model, loader)
    opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    if load:
        acc.load_state(load)
    with torch.random.fork_rng(devices=[]):
        rng = torch.rand(1).item()  # this process's RNG right after loading
    seen: dict[str, list[int]] = {}
    stop = stop or 10**9
    while acc.step < stop and loader.epoch < EPOCHS:
        for x, y, ids in loader:
            seen.setdefault(str(loader.epoch), []).extend(ids.tolist())
            acc.backward(F.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
            if acc.step >= stop:
                break
    if save:
        acc.save_state(save)
    return {"seen": seen, "weights": common.flat(acc.unwrap_model(model)),  # full tensors (collective under FSDP)
            "step": acc.step, "rng": rng}


def refused_run(load: str) -> dict:
    """Loads a checkpoint of 2 processes (global batch 8, 24 samples into the epoch) with a batch of 16, which
    cannot continue it: the error, and whether anything changed before it."""
    acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    model, loader = acc.prepare(make_net(), DataLoader(dataset("map"), batch_size=16, shuffle=True))
    opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    before = common.flat(model)
    try:
        acc.load_state(load)
    except ValueError as error:
        return {"error": type(error).__name__, "message": str(error), "unchanged": common.flat(model) == before,
                "step": acc.step, "epoch": loader.epoch, "opt": type(opt).__name__}
    return {"error": None}


class Module(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.seen: dict[str, list[int]] = {}
        self.batch_idx: dict[str, list[int]] = {}

    def training_step(self, batch, batch_idx):
        x, y, ids = batch
        self.seen.setdefault(str(self.trainer.current_epoch), []).extend(ids.tolist())
        self.batch_idx.setdefault(str(self.trainer.current_epoch), []).append(batch_idx)
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer_run(kind: str, batch: int, strategy: str, stop: int | None, load: str | None, save: str | None) -> dict:
    trainer = Trainer(devices=int(os.environ["WORLD_SIZE"]), accelerator="cpu", max_epochs=EPOCHS, max_steps=stop,
                      seed=0,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=str(OUT / "root"), strategy=strategy)
    module = Module()
    trainer.fit(module, DataLoader(dataset(kind), batch_size=batch, shuffle=kind == "map"), ckpt_path=load)
    if save:
        trainer.save_checkpoint(save)
    return {"seen": module.seen, "weights": common.flat(module),
            "step": trainer.global_step, "batch_idx": module.batch_idx, "epoch": trainer.current_epoch}


# case -> (loop, data, per-process batch, split_batches, strategy); the batch is for this launch's process count.
# A global batch of 8 (split_batches, or per-process batches scaled) stops after optimizer step 9 (24 samples into
# the second epoch); "same" keeps the per-process batch, so the global batch changes with the count.
CASES = {
    "acc-map-split": ("acc", "map", {1: 8, 2: 8}, True, "ddp"),
    "acc-map-scaled": ("acc", "map", {1: 8, 2: 4}, False, "ddp"),
    "acc-map-same": ("acc", "map", {1: 4, 2: 4}, False, "ddp"),
    "acc-iter-scaled": ("acc", "iterable", {1: 8, 2: 4}, False, "ddp"),
    "acc-iter-same": ("acc", "iterable", {1: 4, 2: 4}, False, "ddp"),
    "acc-fsdp": ("acc", "map", {1: 8, 2: 8}, True, "fsdp"),
    "trainer-map": ("trainer", "map", {1: 8, 2: 4}, False, "auto"),
    "trainer-map-same": ("trainer", "map", {1: 4, 2: 4}, False, "auto"),
    "trainer-iter": ("trainer", "iterable", {1: 8, 2: 4}, False, "auto"),
}
STOPS = {1: 9, 2: 9}
SAME_STOPS = {1: 18, 2: 9}  # a global batch of 4 on one process: 12 steps an epoch

# launch -> [(case, what)]: "ref" uninterrupted, "save" first half, "resume" second half; the checkpoint of a case
# is {OUT}/ckpt-{case}-{from}to{to}
PLAN = {
    "two-a": [(c, "save21") for c in CASES] + [(c, "save22") for c in ("acc-map-scaled", "trainer-map")],
    "one": [(c, "ref") for c in CASES] + [(c, "resume21") for c in CASES] + [(c, "save12") for c in CASES]
    + [("acc-map-split", "refuse21")],
    "two-b": [(c, "resume12") for c in CASES] + [(c, "resume22") for c in ("acc-map-scaled", "trainer-map")],
}


def main() -> None:
    n = int(os.environ["WORLD_SIZE"])
    for case, what in PLAN[PHASE]:
        loop, kind, sizes, split, strategy = CASES[case]
        if strategy == "ddp" and n == 1:
            strategy = "auto"
        ckpt = str(OUT / f"ckpt-{case}-{what[-2]}to{what[-1]}") if what != "ref" else None
        stop = (SAME_STOPS if case.endswith("same") else STOPS)[n] if what.startswith("save") else None
        load = ckpt if what.startswith("resume") else None
        save = ckpt if what.startswith("save") else None
        if what == "refuse21":
            result = refused_run(str(OUT / f"ckpt-{case}-2to1"))
        elif loop == "acc":
            result = accelerator_run(kind, sizes[n], split, strategy, stop, load, save)
        else:
            result = trainer_run(kind, sizes[n], strategy, stop, load, save)
        common.write_result(OUT, result, f"{case}-{what}-rank{common.rank()}.json")


if __name__ == "__main__":
    main()
