"""Python function calls per optimizer step: raw PyTorch, the Accelerator loop and the Trainer, counted exactly.

A noise-free companion to ``overhead.py``. On a shared VM the time ratios move by several percent from run to run,
while this count does not move at all: it shows whether a change to the hot path added or removed work. Each runner
of ``overhead.py`` trains ``--steps`` optimizer steps of the ``micro`` model under ``sys.setprofile`` (after warm-up
steps), and every Python-level call and every call of a C function from Python is counted; the table lists the
calls per step and, with ``--diff``, which functions a runner calls that raw does not.

What calls explain, and what not: ``--cold`` times one small hot-path call (``GradientWindow.loss_for_backward``)
in a ``timeit`` loop and between forward/backward passes of a 4x4 layer; on the 2-vCPU VM of benchmarks/README.md
that was 139 ns warm and +0.56 us between passes. At that price the Accelerator's ~25 calls beyond raw accounted for
roughly 12-15 us of the ~45 us per step that ``overhead.py`` measured for it on the tiny MLP; fewer calls is
necessary but not sufficient for a lower ratio. Since stoker's loaders and optimizers skip torch's profiler ranges
(stoker/accelerator/torch_shortcuts.py) its rows make fewer calls than ``raw``; compare them with ``raw-lean`` (the
raw loop taking the same shortcuts): 5 December 2026, raw 276.3, raw-lean 201.2, accelerator 223.3, trainer-bare
239.0, trainer-full 266.7 calls per step.

Run:
    python benchmarks/step_calls.py
    python benchmarks/step_calls.py --runners raw,raw-lean,accelerator,trainer-bare,trainer-full
    python benchmarks/step_calls.py --runners raw,trainer-bare --diff
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402
from overhead import RUNNERS, Workload  # noqa: E402

Counts = collections.Counter


def _where(code: Any) -> str:
    path = code.co_filename
    for marker in ("site-packages/", "/stoker/", "/benchmarks/", "/lib/python"):
        if marker in path:
            path = path[path.index(marker) + len(marker):]
            break
    return f"{path}:{code.co_name}"


def count_calls(name: str, steps: int) -> Counts:
    """Calls made while runner ``name`` trains ``steps`` optimizer steps (whichever thread trains)."""
    w = Workload("calls", (4, 4), batch_size=4, steps=steps, reps=3, warmup=1)
    run = RUNNERS[name](w)
    run(steps)  # warm-up: first-step work (optimizer state, imports) is not counted
    run(steps // 2)  # then the counted steps hold exactly one epoch boundary for every runner
    counts: Counts = collections.Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            counts[_where(frame.f_code)] += 1
        elif event == "c_call":
            counts[f"C:{getattr(arg, '__qualname__', repr(arg))}"] += 1

    # The Trainer trains on its own thread, which installs overhead.THREAD_PROFILE at the start of each block.
    overhead.THREAD_PROFILE[0] = profile
    sys.setprofile(profile)
    try:
        run(steps)
    finally:
        sys.setprofile(None)
        overhead.THREAD_PROFILE[0] = None
    return counts


def cold_cost(iterations: int = 5000) -> tuple[float, float, float]:
    """What one small hot-path call costs warm and "cold": ``GradientWindow.loss_for_backward`` (a few attribute
    reads and writes) timed alone in a loop, and as the difference it makes when each call follows a forward and
    backward pass of a 4x4 layer. Returns (warm, cold, step) medians in seconds."""
    import statistics
    import time
    import timeit

    from stoker import Accelerator

    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(torch.nn.Linear(4, 4), torch.optim.SGD(torch.nn.Linear(4, 4).parameters()))
    window, x, scalar = accelerator._window, torch.randn(4, 4), torch.zeros(())
    warm = min(timeit.repeat(lambda: window.loss_for_backward(scalar, None), number=iterations, repeat=5)) / iterations

    def with_call() -> None:
        window.loss_for_backward(model(x).sum(), None).backward()

    def without() -> None:
        model(x).sum().backward()

    times: dict[str, list[float]] = {"with": [], "without": []}
    clock = time.perf_counter
    for i in range(iterations):
        for name, fn in (("with", with_call), ("without", without)) if i % 2 else (("without", without), ("with", with_call)):
            t = clock()
            fn()
            times[name].append(clock() - t)
    step = statistics.median(times["without"])
    return warm, statistics.median(times["with"]) - step, step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Python calls per optimizer step, per runner of overhead.py.")
    parser.add_argument("--runners", default="raw,accelerator,trainer-bare,trainer-full")
    parser.add_argument("--steps", type=int, default=200, help="counted steps (an even number)")
    parser.add_argument("--diff", action="store_true", help="list the calls each runner makes beyond raw")
    parser.add_argument("--cold", action="store_true",
                        help="also time one small hot-path call warm (timeit) and between forward/backward passes")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.cold:
        warm, cold, step = cold_cost()
        print(f"GradientWindow.loss_for_backward: {warm * 1e9:.0f} ns in a timeit loop, {cold * 1e6:+.2f} us when "
              f"each call follows a forward/backward of a 4x4 layer ({step * 1e6:.1f} us without it)")
    names = [n.strip() for n in args.runners.split(",") if n.strip()]
    results = {name: count_calls(name, args.steps) for name in names}
    base = results.get("raw")
    print(f"{'runner':<16}{'calls/step':>12}{'beyond raw':>12}")
    for name, counts in results.items():
        per_step = sum(counts.values()) / args.steps
        extra = "" if base is None else f"{per_step - sum(base.values()) / args.steps:+12.1f}"
        print(f"{name:<16}{per_step:>12.1f}{extra}")
    if args.diff and base is not None:
        for name, counts in results.items():
            if name == "raw":
                continue
            print(f"\n{name}: calls per step beyond raw")
            for key in sorted(set(counts) | set(base)):
                d = (counts[key] - base[key]) / args.steps
                if abs(d) >= 0.5:
                    print(f"  {d:+6.2f}  {key}")


if __name__ == "__main__":
    main()
