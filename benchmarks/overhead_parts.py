"""The floor rows of ``overhead.py`` taken apart: the Accelerator's layer and the Trainer's step, one piece at a time.

``accelerator-module`` (the Lightning-style raw loop through the Accelerator) and ``trainer-bare`` are each a sum of
parts. The runners here add those parts one at a time, so that a row's distance from the one before it is what
that part costs (measured the way ``overhead.py`` measures, in the same processes; this script registers its
runners in that registry and runs its command line):

Accelerator parts, each the ``raw-module`` loop with more of it going through the Accelerator:
    part-loader        only the loader is prepared (its batches come through stoker's DataLoader).
    part-accumulate    the raw loop inside ``with accelerator.accumulate(model)`` (raw optimizer and scheduler).
    part-optimizer     + the prepared optimizer and ``accelerator.backward`` (raw loader and scheduler).
    part-scheduler     + the prepared scheduler: everything but the loader (``accelerator-module`` adds it).

Calibration, each the ``raw`` loop plus a known amount of work per step, between the forward and the backward:
    raw-detach             one ``loss.detach()`` (about 1 us when timed alone inside the loop).
    raw-calls-50           50 calls of one trivial Python function (about 1.4 us when timed alone).
    raw-calls-50-distinct  50 calls of 50 distinct trivial functions (the same work, spread over 50 code objects,
                           as a framework's Python is).

Trainer parts, each the bare Trainer (``trainer-bare``'s Trainer, callbacks and pacing) with its batch loop
(``FitLoop._run_batches``) replaced on that runner's own training thread only; other Trainer rows in the same
process run the real loop:
    trainer-stripped   a minimal batch loop: ``accumulate``, ``training_step``, ``backward``, the optimizer and
                       scheduler steps, the batch-end hooks: ``accelerator-module``'s loop, run by the Trainer.
    trainer-step-fn    the stripped loop with the loss from the Trainer's own step (``AutomaticStep.step``:
                       the checks on what ``training_step`` returned, the non-finite-loss watch, the hooks).
    trainer-opt-fn     + the Trainer's optimizer step (``AutomaticStep.optimizer_step``: clipping, hooks and scheduler
                       configurations looked at); ``trainer-bare`` adds the rest of the real loop (the position
                       kept for resuming, the logging cadence, validation and stop rules).
    trainer-no-watch   the real bare Trainer without the non-finite-loss watch (``NonFiniteLoss.watch`` returns at
                       once, holding no loss): what keeping each loss for the deferred check costs.

The replaced loops reach into private methods: they are measurement tools for this code base, not an API.

Run (``micro-300``: the 4x4 layer in 300-step epochs, where the step is nearly all loop):
    python benchmarks/overhead_parts.py --threads 1 --workloads micro-300 --block 30 --reps 20 --repeat 4 --runners \
raw,raw-again,raw-detach,raw-module,part-loader,part-accumulate,part-optimizer,part-scheduler,accelerator-module,\
trainer-stripped,trainer-step-fn,trainer-opt-fn,trainer-no-watch,trainer-bare
    python benchmarks/overhead_parts.py --threads 1 --workloads micro-300,tiny-300 --block 30 --reps 20 --repeat 3 \
        --runners raw,raw-again,raw-detach,raw-calls-50,raw-calls-50-distinct
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402  (the registry and the measurement)

overhead.WORKLOADS.setdefault("micro-300", overhead.Workload("micro-300", (4, 4), batch_size=4, steps=300, reps=20))

# -- Accelerator parts -------------------------------------------------------------------------------------------------


def _accelerator_part(name: str, loader: bool = False, accumulate: bool = False, optimizer: bool = False,
                      scheduler: bool = False) -> None:
    def build(w: overhead.Workload) -> Callable[[int], None]:
        from stoker import Accelerator

        acc = Accelerator(cpu=True)
        module = overhead.trainer_module(w, log=False)
        opt, sched = w.make_optimizer(module.model)
        data = w.make_loader()
        model = acc.prepare(module.model)  # the same module back on one CPU process in full precision
        if optimizer:
            opt = acc.prepare(opt)
        if scheduler:
            sched = acc.prepare(sched)
        if loader:
            data = acc.prepare(data)
        hooks = [overhead._BatchEndHook().on_train_batch_end]
        device = torch.device("cpu")
        through_window = accumulate or optimizer

        def loop() -> Iterator[None]:
            while True:
                for batch_idx, batch in enumerate(data):
                    if not loader:
                        batch = (batch[0].to(device), batch[1].to(device))
                    if through_window:
                        with acc.accumulate(model):
                            loss = module.training_step(batch, batch_idx)
                            acc.backward(loss) if optimizer else loss.backward()
                            opt.step()
                            sched.step()
                            opt.zero_grad(set_to_none=True)
                    else:
                        loss = module.training_step(batch, batch_idx)
                        loss.backward()
                        opt.step()
                        sched.step()
                        opt.zero_grad(set_to_none=True)
                    for hook in hooks:
                        hook(loss, batch, batch_idx)
                    yield

        return overhead.on_thread(overhead.stepper(loop()))

    overhead.runner(name)(build)


@overhead.runner("raw-detach")
def raw_detach_runner(w: overhead.Workload) -> Callable[[int], None]:
    """The ``raw`` loop plus one ``loss.detach()`` per step, dropped at once: what one more small tensor operation
    per step costs in this harness (a calibration row for the parts above; the non-finite watch does one)."""
    import torch.nn.functional as F

    device = torch.device("cpu")
    model = w.make_model().to(device)
    optimizer, scheduler = w.make_optimizer(model)
    loader = w.make_loader()

    def loop() -> Iterator[None]:
        while True:
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = F.mse_loss(model(x), y)
                loss.detach()
                loss.backward()
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                yield

    return overhead.stepper(loop())


def _noop(a: object, b: object) -> object:
    return a


# Fifty functions with the same body and distinct code objects: Python work spread over as many places as a
# framework's is, instead of one function called again and again.
_DISTINCT: list[Callable[[object, object], object]] = []
for _i in range(50):
    _namespace: dict[str, Any] = {}
    exec(f"def f{_i}(a, b):\n    c = a\n    return c\n", _namespace)
    _DISTINCT.append(_namespace[f"f{_i}"])


def _raw_calls(name: str, functions: list[Callable[[object, object], object]]) -> None:
    def build(w: overhead.Workload) -> Callable[[int], None]:
        import torch.nn.functional as F

        device = torch.device("cpu")
        model = w.make_model().to(device)
        optimizer, scheduler = w.make_optimizer(model)
        loader = w.make_loader()

        def loop() -> Iterator[None]:
            while True:
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    loss = F.mse_loss(model(x), y)
                    for function in functions:
                        function(x, y)
                    loss.backward()
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                    yield

        return overhead.stepper(loop())

    overhead.runner(name)(build)


_raw_calls("raw-calls-50", [_noop] * 50)
_raw_calls("raw-calls-50-distinct", _DISTINCT)

_accelerator_part("part-loader", loader=True)
_accelerator_part("part-accumulate", accumulate=True)
_accelerator_part("part-optimizer", optimizer=True)
_accelerator_part("part-scheduler", optimizer=True, scheduler=True)

# -- Trainer parts -----------------------------------------------------------------------------------------------------

_VARIANT = "_overhead_parts_variant"  # the attribute naming a training thread's variant
EPOCHS_RUN: collections.Counter[str] = collections.Counter()  # epochs run per variant ("real": the unchanged loop)


def _stripped_batches(self: Any, run: Any, variant: str) -> bool:
    """A minimal ``FitLoop._run_batches`` (automatic optimization, one optimizer and one step-interval scheduler)."""
    t = self.trainer
    acc, loader, model = t.accelerator, run.train_loader, run.model
    end_hooks = t.hooks.get("on_train_batch_end")
    optimizer, scheduler = t.optimizers[0], run.step_schedulers[0].scheduler
    training_step = run.training_step
    from stoker.trainer.auto_step import AutomaticStep

    auto = AutomaticStep(t, run, self.epoch)  # the Trainer's own step (its hooks looked up once, as per epoch)
    if self.batches_done == 0:
        loader.set_epoch(self.epoch)
    batch_idx = self.batches_done
    for batch in loader:
        self.batches_done = batch_idx + 1
        with acc.accumulate(model):
            if variant == "trainer-stripped":
                loss = training_step(batch, batch_idx)
                acc.backward(loss)
            else:
                loss = auto.step(batch, batch_idx)
            if variant == "trainer-opt-fn":
                auto.optimizer_step(batch_idx)
            else:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        for hook in end_hooks:
            hook(loss, batch, batch_idx)
        batch_idx += 1
    self.epoch_batches_finished = True
    return False


def _patch() -> None:
    """Routes each epoch's batch loop through the training thread's variant, if it has one (once per process; a
    per-epoch lookup, nothing added to the steps of the rows that keep the real loop)."""
    from stoker.trainer.loops import FitLoop

    real = FitLoop._run_batches
    if getattr(real, "_overhead_parts", None) is not None:
        return

    def run_batches(self: Any, run: Any) -> bool:
        variant = getattr(threading.current_thread(), _VARIANT, None)
        EPOCHS_RUN[variant or "real"] += 1
        if variant == "trainer-no-watch":  # the real loop; the watch keeps nothing (an attribute of this instance)
            self.trainer.nonfinite.watch = lambda loss, step, epoch, batch_idx: False
        if variant is None or variant == "trainer-no-watch":
            return real(self, run)
        return _stripped_batches(self, run, variant)

    run_batches._overhead_parts = real  # type: ignore[attr-defined]
    FitLoop._run_batches = run_batches


def unpatch() -> None:
    """Puts the real batch loop back (for a process that goes on after measuring, e.g. a test run). The training
    threads of trainer-part runners built before must be finished or abandoned: they would run the real loop."""
    from stoker.trainer.loops import FitLoop

    real = getattr(FitLoop._run_batches, "_overhead_parts", None)
    if real is not None:
        FitLoop._run_batches = real


def _trainer_part(name: str) -> None:
    def build(w: overhead.Workload) -> Callable[[int], None]:
        _patch()
        # The bare Trainer runner starts its fit thread before it returns: name that thread's variant before it runs.
        original_start = threading.Thread.start
        started: list[threading.Thread] = []

        def start(thread: threading.Thread) -> None:
            setattr(thread, _VARIANT, name)
            started.append(thread)
            original_start(thread)

        threading.Thread.start = start  # type: ignore[method-assign]
        try:
            run = overhead.RUNNERS["trainer-bare"](w)
        finally:
            threading.Thread.start = original_start  # type: ignore[method-assign]
        assert len(started) == 1, f"the bare Trainer runner started {len(started)} threads, expected its fit thread"
        return run

    overhead.runner(name)(build)


for _name in ("trainer-stripped", "trainer-step-fn", "trainer-opt-fn", "trainer-no-watch"):
    _trainer_part(_name)

if __name__ == "__main__":
    overhead.__file__ = __file__  # --repeat starts fresh processes of this script, so that they know these runners
    overhead.main()
