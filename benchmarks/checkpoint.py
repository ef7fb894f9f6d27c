"""save_state / load_state against plain torch.save / torch.load of the same tensors.

A ~100M-parameter model plus its AdamW state (~1.2 GB of float32). ``save_state`` also writes RNG states,
counters, a manifest with CRC-32 of every file, fsyncs everything and renames the folder into place; plain
``torch.save`` does none of that (its time with an added fsync is printed too). Runs alternate and the median
is reported, because page-cache effects make single runs noisy.

    python benchmarks/checkpoint.py [--params 100] [--repeats 5] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch

from stoker import Accelerator


def build(params_m: int) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer]:
    width = 4096
    layers = max(1, round(params_m * 1e6 / (width * width + width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    for p in model.parameters():  # one step so that AdamW's exp_avg / exp_avg_sq exist
        p.grad = torch.randn_like(p)
    optimizer.step()
    optimizer.zero_grad()
    return accelerator, model, optimizer


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def restore_plain(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    loaded = torch.load(path)
    model.load_state_dict(loaded["model"])
    optimizer.load_state_dict(loaded["optimizer"])


def timed(fn) -> float:
    os.sync()  # start from a clean page cache: no run pays for the previous run's writeback
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=100, help="model size in millions of parameters")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    accelerator, model, optimizer = build(args.params)
    n_params = sum(p.numel() for p in model.parameters())
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    nbytes = sum(t.numel() * t.element_size() for t in state["model"].values())
    nbytes += sum(t.numel() * t.element_size() for s in state["optimizer"]["state"].values() for t in s.values())
    root = tempfile.mkdtemp(dir=args.dir, prefix="stoker-bench-")
    times: dict[str, list[float]] = {k: [] for k in ("torch.save", "torch.save+fsync", "save_state",
                                                      "torch.load", "load_state")}
    try:
        for i in range(args.repeats):
            pt, pt2, ckpt = (os.path.join(root, n) for n in (f"plain_{i}.pt", f"plain_fsync_{i}.pt", f"ckpt_{i}"))
            saves = [("torch.save", lambda: torch.save(state, pt)),
                     ("save_state", lambda: accelerator.save_state(ckpt)),
                     ("torch.save+fsync", lambda: (torch.save(state, pt2), fsync_path(pt2)))]
            for key, fn in saves if i % 2 == 0 else saves[::-1]:  # alternate the order: no side always goes first
                times[key].append(timed(fn))
            loads = [("torch.load", lambda: restore_plain(pt, model, optimizer)),
                     ("load_state", lambda: accelerator.load_state(ckpt))]
            for key, fn in loads if i % 2 == 0 else loads[::-1]:
                times[key].append(timed(fn))
            for path in (pt, pt2):
                os.remove(path)
            shutil.rmtree(ckpt)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(times, n_params, nbytes, args.repeats)


def report(times: dict[str, list[float]], n_params: int, nbytes: int, repeats: int) -> None:
    print(f"{n_params / 1e6:.1f}M parameters + AdamW state = {nbytes / 1e9:.2f} GB, {repeats} runs, "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    for key, values in times.items():
        med = statistics.median(values)
        print(f"  {key:<17} median {med:6.2f} s  min {min(values):6.2f} s  {nbytes / med / 1e9:5.2f} GB/s   runs "
              + " ".join(f"{t:.2f}" for t in values))
    for a, b in [("save_state", "torch.save"), ("save_state", "torch.save+fsync"), ("load_state", "torch.load")]:
        ratios = sorted(x / y for x, y in zip(times[a], times[b]))  # paired: the two ran back to back
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        print(f"  {a} / {b:<17} paired ratio median {statistics.median(ratios):.2f}x "
              f"(quartiles {q[0]:.2f}-{q[2]:.2f}), ratio of medians "
              f"{statistics.median(times[a]) / statistics.median(times[b]):.2f}x")


if __name__ == "__main__":
    main()
