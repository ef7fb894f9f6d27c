"""One short 2-process run that must exit with status 0, for ``tests/distributed/test_clean_exit.py``.

Usage: ``exit_worker.py OUT CASE ENDING``.

CASE: ``ddp`` (an Accelerator DDP loop with gradient-sync checks inside and at the window boundary, as users
write them), ``stateful`` (the same loop with a stateful loader, ``save_state`` every 3 steps, and one
asynchronous-style background deletion from rotation), ``trainer`` (``Trainer(devices=2)``, started as a plain
``python`` process: it launches its two workers itself).
``example-metrics`` and ``example-checkpointing``: Accelerate's ``multi_process_metrics.py`` and the checkpointing
example (``complete_nlp_example.py --checkpointing_steps 3 --use_stateful_dataloader``, tests/compat's copies, which
end with ``end_training()``), run as scripts.
``kept`` (the ``ddp`` loop keeping ``dist.group.WORLD`` in a module global: the control that shows the
thread count can see a group left to finalization).
``fsdp`` (the ``ddp`` loop with ``strategy="fsdp"``, FSDP2 on gloo).
``inflight`` (the ``ddp`` loop, then a collective still in flight at exit: rank 1 joins it 1.5 s late, as a slow
peer would; deterministic proof that the group is not left to the interpreter's finalization).
ENDING: how the script ends: ``destroy`` (``torch.distributed.destroy_process_group()``), ``end``
(``accelerator.end_training()``), ``both`` (``end_training()`` then ``destroy_process_group()``) or ``neither``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import atexit
import os
import threading

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch


SETTLE_S = 5.0  # a joined thread may linger in /proc for a moment under load; gloo's live threads never leave
_PY_THREADS: dict[int, str] = {}  # native id -> name of every Python thread started here


def _tasks() -> dict[int, str]:
    """This process's OS threads now: id -> ``name:state`` (state R/S/D/Z from /proc; Python threads by name)."""
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                comm, rest = f.read().split(" (", 1)[1].rsplit(") ", 1)
        except (OSError, ValueError, IndexError):
            continue  # gone while listing
        out[tid] = f"{_PY_THREADS.get(tid, comm)}:{rest.split()[0]}"
    return out


_record_native_id = threading.Thread._set_native_id


def _recording(self: threading.Thread) -> None:
    _record_native_id(self)
    _PY_THREADS[self.native_id] = self.name


threading.Thread._set_native_id = _recording  # names the Python threads among what is left at exit
_BEFORE = _tasks()


def _report_threads() -> None:
    """Registered before anything of stoker or torch.distributed, so it runs after their exit handlers: what is
    still alive now is left to the interpreter's finalization. Waits up to ``SETTLE_S`` for threads already ending
    (joined Python threads whose OS thread is still exiting: their count under load is a matter of timing)."""
    at_handler = {t: v for t, v in _tasks().items() if t not in _BEFORE}
    started = time.monotonic()
    while any(t not in _BEFORE for t in _tasks()) and time.monotonic() - started < SETTLE_S:
        time.sleep(0.002)
    left = {t: v for t, v in _tasks().items() if t not in _BEFORE}
    alive = {t.native_id for t in threading.enumerate()}
    new = sorted(v + ("" if t in alive or t not in _PY_THREADS else " (joined)") for t, v in at_handler.items())
    line = (f"exit-worker threads: {len(_BEFORE)} before the group, {len(_BEFORE) + len(at_handler)} at the last "
            f"exit handler, {len(_BEFORE) + len(left)} after waiting {time.monotonic() - started:.3f} s; new at the "
            f"handler: {new}, left: {sorted(left.values())}\n")
    # One write of the whole line (under the pipe's atomic size): the Trainer's two workers share the launcher's
    # stdout and exit together, and print() writes the text and its newline separately when stdout is unbuffered,
    # which once ran two workers' lines into one.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())


atexit.register(_report_threads)
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, ProjectConfiguration
from stoker.accelerator import DataLoaderConfiguration

OUT, CASE, ENDING = Path(sys.argv[1]), sys.argv[2], sys.argv[3]


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


def grads_equal(acc: Accelerator, model: torch.nn.Module) -> bool:
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    gathered = acc.gather(grad).reshape(acc.num_processes, -1)
    return bool(torch.equal(gathered[0], gathered[-1]))


def loop() -> tuple:
    stateful = CASE == "stateful"
    acc = Accelerator(
        gradient_accumulation_steps=2, cpu=True, strategy="fsdp" if CASE == "fsdp" else "auto",
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful),
        project_config=ProjectConfiguration(project_dir=str(OUT), automatic_checkpoint_naming=True, total_limit=2),
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(data(), batch_size=4, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    for epoch in range(2):
        for x, y in loader:
            with acc.accumulate(model):
                loss = F.mse_loss(model(x), y)
                acc.backward(loss)
                if acc.sync_gradients and CASE != "fsdp" and not grads_equal(acc, model):  # the window boundary: synced
                    raise SystemExit("gradients differ after the window's sync")
                opt.step()
                opt.zero_grad()
            if stateful and acc.step % 3 == 0 and acc.sync_gradients:
                acc.save_state()
    print(f"exit-worker {CASE} done at step {acc.step} on rank {acc.process_index}", flush=True)
    if CASE == "inflight":
        if acc.process_index == 1:
            time.sleep(1.5)
            dist.all_reduce(torch.ones(1))
        else:
            dist.all_reduce(torch.ones(1), async_op=True)  # work and tensor dropped: only gloo's thread holds them
    return acc, model, opt, loader


def second_accelerator() -> None:
    """``second``: another Accelerator joins the existing group (as Accelerate's test scripts make several) and
    trains a DDP model that ends as garbage in a reference cycle, not collected before exit: neither its strategy
    nor the wrapper's reducer may keep the group to the interpreter's finalization."""
    other = Accelerator(cpu=True)
    model = torch.nn.Linear(8, 1)
    model.__dict__["_cycle"] = [model]  # freed only by the collector
    prepared = other.prepare(model)
    x, y = data().tensors
    other.backward(F.mse_loss(prepared(x[:4]), y[:4]))
    if not grads_equal(other, prepared):
        raise SystemExit("the second Accelerator's gradients differ after backward")


def trainer() -> None:
    from stoker import Trainer, TrainingModule

    class Regressor(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            self.log("loss", loss, sync_dist=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    t = Trainer(devices=2, accelerator="cpu", max_epochs=2, default_root_dir=str(OUT), enable_progress_bar=False,
                logger=False)
    t.fit(Regressor(), DataLoader(data(), batch_size=4))
    if ENDING in ("end", "both"):
        t.accelerator.end_training()
    if ENDING in ("destroy", "both") and dist.is_initialized():
        dist.destroy_process_group()


def example() -> None:
    """One of Accelerate's example scripts (tests/compat's adapted copies) run unchanged, as ``__main__`` would."""
    import importlib

    flags = {"example-metrics": ("multi_process_metrics", []),
             "example-checkpointing": ("complete_nlp_example", ["--checkpointing_steps", "3",
                                                                 "--use_stateful_dataloader",
                                                                 "--output_dir", str(OUT / "checkpoints")])}
    name, extra = flags[CASE]
    sys.argv = [f"{name}.py", "--cpu", *extra]
    importlib.import_module(f"tests.compat.examples.{name}").main()  # each ends with end_training()
    print(f"exit-worker {CASE} done", flush=True)


if CASE == "trainer":
    trainer()
elif CASE.startswith("example-"):
    example()
    if ENDING in ("destroy", "both") and dist.is_initialized():
        dist.destroy_process_group()
else:
    if CASE == "own-group":  # the script creates the group (torch._dynamo first, as the README asks): no strategy
        import torch._dynamo  # noqa: F401  owns it, and the DDP wrapper, a global below, still holds it at exit

        dist.init_process_group("gloo")
    # Module globals, as in a training script: they live until the interpreter's finalization clears them.
    accelerator, model, optimizer, loader = loop()
    if CASE == "second":
        second_accelerator()
    if CASE == "kept":  # the negative control: a reference the script keeps holds the group to finalization
        KEPT_GROUP = dist.group.WORLD
    if ENDING in ("end", "both"):
        accelerator.end_training()
    if ENDING in ("destroy", "both") and dist.is_initialized():
        dist.destroy_process_group()
