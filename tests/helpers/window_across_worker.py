"""One rank of the 2-process check of windows that run across loader ends (``sync_with_dataloader=False``).

    python tests/helpers/window_across_worker.py OUT_DIR      # as a rank of run_workers, or under torchrun

20 samples in batches of 2 over two processes: 5 batches a process an epoch, windows of 3, two epochs (3 windows
and one left open). Each rank records, as JSON: the weights and open-window gradients of stoker's run, of a
hand-written DDP loop (``no_sync`` off the window's last micro-batch, loss / 3, step and clear every third
micro-batch, whatever the epoch) on the same batches, and of a stoker run saved after micro-batch 5 (at epoch 0's
end, inside the window) and resumed into fresh objects.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from stoker import Accelerator, DataLoaderConfiguration
from stoker.utils import GradientAccumulationPlugin
from tests.helpers.models import make_mlp, make_regression_data

STEPS, EPOCHS, STOP = 3, 2, 5


def _flat_grads(model: torch.nn.Module) -> list[float]:
    return [v for p in model.parameters() for v in (p.grad.reshape(-1).tolist() if p.grad is not None else [])]


def stoker_run(folder: Path, stop_after: int | None = None, resume: bool = False) -> dict:
    plugin = GradientAccumulationPlugin(num_steps=STEPS, sync_with_dataloader=False)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin,
                              dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    model = make_mlp(seed=7)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(make_regression_data(n=20), batch_size=2)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    if resume:
        accelerator.load_state(folder)
    seen: dict = {"sync": [], "end": [], "x": []}
    while loader.epoch < EPOCHS:
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
            seen["sync"].append(accelerator.sync_gradients)
            seen["end"].append(accelerator.gradient_state.end_of_dataloader)
            seen["x"].append(x[:, 0].tolist())
            if len(seen["sync"]) == stop_after:
                accelerator.save_state(folder)
                return seen
    module = accelerator.unwrap_model(model)
    return {**seen, "weights": common.flat(module), "grads": _flat_grads(module), "step": accelerator.step}


def plain_ddp_run(rank: int) -> dict:
    """The reference: torch's DDP by hand, this rank's batches of the same loader (Accelerate's round robin)."""
    model = DistributedDataParallel(copy.deepcopy(make_mlp(seed=7)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = list(DataLoader(make_regression_data(n=20), batch_size=2))[rank::2]
    xs = []
    for i, (x, y) in enumerate([b for _ in range(EPOCHS) for b in batches], start=1):
        xs.append(x[:, 0].tolist())
        if i % STEPS:
            with model.no_sync():
                (F.mse_loss(model(x), y) / STEPS).backward()
            continue
        (F.mse_loss(model(x), y) / STEPS).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return {"weights": common.flat(model.module), "grads": _flat_grads(model.module), "x": xs}


def main() -> None:
    out = Path(sys.argv[1])
    rank = common.rank()
    result = {"stoker": stoker_run(out / "ck")}
    result["plain"] = plain_ddp_run(rank)
    folder = out / "mid"
    result["stopped"] = stoker_run(folder, stop_after=STOP)
    result["resumed"] = stoker_run(folder, resume=True)
    common.write_result(out, result)


if __name__ == "__main__":
    main()
