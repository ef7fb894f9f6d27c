"""Where in an epoch the Trainer's time goes: every optimizer step timed on its own, grouped by its position.

``overhead.py`` says how much slower a configuration is than raw PyTorch over whole rounds; this script says *when*
the extra time is spent. It trains the tiny MLP of ``overhead.py`` (``tiny-300``: 300-step epochs) with
``Trainer.fit`` in one process per configuration, records ``time.perf_counter()`` at every ``on_train_batch_end``,
drops the first two epochs (warm-up), and times each interval from one step's batch end to the next: what the
loop does after step n's hooks (logging, the epoch's end) plus step n + 1. Against the median interval in the
middle of the epochs it reports:

- ``log``: the extra time of the interval after a step that sends values to the loggers (every
  ``log_every_n_steps``, 50);
- ``after-log``: the extra time of the next three intervals, summed (work a logging call left to other threads);
- ``edge``: the extra time of the interval after an epoch's last step: the epoch's end (epoch metrics, the
  checkpoint's work on the training thread), the next epoch's start and its first step;
- ``after-edge``: the extra time of the next 80 intervals, summed (work left to other threads: a checkpoint's
  commit, fsyncs and deletions);
- ``per epoch``: the mean extra time per epoch of the whole run, all of the above together.

Configurations (comma-separated ``--configs``): ``raw`` (the control: ``overhead.py``'s raw loop, timed after
every step the same way; its "log" positions are every 50th step, where it does nothing), ``bare`` (no logger, bar or checkpoint), ``log`` (``self.log``
every step), ``tb`` (``log`` plus a TensorBoard logger), ``ckpt`` (``bare`` plus ``ModelCheckpoint``'s default
checkpoint per epoch), ``full`` (``tb`` plus a progress bar to /dev/null plus ``ckpt``). Each runs in its own
process, in turns, ``--repeat`` times; the table shows the median over the repeats.

Run:
    python benchmarks/step_times.py --configs bare,log,tb,ckpt,full --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

CONFIGS = ("raw", "bare", "log", "tb", "ckpt", "full")
WARMUP_EPOCHS = 2


def measure(config: str, epochs: int) -> dict[str, float]:
    """One fit of ``config`` in this process; the figures of the module docstring, in microseconds."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import overhead

    from stoker import Callback, ModelCheckpoint, ProgressBar, Trainer

    torch.set_num_threads(1)
    w = overhead.WORKLOADS["tiny-300"]
    steps = w.steps

    class Clock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_end(self, *args: object) -> None:
            self.times.append(time.perf_counter())

    clock = Clock()
    if config == "raw":  # the control: overhead.py's raw loop, its time taken where the Trainer calls the hook
        raw_times(w, epochs, clock.on_train_batch_end)
        durations, numbers, middle = intervals(clock.times, steps)
        return figures(durations, numbers, middle, steps, every=50)
    callbacks: list[object] = [clock]
    if config == "full":
        callbacks.append(ProgressBar(file=open(os.devnull, "w")))
    if config in ("ckpt", "full"):
        callbacks.append(ModelCheckpoint())
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", default_root_dir=tempfile.mkdtemp(prefix="step-times-"),
                      logger=config in ("tb", "full"), enable_progress_bar=config == "full",
                      enable_checkpointing=config in ("ckpt", "full"), enable_model_summary=False,
                      callbacks=callbacks)
    trainer.fit(overhead.trainer_module(w, log=config != "bare" and config != "ckpt"), w.make_loader())
    durations, numbers, middle = intervals(clock.times, steps)
    return figures(durations, numbers, middle, steps, trainer.log_every_n_steps)


def raw_times(w: object, epochs: int, batch_end: Callable[[], None]) -> None:
    """``epochs`` epochs of overhead.py's raw loop over ``w``, calling ``batch_end`` after every step."""
    import torch.nn.functional as F

    model = w.make_model()
    optimizer, scheduler = w.make_optimizer(model)
    loader = w.make_loader()
    for _ in range(epochs):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            batch_end()


def figures(durations: list[float], numbers: range, middle: float, steps: int, every: int) -> dict[str, float]:
    """The table's figures (see the module docstring) from :func:`intervals`; ``every``: the logging cadence."""

    def excess(select: object) -> float:
        chosen = [d for d, n in zip(durations, numbers) if select(n)]
        return statistics.mean(chosen) - middle if chosen else 0.0

    return {
        "middle step": middle,
        "log": excess(lambda n: n % every == 0 and n % steps),
        "after-log": sum(excess(lambda n, k=k: n % every == k and n % steps != k) for k in (1, 2, 3)),
        "edge": excess(lambda n: n % steps == 0),
        "after-edge": sum(excess(lambda n, k=k: n % steps == k) for k in range(1, 81)),
        "per epoch": (sum(durations) - middle * len(durations)) / (len(durations) / steps),
    }


def intervals(times: list[float], steps: int) -> tuple[list[float], range, float]:
    """From the batch-end times of a fit (``times[i]``: the end of step i + 1) with ``steps``-step epochs: the
    intervals after the warm-up epochs in microseconds, the step whose batch end starts each, and the median
    interval in the middle of the epochs."""
    first = WARMUP_EPOCHS * steps
    durations = [(b - a) * 1e6 for a, b in zip(times[first - 1:], times[first:])]
    numbers = range(first, first + len(durations))
    middle = statistics.median(d for d, n in zip(durations, numbers) if 100 < n % steps < steps - 20)
    return durations, numbers, middle


def run_in_turns(script: str, names: list[str], epochs: int, repeat: int) -> dict[str, list[dict[str, float]]]:
    """``script --one NAME --epochs N`` in a fresh process per name, the names in turns, ``repeat`` rounds; the
    JSON each printed last, by name."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for _ in range(repeat):
        for name in names:
            done = subprocess.run([sys.executable, script, "--one", name, "--epochs", str(epochs)],
                                  capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def print_medians(title: str, label: str, runs: dict[str, list[dict[str, float]]]) -> None:
    """A table of the median of every figure over the repeats, a row per name."""
    keys = list(next(iter(runs.values()))[0])
    width = max(len(label), *(len(name) for name in runs)) + 2
    print(title)
    print(f"{label:{width}s}" + "".join(f"{k:>13s}" for k in keys))
    for name, results in runs.items():
        print(f"{name:{width}s}" + "".join(f"{statistics.median(r[k] for r in results):13.0f}" for k in keys))


def command_line(script: str, description: str, measure: Callable[[str, int], dict[str, float]], kind: str,
                 choices: tuple[str, ...], epochs: int, title: str) -> None:
    """The command line of this script and of ``fsync_interference.py``: ``--{kind}s`` (comma-separated
    ``choices``), ``--epochs``, ``--repeat``; each name measured in its own process (``--one``), in turns."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(f"--{kind}s", default=",".join(choices))
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one name, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.epochs)))
        return
    names = getattr(args, f"{kind}s").split(",")
    unknown = sorted(set(names) - set(choices))
    if unknown:
        parser.error(f"unknown {kind}s {unknown}; choose from {', '.join(choices)}")
    runs = run_in_turns(script, names, args.epochs, args.repeat)
    print_medians(f"{title}, {args.epochs} epochs ({WARMUP_EPOCHS} dropped), median of {args.repeat} processes; "
                  "microseconds beyond the middle step", kind, runs)


def main() -> None:
    command_line(__file__, __doc__.splitlines()[0], measure, "config", CONFIGS, 14, "tiny-300")

if __name__ == "__main__":
    main()
