"""Per-step overhead: the same training loop written in raw PyTorch and with stoker, timed side by side.

Every *runner* trains its own copy of the same model on the same data, from a DataLoader whose dataset hands out a
whole batch in one indexing operation (``__getitems__``), so that loading costs little and framework overhead is not
hidden behind per-sample collation. Runners take turns, after warm-up rounds. A *round* is one epoch's worth
(``steps`` optimizer steps) of every runner, so each runner pays exactly one epoch start (and the Trainer one epoch
end) per round; within a round the runners alternate in *blocks* of ``--block`` steps (default: the whole epoch),
in a fresh random order every block (never the same runner twice in a row). Short blocks put the runners' work
close together in time, so slow drifts of the machine's speed (on a shared VM the raw step's time can move by half
within seconds) hit every runner alike; the per-round totals are what is compared. The figure is the median over
rounds of the time per step; ratios are against the ``raw`` runner, and the ``raw-again`` runner (a second raw
loop) shows how much two identical loops differ on this machine today. stoker's prepared loaders and optimizers
call torch's stock ``next``/``step``/``zero_grad`` without the profiler ranges those open on every call (see
stoker/accelerator/torch_shortcuts.py), which a hand-written loop pays; ``raw-lean`` is the raw loop taking the
same shortcuts, so a stoker row's ratio to ``raw-lean`` is the framework's own cost. Two clocks are reported: wall
time (what a user waits) and the process's CPU time (less disturbed when other programs share the machine, though
in a VM it still counts time stolen by the host).

Workloads:
    micro one 4x4 linear layer, batch 4: nearly all loop; the difference to raw is the per-step overhead in us.
    tiny  an MLP of ~6.5k parameters, batch 32: overhead-bound, a few hundred microseconds per step.
    5m    an MLP of ~5.5M parameters, batch 64: compute-bound, tens of milliseconds per step on a CPU.
    tiny-epoch  the tiny MLP in 500-step epochs: what a checkpoint per epoch costs the Trainer, amortized.
    tiny-300  the tiny MLP in 300-step epochs (issue 15's per-epoch targets for the Trainer).

Trainer runners: ``trainer-bare`` (no logger, bar or checkpoints) and ``trainer-full`` (progress bar, TensorBoard,
``self.log`` every step, a checkpoint per epoch); their rounds run from the middle of an epoch to the middle of the
next (one epoch end and one epoch start per round). They train on a helper thread; ``raw-thread`` is the raw loop
paced the same way (the control row for the thread itself). Not run by default, for taking the overhead apart:
``accelerator-thread`` (the Accelerator loop on a helper thread: compare with ``raw-thread``) and the parts of
``trainer-full`` one at a time on top of the bare Trainer: ``trainer-log`` (``self.log`` every step),
``trainer-log-bar``, ``trainer-log-tb`` (TensorBoard), ``trainer-ckpt`` (a checkpoint per epoch); and the floor
under the Trainer rows: ``raw-module`` (the raw loop written Lightning-style: the loss from ``training_step``, a
batch-end hook, on the helper thread) and ``accelerator-module`` (the same through the Accelerator: any Trainer on
the Accelerator pays this much before its own bookkeeping).

Adding a runner is one decorated function that returns a callable training the next ``n`` optimizer steps
(continuing across epochs); loops written as generators that yield after every step get that from ``stepper``::

    @runner("mine")
    def my_runner(w: Workload) -> Callable[[int], None]:
        def loop():
            while True:
                for x, y in loader:
                    ...  # one optimizer step
                    yield
        return stepper(loop())

Run:
    python benchmarks/overhead.py                          # all workloads, all runners
    python benchmarks/overhead.py --workloads tiny-300 --reps 40 --block 30 --threads 1
    python benchmarks/overhead.py --workloads tiny-300 --block 30 --threads 1 --repeat 3 \
        --runners raw,raw-thread,accelerator-thread,trainer-bare,trainer-log,trainer-log-tb,trainer-ckpt,trainer-full
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

# -- workloads ---------------------------------------------------------------------------------------------------------


class BatchIndexedDataset(Dataset):
    """Samples ``(x, y)`` whose ``__getitems__`` returns a whole batch with one indexing operation.

    The DataLoader (``batch_size=B``, a pass-through ``collate_fn``) then costs a few microseconds per batch, as
    with a tensor-backed or Hugging Face dataset, instead of B ``__getitem__`` calls and a stack that would hide
    the loop's own overhead.
    """

    def __init__(self, num_samples: int, in_features: int, out_features: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(num_samples, in_features, generator=g)
        self.y = torch.randn(num_samples, out_features, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.tensor(indices)
        return self.x[index], self.y[index]


def as_is(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The collate_fn: ``__getitems__`` already made the batch."""
    return batch


@dataclass(frozen=True)
class Workload:
    """A model size, batch size and block length; ``make_*`` build identical objects for every runner."""

    name: str
    widths: tuple[int, ...]  # in_features, hidden..., out_features
    batch_size: int
    steps: int  # optimizer steps per round (one epoch of the loader)
    reps: int  # timed rounds per runner
    warmup: int = 2

    def make_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        layers: list[torch.nn.Module] = []
        for i, (a, b) in enumerate(zip(self.widths, self.widths[1:])):
            layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(self.widths) - 2 else [])
        return torch.nn.Sequential(*layers)

    def make_optimizer(self, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + 1e-4 * s))

    def make_loader(self) -> DataLoader:
        data = BatchIndexedDataset(self.steps * self.batch_size, self.widths[0], self.widths[-1])
        return DataLoader(data, batch_size=self.batch_size, collate_fn=as_is)

    @property
    def num_parameters(self) -> int:
        return sum(a * b + b for a, b in zip(self.widths, self.widths[1:]))


WORKLOADS: dict[str, Workload] = {
    # A single 4x4 layer: almost nothing but the loop itself, so the difference to raw is the overhead in us.
    "micro": Workload("micro", (4, 4), batch_size=4, steps=20, reps=300),
    "tiny": Workload("tiny", (32, 64, 64, 1), batch_size=32, steps=10, reps=300),
    # The tiny MLP with epochs of a realistic length: a per-epoch checkpoint (trainer-full) is paid once per round.
    "tiny-epoch": Workload("tiny-epoch", (32, 64, 64, 1), batch_size=32, steps=500, reps=16),
    # Issue 15's per-epoch targets: the tiny MLP in 300-step epochs (each round pays one epoch start and end).
    "tiny-300": Workload("tiny-300", (32, 64, 64, 1), batch_size=32, steps=300, reps=20),
    "5m": Workload("5m", (1024, 1536, 1536, 1024), batch_size=64, steps=2, reps=40),
    # The compute-bound MLP with 25-step epochs: the Trainer's per-epoch work (and trainer-full's checkpoint of
    # 66 MB of weights and AdamW state) is paid once per 25 steps instead of every 2.
    "5m-epoch": Workload("5m-epoch", (1024, 1536, 1536, 1024), batch_size=64, steps=25, reps=8),
}

# -- runners -----------------------------------------------------------------------------------------------------------

Runner = Callable[[Workload], Callable[[int], None]]
RUNNERS: dict[str, Runner] = {}
# A profiler function (``sys.setprofile``) that runners training on their own thread install at the start of each
# block; None: none (step_calls.py sets it to count the calls of the Trainer's thread).
THREAD_PROFILE: list[Any] = [None]


def runner(name: str) -> Callable[[Runner], Runner]:
    """Registers a runner: given a workload, it builds its objects and returns a callable training the next ``n``
    optimizer steps."""

    def register(fn: Runner) -> Runner:
        RUNNERS[name] = fn
        return fn

    return register


def stepper(loop: Iterator[None]) -> Callable[[int], None]:
    """``run(n)`` for a training loop written as a generator that yields after every optimizer step."""

    def run(n: int) -> None:
        for _ in range(n):
            next(loop)

    return run


def _raw_objects(w: Workload) -> tuple[torch.device, torch.nn.Module, torch.optim.Optimizer, Any, DataLoader]:
    """The raw loops' device, model, optimizer, scheduler and loader."""
    device = torch.device("cpu")
    model = w.make_model().to(device)
    optimizer, scheduler = w.make_optimizer(model)
    return device, model, optimizer, scheduler, w.make_loader()


@runner("raw")
def raw_runner(w: Workload) -> Callable[[int], None]:
    """The baseline: plain PyTorch in the canonical order."""
    device, model, optimizer, scheduler, loader = _raw_objects(w)

    def loop() -> Iterator[None]:
        while True:  # one epoch per pass
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = F.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                yield

    return stepper(loop())


@runner("raw-lean")
def raw_lean_runner(w: Workload) -> Callable[[int], None]:
    """The raw loop taking the shortcuts stoker's loaders and optimizers take (stoker/accelerator/torch_shortcuts.py:
    torch's stock calls without their profiler ranges): its ratio is what those shortcuts save, and a stoker
    row's ratio *to this row* is the framework's own cost."""
    from stoker.accelerator.step.torch_shortcuts import next_batch_function, optimizer_step, zero_grad

    device, model, optimizer, scheduler, loader = _raw_objects(w)

    def loop() -> Iterator[None]:
        while True:  # one epoch per pass
            _, fetch = next_batch_function(loader)
            while True:
                try:
                    x, y = fetch()
                except StopIteration:
                    break
                x, y = x.to(device), y.to(device)
                loss = F.mse_loss(model(x), y)
                loss.backward()
                optimizer_step(optimizer)
                scheduler.step()
                zero_grad(optimizer)
                yield

    return stepper(loop())


@runner("raw-again")
def raw_again_runner(w: Workload) -> Callable[[int], None]:
    """A second, identical raw loop: its ratio to ``raw`` shows the noise floor of the measurement."""
    return raw_runner(w)


class Pacing:
    """The hand-over to a runner that trains on its own thread: the caller's ``run(n)`` asks for ``n`` steps and
    waits; the training thread takes each request with :meth:`next_request` and reports with :meth:`finished`."""

    def __init__(self) -> None:
        import threading

        self._go, self._done = threading.Semaphore(0), threading.Semaphore(0)
        self._steps = 0

    def run(self, n: int) -> None:
        self._steps = n
        self._go.release()
        self._done.acquire()

    def next_request(self) -> int:
        """Waits for the next ``run(n)`` and returns ``n`` (on the training thread; installs THREAD_PROFILE)."""
        self._go.acquire()
        sys.setprofile(THREAD_PROFILE[0])
        return self._steps

    def finished(self) -> None:
        self._done.release()


def on_thread(steps: Callable[[int], None]) -> Callable[[int], None]:
    """``steps`` (a runner's ``run``) served on a helper thread, handed each block as the Trainer runners are."""
    import threading

    pacing = Pacing()
    threads = torch.get_num_threads()

    def serve() -> None:
        torch.set_num_threads(threads)  # per thread, as for the Trainer runners
        while True:
            steps(pacing.next_request())
            pacing.finished()

    threading.Thread(target=serve, daemon=True).start()
    return pacing.run


@runner("raw-thread")
def raw_thread_runner(w: Workload) -> Callable[[int], None]:
    """The raw loop on a helper thread, handed each block as the Trainer runners are: the control row for what
    running on another thread (and the hand-over per block) costs by itself."""
    return on_thread(raw_runner(w))


@runner("accelerator")
def accelerator_runner(w: Workload) -> Callable[[int], None]:
    """The Accelerate quick-tour loop with ``accumulate`` (here one micro-batch per step)."""
    from stoker import Accelerator

    accelerator = Accelerator(cpu=True)
    model = w.make_model()
    optimizer, scheduler = w.make_optimizer(model)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, w.make_loader(), scheduler)

    def loop() -> Iterator[None]:
        while True:
            for x, y in loader:
                with accelerator.accumulate(model):
                    loss = F.mse_loss(model(x), y)
                    accelerator.backward(loss)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                yield

    return stepper(loop())


def trainer_module(w: Workload, log: bool) -> Any:
    """The Trainer runners' module: ``w``'s model and MSE loss (with ``log``, logged to the bar every step), and
    ``w``'s optimizer with its scheduler stepping every optimizer step."""
    from stoker import TrainingModule

    class Module(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = w.make_model()

        def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self.model(x), y)
            if log:
                self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> dict:
            optimizer, scheduler = w.make_optimizer(self.model)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    return Module()


def full_callbacks(sync_checkpoints: bool = False, bar: bool = True, checkpoint: bool = True) -> list[Any]:
    """The full configuration's callbacks: a progress bar (to /dev/null, so the table stays readable) and
    ModelCheckpoint's default checkpoint per epoch (and ``last``); ``sync_checkpoints``: every save committed on the
    training thread (the default until 3 December 2026). ``bar`` / ``checkpoint``: leave one of them out."""
    import os

    from stoker import ModelCheckpoint, ProgressBar

    class SyncCheckpoint(ModelCheckpoint):
        def _write(self, trainer: Any, topk_path: str | None, evicted: list[str], wait: bool = False) -> None:
            super()._write(trainer, topk_path, evicted, wait=True)

    callbacks: list[Any] = [ProgressBar(file=open(os.devnull, "w"))] if bar else []
    if checkpoint:
        callbacks.append(SyncCheckpoint() if sync_checkpoints else ModelCheckpoint())
    return callbacks


@dataclass(frozen=True)
class Parts:
    """What a Trainer runner turns on: ``self.log`` of the loss every step (to the bar), a progress bar, a
    TensorBoard logger, a checkpoint per epoch (committed on the training thread with ``sync_checkpoints``)."""

    log: bool = False
    bar: bool = False
    tensorboard: bool = False
    checkpoint: bool = False
    sync_checkpoints: bool = False


FULL = Parts(log=True, bar=True, tensorboard=True, checkpoint=True)


def _trainer_runner(w: Workload, parts: Parts) -> Callable[[int], None]:
    """``Trainer.fit`` on a background thread, paced ``n`` optimizer steps per call; its setup is not timed.

    The first pause is in the middle of the first epoch, so a round (``w.steps`` steps) runs from the middle of one
    epoch to the middle of the next and holds exactly one epoch end (epoch metrics, the per-epoch checkpoint) and
    one epoch start (iterator set-up). Work that the checkpoint leaves to background threads (its commit: fsyncs and
    rename; deleting replaced folders) overlaps with the rest of the block, as in a real run, and every block waits
    for whatever is still pending before it ends: all of it is charged to this runner, none to the next runner's
    block. The main thread only waits meanwhile; CPU time counts every thread.
    """
    import atexit
    import shutil
    import tempfile
    import threading

    from stoker import Callback, Trainer, TrainingModule
    from stoker.accelerator import wait_for_checkpoints

    pacing = Pacing()

    class Pacer(Callback):  # the last callback
        started = False
        left = 0  # steps still to run in the current block
        since_start = 0  # steps run since the first pause

        def on_train_batch_end(self, trainer: Trainer, module: TrainingModule, outputs: object, batch: object,
                               batch_idx: int) -> None:
            if self.started:
                self.left -= 1
                self.since_start += 1
                if self.left:
                    return
                # The end of a block: checkpoint work still running in the background (commit, fsyncs, deletions)
                # is finished inside this runner's block, which it overlapped, not during another runner's block
                # (its fsyncs slow whatever runs meanwhile, even in another process: benchmarks/README.md, 5 December
                # 2026). Until then only the round's end waited, and the rest of the work spilled into the next
                # runner's block, charged to that runner.
                wait_for_checkpoints(trainer.accelerator)
                pacing.finished()
            elif batch_idx != w.steps // 2:
                return
            self.started = True
            self.left = pacing.next_request()

        def on_train_end(self, trainer: Trainer, module: TrainingModule) -> None:
            pacing.finished()

    root = tempfile.mkdtemp(prefix="stoker-overhead-")
    atexit.register(shutil.rmtree, root, True)
    callbacks = full_callbacks(parts.sync_checkpoints, parts.bar, parts.checkpoint)
    trainer = Trainer(max_epochs=w.warmup + w.reps + 1, accelerator="cpu", default_root_dir=root,
                      logger=parts.tensorboard, enable_checkpointing=parts.checkpoint, enable_progress_bar=parts.bar,
                      callbacks=[*callbacks, Pacer()])
    threads = torch.get_num_threads()

    def fit() -> None:
        # OpenMP's thread count is per thread: without this the Trainer's thread would compute with torch's
        # default count while the raw loop uses --threads, and compute-bound rows would compare different things.
        torch.set_num_threads(threads)
        trainer.fit(trainer_module(w, log=parts.log), w.make_loader())

    threading.Thread(target=fit, daemon=True).start()
    return pacing.run


@runner("trainer-bare")
def trainer_bare_runner(w: Workload) -> Callable[[], None]:
    """The Trainer with no logger, no progress bar and no checkpoints."""
    return _trainer_runner(w, Parts())


@runner("trainer-full")
def trainer_full_runner(w: Workload) -> Callable[[], None]:
    """The Trainer with a progress bar, a TensorBoard logger, ``self.log`` of the loss every step and a checkpoint
    per epoch. An epoch is one block: on the short-block workloads that is a checkpoint every few steps (a stress
    test of checkpoint writing); ``tiny-epoch`` gives the tiny MLP realistic epochs."""
    return _trainer_runner(w, FULL)


@runner("trainer-full-sync")
def trainer_full_sync_runner(w: Workload) -> Callable[[], None]:
    """``trainer-full`` with each checkpoint committed on the training thread (fsyncs, rename, ``last``): what the
    background commit saves, measured in the same run."""
    return _trainer_runner(w, dataclasses.replace(FULL, sync_checkpoints=True))


# Components of trainer-full, each added to the bare Trainer alone: what each part of the full configuration costs,
# and the Accelerator loop on a helper thread (against raw-thread: the Accelerator's own share of the Trainer rows).
@runner("trainer-log")
def trainer_log_runner(w: Workload) -> Callable[[int], None]:
    """The bare Trainer plus ``self.log("loss", loss, prog_bar=True)`` every step (no bar, logger or checkpoints)."""
    return _trainer_runner(w, Parts(log=True))


@runner("trainer-log-bar")
def trainer_log_bar_runner(w: Workload) -> Callable[[int], None]:
    """``trainer-log`` plus the progress bar."""
    return _trainer_runner(w, Parts(log=True, bar=True))


@runner("trainer-log-tb")
def trainer_log_tb_runner(w: Workload) -> Callable[[int], None]:
    """``trainer-log`` plus a TensorBoard logger (values sent every ``log_every_n_steps``)."""
    return _trainer_runner(w, Parts(log=True, tensorboard=True))


@runner("trainer-ckpt")
def trainer_ckpt_runner(w: Workload) -> Callable[[int], None]:
    """The bare Trainer plus ``ModelCheckpoint``'s default checkpoint per epoch."""
    return _trainer_runner(w, Parts(checkpoint=True))


@runner("accelerator-thread")
def accelerator_thread_runner(w: Workload) -> Callable[[int], None]:
    """The ``accelerator`` loop on a helper thread, paced as the Trainer runners are (compare with raw-thread)."""
    return on_thread(accelerator_runner(w))


# The floor of the Trainer rows: the work any Lightning-style trainer does in its step whatever its bookkeeping (the
# step inside ``module.training_step``, whose ``self.model`` goes through ``nn.Module.__getattr__``, and one callback
# hook per batch), on the helper thread the Trainer rows train on; without and with the Accelerator.
class _BatchEndHook:
    """A callback with an empty ``on_train_batch_end``: the floor runners call it once per batch, as the Trainer
    calls the harness's Pacer."""

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        pass


@runner("raw-module")
def raw_module_runner(w: Workload) -> Callable[[int], None]:
    """The raw loop written Lightning-style: the loss from the Trainer runners' ``training_step``, a batch-end
    hook, on a helper thread (compare with ``raw-thread``)."""
    device = torch.device("cpu")
    module = trainer_module(w, log=False)
    optimizer, scheduler = w.make_optimizer(module.model)
    loader, hooks = w.make_loader(), [_BatchEndHook().on_train_batch_end]

    def loop() -> Iterator[None]:
        while True:
            for batch_idx, (x, y) in enumerate(loader):
                batch = (x.to(device), y.to(device))
                loss = module.training_step(batch, batch_idx)
                loss.backward()
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                for hook in hooks:
                    hook(loss, batch, batch_idx)
                yield

    return on_thread(stepper(loop()))


@runner("accelerator-module")
def accelerator_module_runner(w: Workload) -> Callable[[int], None]:
    """``raw-module`` through the Accelerator (the ``accelerator`` loop's calls): what a Trainer built on the
    Accelerator costs before any bookkeeping of its own. ``trainer-bare`` minus this row is the Trainer's layer."""
    from stoker import Accelerator

    accelerator = Accelerator(cpu=True)
    module = trainer_module(w, log=False)
    optimizer, scheduler = w.make_optimizer(module.model)
    model, optimizer, loader, scheduler = accelerator.prepare(module.model, optimizer, w.make_loader(), scheduler)
    hooks = [_BatchEndHook().on_train_batch_end]

    def loop() -> Iterator[None]:
        while True:
            for batch_idx, batch in enumerate(loader):
                with accelerator.accumulate(model):
                    loss = module.training_step(batch, batch_idx)
                    accelerator.backward(loss)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                for hook in hooks:
                    hook(loss, batch, batch_idx)
                yield

    return on_thread(stepper(loop()))


# Run when --runners is not given (the component runners above are asked for by name).
DEFAULT_RUNNERS = ["raw", "raw-again", "raw-thread", "accelerator", "trainer-bare", "trainer-full", "trainer-full-sync"]

# -- measurement -------------------------------------------------------------------------------------------------------


@dataclass
class Result:
    wall: list[float]  # seconds per step, one entry per timed round
    cpu: list[float]


def measure(w: Workload, names: list[str], block: int | None = None, build_seed: int | None = None
            ) -> dict[str, Result]:
    """Times ``names`` on ``w``: rounds of ``w.steps`` steps per runner, alternating in blocks of ``block`` steps
    (see the module docstring). ``build_seed``: build the runners in an order shuffled with it (where in memory
    each runner's objects land depends on that order; see ``--repeat``)."""
    block = block or w.steps
    if w.steps % block:
        raise ValueError(f"--block {block} must divide the workload's {w.steps} steps per epoch")
    build_order = list(names)
    if build_seed is not None:
        random.Random(build_seed).shuffle(build_order)
    built = {name: RUNNERS[name](w) for name in build_order}
    runs = {name: built[name] for name in names}
    for _ in range(w.warmup):
        for run in runs.values():
            run(w.steps)
    results = {name: Result([], []) for name in names}
    blocks = w.steps // block
    shuffle = random.Random(0 if build_seed is None else build_seed).shuffle
    order = list(names)
    for _ in range(w.reps):
        wall, cpu = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        for _ in range(blocks):
            # A fresh random order per block, never starting with the runner that just ran: a runner that ran
            # twice in a row would find its code and data still in the caches (reversing the order every block,
            # as before, gave that advantage to the first and last runners, raw among them).
            previous = order[-1]
            shuffle(order)
            if len(order) > 1 and order[0] == previous:
                order.append(order.pop(0))
            for name in order:
                c0, t0 = time.process_time(), time.perf_counter()
                runs[name](block)
                t1, c1 = time.perf_counter(), time.process_time()
                wall[name] += t1 - t0
                cpu[name] += c1 - c0
        for name in names:
            results[name].wall.append(wall[name] / w.steps)
            results[name].cpu.append(cpu[name] / w.steps)
    return results


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _paired(mine: list[float], ref: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of round-by-round ratios against the baseline's same round."""
    ratios = [a / b for a, b in zip(mine, ref)]
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return q2, q1, q3


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def report(w: Workload, results: dict[str, Result], baseline: str = "raw", block: int | None = None) -> list[str]:
    """Table rows, one per runner and clock, comparing with ``baseline``.

    ``median`` is the median time per step; ``ratio`` divides it by the baseline's. ``paired`` is the median of
    round-by-round ratios against the baseline's same round (which cancels drifts in the machine's load), with
    their quartiles in brackets: how noisy the run was. ``p10`` divides the 10th percentiles, the rounds least
    disturbed by other programs. ``extra`` is the difference of the medians: time added per step.
    """
    base = results[baseline]
    width = max(14, max(len(name) for name in results) + 2)
    lines = [f"{w.name}: {w.num_parameters:,} parameters, batch {w.batch_size}, {w.steps} steps/round (one epoch) "
             f"in blocks of {block or w.steps}, {w.reps} rounds/runner",
             f"  {'runner':<{width}}{'clock':<6}{'median':>11}{'ratio':>8}{'paired [quartiles]':>24}{'p10':>8}{'extra':>11}"]
    for name, r in results.items():
        for clock in ("wall", "cpu"):
            mine, ref = getattr(r, clock), getattr(base, clock)
            med, q1, q3 = _paired(mine, ref)
            median = statistics.median(mine)
            lines.append(f"  {name:<{width}}{clock:<6}{_fmt(median):>11}{median / statistics.median(ref):>8.3f}"
                         f"{med:>8.3f} [{q1:.3f}, {q3:.3f}]{_quantile(mine, 0.1) / _quantile(ref, 0.1):>8.3f}"
                         f"{(median - statistics.median(ref)) * 1e6:>+9.1f}us")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Per-step overhead of stoker against a raw PyTorch loop.")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}")
    parser.add_argument("--runners", default=",".join(DEFAULT_RUNNERS),
                        help=f"comma-separated (default: {', '.join(DEFAULT_RUNNERS)}); all: {', '.join(RUNNERS)}")
    parser.add_argument("--reps", type=int, default=None, help="timed rounds per runner (default: per workload)")
    parser.add_argument("--block", type=int, default=None,
                        help="steps per block: runners alternate every BLOCK steps within a round (must divide the "
                             "workload's steps; default: the whole round)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the whole measurement in this many fresh processes, each building the runners in a "
                             "different order, and summarize the paired medians across them (a process's memory "
                             "layout can favour one runner by a few percent for its whole life)")
    parser.add_argument("--build-seed", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help=argparse.SUPPRESS)  # where a --repeat child writes its medians
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.runners.split(",") if n.strip()]
    unknown = [n for n in names if n not in RUNNERS] + [
        n for n in args.workloads.split(",") if n.strip() and n.strip() not in WORKLOADS]
    if unknown:
        parser.error(f"unknown runner/workload {unknown}; runners: {sorted(RUNNERS)}, workloads: {sorted(WORKLOADS)}")
    if "raw" not in names:
        names.insert(0, "raw")  # the baseline of every ratio
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, python {sys.version.split()[0]}")
    if args.repeat > 1:
        repeat(argv if argv is not None else sys.argv[1:], args.repeat, names)
        return
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for key in args.workloads.split(","):
        w = WORKLOADS[key.strip()]
        if args.reps is not None:
            w = Workload(w.name, w.widths, w.batch_size, w.steps, args.reps, w.warmup)
        results = measure(w, names, args.block, args.build_seed)
        print("\n".join(report(w, results, block=args.block)), flush=True)
        medians[w.name] = {name: {clock: _paired(getattr(r, clock), getattr(results["raw"], clock))[0]
                                  for clock in ("wall", "cpu")} for name, r in results.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(medians, f)


def repeat(argv: list[str], times: int, names: list[str]) -> None:
    """``--repeat``: the same measurement in ``times`` fresh processes; prints each one's paired medians and their
    median and range per workload, runner and clock."""
    import tempfile

    args: list[str] = []
    skip = False
    for a in argv:  # the same arguments without --repeat (given as "--repeat N" or "--repeat=N")
        if skip or a.startswith("--repeat="):
            skip = False
            continue
        skip = a == "--repeat"
        if not skip:
            args.append(a)
    runs: list[dict] = []
    for k in range(times):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([sys.executable, __file__, *args, "--build-seed", str(k), "--json", out.name], check=True,
                           stdout=subprocess.DEVNULL)
            runs.append(json.load(open(out.name)))
        print(f"process {k + 1}/{times} done", flush=True)
    for workload in runs[0]:
        print(f"\n{workload}: paired median per process (ratio to raw), {times} processes")
        print(f"  {'runner':<20}{'clock':<6}{'median':>8}{'min':>8}{'max':>8}   per process")
        for name in names:
            for clock in ("wall", "cpu"):
                values = [run[workload][name][clock] for run in runs]
                print(f"  {name:<20}{clock:<6}{statistics.median(values):>8.3f}{min(values):>8.3f}{max(values):>8.3f}"
                      f"   {' '.join(f'{v:.3f}' for v in values)}")


if __name__ == "__main__":
    main()
