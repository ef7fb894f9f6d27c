"""2-process DDP step time: stoker's Accelerator against a raw ``DistributedDataParallel`` loop.

The compute-bound model of ``overhead.py`` (an MLP 1024-1536-1536-1024, ~5.5M parameters, batch 64 per
process, AdamW and a LambdaLR) trained data-parallel over N processes (gloo on CPU, NCCL on GPUs). Runners:

    raw          DDP(model), a DataLoader with a DistributedSampler, the canonical step: the baseline.
    raw-again    the same raw loop once more; its ratio to ``raw`` is the noise floor (an A/A control).
    accelerator  the Accelerate quick-tour loop (``prepare``, ``accumulate``, ``backward``) with stoker.

Runners take turns block by block (order alternating, after warm-up); every process runs the same sequence,
so the collectives stay in step, and a barrier starts every block. Rank 0 prints, per runner and clock (wall:
what a user waits; CPU: the process's own work, much less disturbed by other programs on the machine), the
median time per step, the *paired* ratio to ``raw`` (median of block-by-block ratios, which cancels drifts in
the machine's load) with its quartiles, and the ratio of the fastest blocks.

Run (it starts its processes itself, or runs under an outer torchrun):
    python benchmarks/ddp.py                            # 2 processes
    python benchmarks/ddp.py --nproc 2 --reps 40 --steps 4
    torchrun --nproc_per_node=2 benchmarks/ddp.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from stoker import Accelerator
from stoker.accelerator.distributed.launch import ensure_processes

WIDTHS, BATCH = (1024, 1536, 1536, 1024), 64


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(WIDTHS) - 2 else [])
    return torch.nn.Sequential(*layers)


def make_optimizer(model: torch.nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + 1e-4 * s))


def make_loader(steps: int, world: int, sampler: bool) -> DataLoader:
    """``steps`` batches per process; the raw loop shards with a DistributedSampler, stoker with ``prepare``."""
    g = torch.Generator().manual_seed(0)
    n = steps * world * BATCH
    data = TensorDataset(torch.randn(n, WIDTHS[0], generator=g), torch.randn(n, WIDTHS[-1], generator=g))
    return DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False) if sampler else None)


def raw_runner(steps: int, device: torch.device) -> Callable[[], None]:
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(make_model().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer, scheduler = make_optimizer(ddp)
    loader = make_loader(steps, dist.get_world_size(), sampler=True)

    def epoch() -> None:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

    return epoch


def accelerator_runner(steps: int, accelerator: Accelerator) -> Callable[[], None]:
    model = make_model()
    optimizer, scheduler = make_optimizer(model)
    loader = make_loader(steps, accelerator.num_processes, sampler=False)
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


def measure(epochs: dict[str, Callable[[], None]], steps: int, reps: int, warmup: int,
            device: torch.device) -> dict[str, dict[str, list[float]]]:
    """Seconds per step of every block, per runner and clock."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        for epoch in epochs.values():
            epoch()
    results = {name: {"wall": [], "cpu": []} for name in epochs}
    names = list(epochs)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            dist.barrier()  # every block starts together: no process carries another's wait into its time
            sync()
            c0, t0 = time.process_time(), time.perf_counter()
            epochs[name]()
            sync()
            t1, c1 = time.perf_counter(), time.process_time()
            results[name]["wall"].append((t1 - t0) / steps)
            results[name]["cpu"].append((c1 - c0) / steps)
    return results


def report(results: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = [f"  {'runner':<12}{'clock':<6}{'median/step':>13}{'paired':>8}  {'[quartiles]':<16}{'fastest':>8}"]
    for name, clocks in results.items():
        for clock, mine in clocks.items():
            ref = results["raw"][clock]
            ratios = sorted(a / b for a, b in zip(mine, ref))
            q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
            lines.append(f"  {name:<12}{clock:<6}{statistics.median(mine) * 1e3:>10.2f} ms{median:>8.3f}  "
                         f"[{q1:.3f}, {q3:.3f}]  {min(mine) / min(ref):>8.3f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="processes (when not already under torchrun)")
    parser.add_argument("--reps", type=int, default=30, help="timed blocks per runner")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per process in a block")
    parser.add_argument("--warmup", type=int, default=2, help="untimed blocks per runner first")
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even when GPUs are present")
    args = parser.parse_args(argv)
    ensure_processes(args.nproc)  # re-runs this script in --nproc processes unless a launcher already did

    accelerator = Accelerator(cpu=args.cpu)  # joins the process group (gloo on CPU, NCCL on CUDA)
    device = accelerator.device
    epochs = {"raw": raw_runner(args.steps, device), "raw-again": raw_runner(args.steps, device),
              "accelerator": accelerator_runner(args.steps, accelerator)}
    results = measure(epochs, args.steps, args.reps, args.warmup, device)
    if accelerator.is_main_process:
        params = sum(p.numel() for p in make_model().parameters())
        print(f"torch {torch.__version__}, {accelerator.num_processes} processes on {device.type}, "
              f"{torch.get_num_threads()} threads each, backend {dist.get_backend()}; {params:,} parameters, "
              f"batch {BATCH} per process, {args.steps} steps x {args.reps} blocks per runner")
        print("\n".join(report(results)), flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
