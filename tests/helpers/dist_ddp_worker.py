"""One rank of the 2-process DDP checks (``tests/distributed/test_ddp.py``). Usage: ``dist_ddp_worker.py OUT_DIR``.

Every check runs in this one launch (interpreter start-up is the expensive part) and records what it saw; the
test asserts on the JSON each rank writes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, DataLoaderConfiguration, set_seed
from tests.helpers.models import make_mlp, make_regression_data

OUT = Path(sys.argv[1])
RANK = common.rank()


def train(accelerator: Accelerator, batch_size: int, epochs: int = 2) -> list[float]:
    """SGD on a shuffled regression set; the shuffle seed is drawn after set_seed(0) on every run."""
    set_seed(0)
    model = make_mlp(seed=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(make_regression_data(n=32), batch_size=batch_size, shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
    return common.flat(accelerator.unwrap_model(model))


def check_parity(result: dict) -> Accelerator:
    ddp = Accelerator(cpu=True, gradient_accumulation_steps=2)
    result["num_processes"] = ddp.num_processes
    result["distributed_type"] = ddp.distributed_type
    weights = train(ddp, batch_size=4)
    # The reference: one process, batch 2B, same seed, same accumulation (no process group involved).
    single = Accelerator(cpu=True, gradient_accumulation_steps=2, strategy="single")
    reference = train(single, batch_size=8)
    result["parity_max_diff"] = common.max_diff(weights, reference)
    result["ddp_step"] = ddp.step
    result["weights_agree"] = ddp.gather(torch.tensor(weights)).reshape(2, -1).diff(dim=0).abs().max().item()
    return ddp


def grad_vector(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def check_sync(result: dict) -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = make_mlp(seed=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    g = torch.Generator().manual_seed(10 + RANK)  # each rank its own data
    seen = []
    for micro in range(4):
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
            both = accelerator.gather(grad_vector(model)[None])
            seen.append({"sync": accelerator.sync_gradients, "ranks_differ": bool((both[0] != both[1]).any())})
            opt.step()
            opt.zero_grad()
    result["sync_steps"] = seen
    x = torch.randn(4, 8, generator=g)
    with accelerator.no_sync(model):
        model(x).sum().backward()
    both = accelerator.gather(grad_vector(model)[None])
    result["no_sync_differs"] = bool((both[0] != both[1]).any())


def check_metrics(result: dict) -> None:
    for name, config in {"round_robin": DataLoaderConfiguration(),
                         "split": DataLoaderConfiguration(split_batches=True)}.items():
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        dataset = TensorDataset(torch.arange(13), torch.arange(13) * 10)
        loader = accelerator.prepare(DataLoader(dataset, batch_size=4))
        tensors, objects = [], []
        for idx, label in loader:
            tensors.append(accelerator.gather_for_metrics((idx, label)))
            objects.extend(accelerator.gather_for_metrics(idx.tolist()))
        result[f"metrics_{name}"] = torch.cat([t[0] for t in tensors]).tolist()
        result[f"metrics_{name}_labels_ok"] = all(bool((t[1] == t[0] * 10).all()) for t in tensors)
        result[f"metrics_{name}_objects"] = objects
        result[f"metrics_{name}_len"] = len(loader)


class Stream(torch.utils.data.IterableDataset):
    """0, 1, ..., n-1 without a length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):  # noqa: ANN204
        return iter(torch.arange(self.n))


def check_iterable(result: dict) -> None:
    for split in (False, True):
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(split_batches=split))
        loader = accelerator.prepare(DataLoader(Stream(13), batch_size=4))
        mine, gathered = [], []
        for batch in loader:
            mine.extend(batch.tolist())
            gathered.extend(accelerator.gather_for_metrics(batch).tolist())
        result[f"iterable_split_{split}_mine"] = mine
        result[f"iterable_split_{split}_gathered"] = gathered


def check_collectives(result: dict, tmp: Path) -> None:
    accelerator = Accelerator(cpu=True)
    t = torch.tensor([RANK + 1.0, 10.0 * (RANK + 1)])
    result["gather"] = accelerator.gather(t).tolist()
    result["gather_scalar"] = accelerator.gather(torch.tensor(RANK)).tolist()
    result["gather_uneven"] = accelerator.gather(torch.full((RANK + 1, 2), float(RANK))).tolist()
    result["gather_nested"] = accelerator.gather({"a": torch.tensor([RANK])})["a"].tolist()
    result["reduce_sum"] = accelerator.reduce(t).tolist()
    result["reduce_mean"] = accelerator.reduce(t, "mean").tolist()
    result["reduce_none"] = accelerator.reduce(t, "none").tolist()
    ragged = torch.arange(2 + RANK)
    result["pad"] = accelerator.pad_across_processes(ragged, pad_index=-1).tolist()
    result["pad_first"] = accelerator.pad_across_processes(ragged, pad_index=-1, pad_first=True).tolist()
    with accelerator.split_between_processes(list(range(5))) as share:
        result["split"] = share
    with accelerator.split_between_processes(list(range(5)), apply_padding=True) as share:
        result["split_padded"] = share
    with accelerator.split_between_processes({"a": torch.arange(4), "b": ["w", "x", "y", "z"]}) as share:
        result["split_dict"] = [share["a"].tolist(), share["b"]]
    marker = tmp / "main_was_first"
    with accelerator.main_process_first():
        if RANK == 0:
            import time

            time.sleep(0.3)  # rank 1 would overtake here if main_process_first did not hold it back
            marker.write_text("x")
        result["main_first_saw_marker"] = marker.exists()
    accelerator.wait_for_everyone()
    result["any_process"] = [accelerator.strategy.any_process(RANK == 1), accelerator.strategy.any_process(False)]


def check_shuffle_and_scheduler(result: dict) -> None:
    torch.manual_seed(100 + RANK)  # different global RNGs: the shuffle must still agree across ranks
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(16)), batch_size=2, shuffle=True))
    epochs = []
    for _ in range(2):
        mine = torch.cat([b[0] for b in loader])
        epochs.append(accelerator.gather(mine).tolist())
    result["shuffle_epochs"] = epochs
    torch.manual_seed(7)  # the same global RNG on every rank and in the test's one-process run
    acc = Accelerator(cpu=True)
    _, shuffled = acc.prepare(DataLoader(TensorDataset(torch.arange(16)), batch_size=2),
                              DataLoader(TensorDataset(torch.arange(16)), batch_size=2, shuffle=True))
    result["shuffle_after_sequential"] = [v for b in shuffled for v in acc.gather(b[0]).tolist()]
    for split in (False, True):
        acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(split_batches=split))
        model = make_mlp(seed=3)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        model, opt, sched = acc.prepare(model, opt, sched)
        for _ in range(3):
            acc.backward(model(torch.ones(2, 8)).sum())
            opt.step()
            sched.step()
            opt.zero_grad()
        result[f"scheduler_last_epoch_split_{split}"] = sched.scheduler.last_epoch


def check_save_model(result: dict, tmp: Path, creator: Accelerator) -> None:
    accelerator = Accelerator(cpu=True)
    model = make_mlp(seed=4)
    prepared = accelerator.prepare(model)
    result["wrapped_type"] = type(prepared).__name__
    result["unwrap_is_user_model"] = accelerator.unwrap_model(prepared) is model
    accelerator.save_model(prepared, tmp / "export")
    result["export_files"] = sorted(os.listdir(tmp / "export"))
    import torch.distributed as dist

    accelerator.end_training()  # did not create the group: leaves it alone
    result["group_kept_by_other"] = dist.is_initialized()
    creator.end_training()  # created it: destroys it
    result["group_destroyed_by_creator"] = not dist.is_initialized()


def resume_run(folder: Path, stop_after: int | None) -> tuple[list[float], Accelerator]:
    """Two shuffled epochs with dropout, accumulation 2; saves after ``stop_after`` micro-steps (mid-window) and
    goes on, or (``stop_after=None``) starts from that checkpoint."""
    set_seed(0)
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2, dataloader_config=config)
    model = torch.nn.Sequential(make_mlp(seed=6), torch.nn.Dropout(0.3))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    loader = DataLoader(make_regression_data(n=44), batch_size=4, shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    if stop_after is None:
        accelerator.load_state(folder)
    micro = 0
    while loader.epoch < 2:
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
            micro += 1
            if micro == stop_after:
                accelerator.save_state(folder)
    return common.flat(accelerator.unwrap_model(model)), accelerator


def check_resume(result: dict, tmp: Path) -> None:
    folder = tmp / "resume_ckpt"
    full, _ = resume_run(folder, stop_after=5)  # 6 batches per process and epoch: micro-step 5 is mid-window
    result["ckpt_files"] = sorted(os.listdir(folder))
    resumed, acc = resume_run(folder, stop_after=None)
    result["resume_max_diff"] = common.max_diff(full, resumed)
    result["resume_equal"] = full == resumed
    result["resume_step"] = acc.step


class FullPrecisionLinear(torch.nn.Linear):
    """A linear layer that opts out of autocast: in fp16 only the loss scale touches its gradients."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            return super().forward(x)


def summed_window_grads(mixed_precision: str) -> list[float]:
    """One window of two micro-batches of summed losses with other item counts on each rank (5 and 3 items on
    rank 0, 1 and 6 on rank 1), through a layer that opts out of autocast: in fp16 only the loss scale and the window's
    normaliser (which each rank alone would choose differently here) touch the gradients."""
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision, gradient_accumulation_steps=2)
    model = FullPrecisionLinear(8, 2)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-1, 1, 16).reshape(2, 8))
        model.bias.zero_()
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = make_regression_data(n=15).tensors
    sizes = [(0, 5), (5, 8)] if RANK == 0 else [(8, 9), (9, 15)]
    for start, end in sizes:
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x[start:end]), y[start:end], reduction="sum"), num_items=end - start)
    accelerator.unscale_gradients()
    return grad_vector(model).tolist()


def check_summed_fp16(result: dict) -> None:
    result["summed_fp16"] = summed_window_grads("fp16")
    result["summed_fp32"] = summed_window_grads("no")
    reference = torch.nn.Linear(8, 2)  # the per-item mean over both ranks' 15 items, in one process
    with torch.no_grad():
        reference.weight.copy_(torch.linspace(-1, 1, 16).reshape(2, 8))
        reference.bias.zero_()
    x, y = make_regression_data(n=15).tensors
    F.mse_loss(reference(x), y, reduction="sum").div(15).backward()
    result["summed_reference"] = grad_vector(reference).tolist()


def main() -> None:
    tmp = OUT / "shared"
    tmp.mkdir(exist_ok=True)
    result: dict = {}
    creator = check_parity(result)
    check_sync(result)
    check_metrics(result)
    check_iterable(result)
    check_collectives(result, tmp)
    check_shuffle_and_scheduler(result)
    check_resume(result, tmp)
    check_summed_fp16(result)
    check_save_model(result, tmp, creator)
    common.write_result(OUT, result)


if __name__ == "__main__":
    main()
