"""2-process DDP step time: stoker's Accelerator against a raw ``DistributedDataParallel`` loop.

The compute-bound workload of ``overhead.py`` (an MLP of ~5.5M parameters, batch 64 per process, AdamW and a
LambdaLR) trained in data parallel over N processes (gloo on CPU, NCCL on GPUs). Runners:

    raw          DDP(model), a DistributedSampler'd DataLoader, the canonical step; the baseline.
    raw-again    the same raw loop once more: its ratio to ``raw`` is the noise floor (an A/A control).
    accelerator  the Accelerate quick-tour loop (``prepare``, ``accumulate``, ``backward``) with stoker.

Runners take turns block by block (order alternating, after warm-up); every process runs the same sequence, so
the collectives stay in step. Rank 0 prints median time per step and two ratios to ``raw`` (see ``overhead.py``:
``paired`` is the median of block-by-block ratios, which cancels drifts in the machine's load).

Run (it starts the processes itself, or runs under an outer torchrun):
    python benchmarks/ddp.py                       # 2 processes
    python benchmarks/ddp.py --nproc 2 --reps 20 --steps 8
    torchrun --nproc_per_node=2 benchmarks/ddp.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import WORKLOADS, PrebatchedDataset, Result, Workload, report  # noqa: E402

from stoker import Accelerator  # noqa: E402
from stoker.accelerator.launch import ensure_processes  # noqa: E402


def make_loader(w: Workload, world: int, sampler: bool) -> DataLoader:
    """``w.steps`` batches per process; the raw loop shards with a DistributedSampler, stoker with prepare."""
    data = PrebatchedDataset(w.steps * world, w.batch_size, w.widths[0], w.widths[-1])
    return DataLoader(data, batch_size=None, sampler=DistributedSampler(data, shuffle=False) if sampler else None)


def raw_runner(w: Workload, device: torch.device) -> Callable[[], None]:
    from torch.nn.parallel import DistributedDataParallel

    model = w.make_model().to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer, scheduler = w.make_optimizer(ddp)
    loader = make_loader(w, dist.get_world_size(), sampler=True)

    def epoch() -> None:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

    return epoch


def accelerator_runner(w: Workload, accelerator: Accelerator) -> Callable[[], None]:
    model = w.make_model()
    optimizer, scheduler = w.make_optimizer(model)
    loader = make_loader(w, accelerator.num_processes, sampler=False)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    def epoch() -> None:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()

    return epoch


def measure(w: Workload, epochs: dict[str, Callable[[], None]], device: torch.device) -> dict[str, Result]:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(w.warmup):
        for epoch in epochs.values():
            epoch()
    results = {name: Result([], []) for name in epochs}
    names = list(epochs)
    for rep in range(w.reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            dist.barrier()  # every block starts together: no process carries the other's wait into its time
            sync()
            c0, t0 = time.process_time(), time.perf_counter()
            epochs[name]()
            sync()
            t1, c1 = time.perf_counter(), time.process_time()
            results[name].wall.append((t1 - t0) / w.steps)
            results[name].cpu.append((c1 - c0) / w.steps)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="processes (when not already under torchrun)")
    parser.add_argument("--reps", type=int, default=16, help="timed blocks per runner")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per process in a block")
    parser.add_argument("--workload", default="5m", choices=sorted(WORKLOADS))
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even when GPUs are present")
    args = parser.parse_args(argv)
    ensure_processes(args.nproc)  # re-runs this script in --nproc processes unless a launcher already did

    accelerator = Accelerator(cpu=args.cpu)  # joins the process group (gloo on CPU, NCCL on CUDA)
    base = WORKLOADS[args.workload]
    w = Workload(f"{base.name} DDP x{accelerator.num_processes}", base.widths, base.batch_size, args.steps,
                 args.reps, warmup=2)
    epochs = {"raw": raw_runner(w, accelerator.device), "raw-again": raw_runner(w, accelerator.device),
              "accelerator": accelerator_runner(w, accelerator)}
    results = measure(w, epochs, accelerator.device)
    if accelerator.is_main_process:
        print(f"torch {torch.__version__}, {accelerator.num_processes} processes on {accelerator.device}, "
              f"{torch.get_num_threads()} threads each, backend {dist.get_backend()}")
        print("\n".join(report(w, results)), flush=True)
        for clock in ("wall", "cpu"):
            mine, raw = getattr(results["accelerator"], clock), getattr(results["raw"], clock)
            paired = statistics.median(a / b for a, b in zip(mine, raw))
            print(f"DDP step-time ratio accelerator/raw, {clock} clock: paired median {paired:.3f}, "
                  f"fastest blocks {min(mine) / min(raw):.3f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
