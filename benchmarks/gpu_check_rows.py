"""The measurements of ``benchmarks/gpu_check.py``: each row function takes a :class:`Setup` and returns a dict.

Every row runs on CUDA and, smaller, on CPU (a CUDA-only measurement raises :class:`Skip` with the reason), so the
same code paths are exercised by the CPU smoke test before a GPU ever runs them. Models and data are generated
from fixed seeds; nothing is downloaded.
"""

from __future__ import annotations

import copy
import math
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
STOKER_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


class Skip(Exception):
    """A row that does not apply here; its message is the reason recorded in the table."""


@dataclass
class Setup:
    device: torch.device
    tiny: bool

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def pick(self, cuda: Any, cpu: Any, tiny: Any) -> Any:
        """A size for this setup: the GPU's, the CPU's, or the smoke test's."""
        return tiny if self.tiny else cuda if self.cuda else cpu


# -- models and loops ----------------------------------------------------------------------------------------
def mlp(width: int = 64, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1))


def regression_data(batches: int, batch_size: int = 16, device: torch.device | None = None) -> TensorDataset:
    """Inputs and targets; on ``device`` when given (batches then need no host-to-device copy)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batches * batch_size, 32, generator=g)
    return TensorDataset(x.to(device), torch.sin(x.sum(1, keepdim=True)).to(device))


def optimizer_and_schedule(model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + 0.01 * s))


def raw_amp_loop(model: nn.Module, loader: DataLoader, precision: str, device: torch.device) -> dict[str, Any]:
    """The hand-written reference: autocast forward, fp32 loss, GradScaler for fp16, unscale, clip, step."""
    model.to(device)
    opt, sched = optimizer_and_schedule(model)
    dtype = DTYPES[precision]
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    skipped, loss = 0, torch.zeros(())
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(x)
        loss = F.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        before = scaler.get_scale() if scaler.is_enabled() else 1.0
        scaler.step(opt)
        scaler.update()
        if scaler.is_enabled() and scaler.get_scale() < before:
            skipped += 1
        else:
            sched.step()
        opt.zero_grad(set_to_none=True)
    return {"loss": float(loss.detach()), "skipped": skipped, "model": model}


def accelerator_loop(model: nn.Module, loader: DataLoader, precision: str, device: torch.device,
                     probe: Any = None, warmup: int = 0) -> dict[str, Any]:
    """The seed tutorial's loop through ``stoker.Accelerator``; ``probe`` (if any) watches steps after ``warmup``."""
    from stoker import Accelerator

    accelerator = Accelerator(mixed_precision=STOKER_PRECISION[precision], cpu=device.type == "cpu")
    opt, sched = optimizer_and_schedule(model)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    skipped, loss = 0, torch.zeros(())
    for i, (x, y) in enumerate(loader):
        if probe is not None and i == warmup:
            probe.start()
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
        skipped += accelerator.optimizer_step_was_skipped  # a Python bool: no device read
    if probe is not None:
        probe.stop()
    return {"loss": float(loss.detach()), "skipped": skipped, "model": accelerator.unwrap_model(model),
            "steps": i + 1}


def trainer_run(model: nn.Module, loader: DataLoader, precision: str, device: torch.device, root: str,
                probe: Any = None, warmup: int = 0) -> dict[str, Any]:
    """The same training through ``stoker.Trainer`` (bare: no logger, bar or checkpoints)."""
    from stoker import Callback, Trainer, TrainingModule

    class Module(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model
            self.last_loss = torch.zeros(())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self(x), y)
            self.last_loss = loss.detach()
            return loss

        def configure_optimizers(self) -> Any:
            opt, sched = optimizer_and_schedule(self.net)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class Probe(Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if probe is not None and batch_idx == warmup:
                probe.start()

        def on_train_end(self, trainer: Any, module: Any) -> None:
            if probe is not None:
                probe.stop()

    module = Module()
    trainer = Trainer(max_epochs=1, precision=precision, clip_grad_norm=1.0, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, default_root_dir=root,
                      accelerator="cpu" if device.type == "cpu" else "auto", callbacks=[Probe()])
    trainer.fit(module, loader)
    steps = len(loader)
    return {"loss": float(module.last_loss), "skipped": steps - trainer.global_step, "model": module.net,
            "steps": steps}


def max_param_diff(a: nn.Module, b: nn.Module) -> float:
    return max((p.detach().float().cpu() - q.detach().float().cpu()).abs().max().item()
               for p, q in zip(a.parameters(), b.parameters()))


# -- (a) parity against a hand-written AMP loop ---------------------------------------------------------------
def parity(setup: Setup, precision: str) -> dict[str, Any]:
    if precision == "bf16" and setup.cuda and not torch.cuda.is_bf16_supported():
        raise Skip("this GPU has no bf16")
    batches = setup.pick(200, 60, 4)
    data = regression_data(batches)
    loader = lambda: DataLoader(data, batch_size=16, shuffle=False)  # noqa: E731
    base = mlp()
    raw = raw_amp_loop(copy.deepcopy(base), loader(), precision, setup.device)
    acc = accelerator_loop(copy.deepcopy(base), loader(), precision, setup.device)
    with tempfile.TemporaryDirectory() as root:
        tr = trainer_run(copy.deepcopy(base), loader(), precision, setup.device, root)
    out = {"steps": batches, "raw_loss": raw["loss"], "accelerator_loss": acc["loss"], "trainer_loss": tr["loss"],
           "accelerator_max_diff": max_param_diff(raw["model"], acc["model"]),
           "trainer_max_diff": max_param_diff(raw["model"], tr["model"]),
           "raw_skipped": raw["skipped"], "accelerator_skipped": acc["skipped"], "trainer_skipped": tr["skipped"]}
    tolerance = 0.0 if precision == "fp32" else 1e-3
    same_skips = raw["skipped"] == acc["skipped"] == tr["skipped"]
    worst = max(out["accelerator_max_diff"], out["trainer_max_diff"])
    out["verdict"] = "pass" if worst <= tolerance and same_skips else "FAIL"
    out["expect"] = "max diff 0 (exact)" if precision == "fp32" else f"max diff <= {tolerance:g}, same skips"
    return out


# -- (b) host-device syncs per optimizer step -----------------------------------------------------------------
def _is_sync(record: warnings.WarningMessage) -> bool:
    """A sync-debug report ("called a synchronizing CUDA operation"), not torch's one-time notice on the first
    ``set_sync_debug_mode`` call of a process ("Synchronization debug mode is a prototype feature ...", which an
    earlier version counted as a sync when a sync row was the first to switch the mode)."""
    return "called a synchronizing cuda operation" in str(record.message).lower()


class CudaSyncProbe:
    """Counts CUDA's sync-debug warnings (``torch.cuda.set_sync_debug_mode("warn")``) between start and stop."""

    def __init__(self, set_mode: Callable[[str], None] | None = None) -> None:
        self._set_mode = set_mode or torch.cuda.set_sync_debug_mode
        self._catch: Any = None
        self._records: list[warnings.WarningMessage] = []
        self.active = False
        self.sites: list[str] = []

    def start(self) -> None:
        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        self._set_mode("warn")
        self.active = True

    def stop(self) -> None:
        if not self.active:
            return
        self._set_mode("default")
        self._catch.__exit__(None, None, None)
        self.active = False
        hits = [w for w in self._records if _is_sync(w)]
        self.sites = [f"{w.filename}:{w.lineno}: {str(w.message)[:80]}" for w in hits]

    @property
    def count(self) -> int:
        """Syncs seen so far (while active) or in the whole region (after ``stop``)."""
        if self.active:
            return sum(_is_sync(w) for w in self._records)
        return len(self.sites)


class CounterProbe:
    """The CPU stand-in: ``tests/helpers/sync_counter.SyncCounter`` between start and stop."""

    def __init__(self) -> None:
        from tests.helpers.sync_counter import SyncCounter

        self._counter = SyncCounter()

    @property
    def active(self) -> bool:
        return self._counter.active

    def start(self) -> None:
        self._counter.start()

    def stop(self) -> None:
        self._counter.stop()

    @property
    def count(self) -> int:
        return self._counter.count

    @property
    def sites(self) -> list[str]:
        return [f"{n} x {site}" for site, n in self._counter.by_site().most_common()]


def sync_check(setup: Setup, runner: str, precision: str, host_input: bool = False) -> dict[str, Any]:
    """Syncs per optimizer step after a warm-up. The data lives on the device (the step path alone) unless
    ``host_input``: then batches come from host memory through the prepared loader's copy to the device."""
    if precision == "bf16" and setup.cuda and not torch.cuda.is_bf16_supported():
        raise Skip("this GPU has no bf16")
    warmup, counted = 3, setup.pick(20, 10, 2)
    data = regression_data(warmup + counted, device=None if host_input else setup.device)
    loader = DataLoader(data, batch_size=16, shuffle=True)
    probe = CudaSyncProbe() if setup.cuda else CounterProbe()
    model = mlp()
    if runner == "accelerator":
        accelerator_loop(model, loader, precision, setup.device, probe=probe, warmup=warmup)
    else:
        with tempfile.TemporaryDirectory() as root:
            trainer_run(model, loader, precision, setup.device, root, probe=probe, warmup=warmup)
    expected = 1 if precision == "fp16" else 0  # GradScaler's one read of its overflow flag
    # The Trainer also checks the losses it held for non-finite values once at the epoch's end (one read; the
    # counted steps include the epoch's end). With no logger or bar, nothing else reads a value.
    expected_total = expected * counted + (1 if runner == "trainer" else 0)
    return {"method": "cuda sync-debug" if setup.cuda else "SyncCounter (CPU stand-in)", "steps": counted,
            "syncs": probe.count, "syncs_per_step": probe.count / counted,
            "expect": f"{expected} per step" + (" + 1 at the epoch's end" if runner == "trainer" else ""),
            "sites": probe.sites[:8], "verdict": "pass" if probe.count == expected_total else "FAIL"}


def sync_check_logged(setup: Setup, precision: str) -> dict[str, Any]:
    """The Trainer with what a user runs: ``self.log(..., prog_bar=True)`` every step, the progress bar, a
    TensorBoard logger (``log_every_n_steps=10``) and ``ModelCheckpoint`` at the epoch's end. Syncs are counted
    per optimizer step; values may reach the host only on log steps and at the epoch's end (the bar is given an
    hour between redraws, so its time-based reads fall outside the span)."""
    if precision == "bf16" and setup.cuda and not torch.cuda.is_bf16_supported():
        raise Skip("this GPU has no bf16")
    from stoker import Callback, ProgressBar, Trainer, TrainingModule

    warmup, counted, every = 3, setup.pick(40, 20, 4), setup.pick(10, 5, 2)
    loader = DataLoader(regression_data(warmup + counted, device=setup.device), batch_size=16, shuffle=True)
    probe = CudaSyncProbe() if setup.cuda else CounterProbe()
    marks: list[tuple[int, int]] = []  # (step the batch applies, syncs so far) at each counted batch's start

    class Module(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            self.log("train/loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Probe(Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == warmup:
                probe.start()
            if probe.active:
                marks.append((trainer.global_step + 1, probe.count))

        def on_train_end(self, trainer: Any, module: Any) -> None:
            marks.append((-1, probe.count))  # the last interval holds the epoch's end (checkpoint, logger flush)
            probe.stop()

    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(max_epochs=1, precision=precision, logger="tensorboard", log_every_n_steps=every,
                          default_root_dir=root, accelerator="cpu" if not setup.cuda else "auto",
                          callbacks=[Probe(), ProgressBar(refresh_rate=3600)])
        trainer.fit(Module(), loader)
        checkpoint = trainer.checkpoint_callback.best_model_path  # written at the epoch's end
        checkpoint_written = bool(checkpoint) and os.path.exists(checkpoint)
    # optimizer step -> syncs from its batch's start to the next batch's start
    per_step = {step: after - before for (step, before), (_, after) in zip(marks, marks[1:])}
    last_step = marks[-2][0]
    epoch_end = per_step.pop(last_step)  # the last batch's interval runs to the end of training
    scaler = 1 if precision == "fp16" else 0  # GradScaler's read per step
    off_log = {k: v - scaler for k, v in per_step.items() if k % every and v != scaler}
    on_log = {k: v - scaler for k, v in per_step.items() if not k % every}
    return {"method": "cuda sync-debug" if setup.cuda else "SyncCounter (CPU stand-in)", "steps": counted,
            "log_every_n_steps": every, "syncs": probe.count, "syncs_off_log_steps": sum(off_log.values()),
            "syncs_per_log_step": sorted(set(on_log.values())), "syncs_last_step_and_epoch_end": epoch_end,
            "checkpoint_written": checkpoint_written, "sites": probe.sites[:8],
            "expect": f"{scaler} per step, more only on log steps and at the epoch's end",
            "verdict": "pass" if not off_log and checkpoint_written else "FAIL"}


# -- (c) step time against a raw loop --------------------------------------------------------------------------
def transformer_stack(width: int, layers: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(width, max(1, width // 64), 4 * width, dropout=0.0, batch_first=True,
                                       norm_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def _speed_models(setup: Setup, kind: str) -> tuple[Callable[[], nn.Module], Callable[[], torch.Tensor], str, int]:
    if kind == "mlp":
        steps, width = setup.pick(400, 100, 3), setup.pick(256, 256, 16)
        return (lambda: mlp(width)), (lambda: torch.randn(64, 32, device=setup.device)), "fp32", steps
    width, layers, tokens = setup.pick((1024, 8, 512), (128, 2, 64), (16, 1, 4))
    # 32 x 512 tokens: on an H200 a batch of 8 took 14 ms of GPU time per step against 24 ms for the host to issue
    # its ~660 kernels, so that row measured the host, not the GPU.
    batch = setup.pick(32, 4, 2)
    steps = setup.pick(10, 5, 1)
    if setup.cuda and not torch.cuda.is_bf16_supported():
        raise Skip("this GPU has no bf16")
    return ((lambda: transformer_stack(width, layers)),
            (lambda: torch.randn(batch, tokens, width, device=setup.device)), "bf16", steps)


def step_time(setup: Setup, kind: str, compile: bool) -> dict[str, Any]:
    if compile and not setup.cuda:
        raise Skip("torch.compile rows run on CUDA only (on CPU they need a C++ toolchain and minutes)")
    from stoker import Accelerator

    make_model, make_input, precision, steps = _speed_models(setup, kind)
    dtype = DTYPES[precision]

    def raw_loop() -> Callable[[], None]:
        model = make_model().to(setup.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        forward = torch.compile(model) if compile else model

        def step() -> None:
            with torch.autocast(setup.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                out = forward(x)
            out.float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    x = make_input()
    raw_step, raw_again_step = raw_loop(), raw_loop()  # the second: the A/A row (the noise of this measurement)
    accelerator = Accelerator(mixed_precision=STOKER_PRECISION[precision], cpu=not setup.cuda)
    model = make_model()
    model, opt = accelerator.prepare(torch.compile(model) if compile else model, torch.optim.AdamW(
        model.parameters(), lr=1e-4))

    def stoker_step() -> None:
        with accelerator.accumulate(model):
            accelerator.backward(model(x).pow(2).mean())
            opt.step()
            opt.zero_grad()

    def block(step: Callable[[], None]) -> tuple[float, float]:
        """(seconds per step, seconds per step the host took to issue them): when the two are about equal, the
        host, not the device, sets the pace (launch-bound)."""
        setup.sync()
        t = time.perf_counter()
        for _ in range(steps):
            step()
        issued = time.perf_counter() - t
        setup.sync()
        return (time.perf_counter() - t) / steps, issued / steps

    contenders = {"raw": raw_step, "raw_again": raw_again_step, "stoker": stoker_step}
    for fn in contenders.values():  # warm-up (compilation happens here)
        block(fn)
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in contenders}
    for _ in range(setup.pick(7, 3, 2)):  # alternate, so drifting clocks or load hit all alike
        for name, fn in contenders.items():
            times[name].append(block(fn))
    ms = {k: statistics.median(t for t, _ in v) * 1e3 for k, v in times.items()}
    issue_ms = statistics.median(i for _, i in times["raw"]) * 1e3
    params = sum(p.numel() for p in accelerator.unwrap_model(model).parameters())
    return {"precision": precision, "params_M": round(params / 1e6, 2), "steps_per_block": steps,
            "raw_ms": round(ms["raw"], 4), "stoker_ms": round(ms["stoker"], 4),
            "ratio": round(ms["stoker"] / ms["raw"], 3), "aa_ratio": round(ms["raw_again"] / ms["raw"], 3),
            "raw_issue_ms": round(issue_ms, 4),
            "bound": "host (launch)" if issue_ms > 0.9 * ms["raw"] else "device"}


# -- (d) DDP and FSDP2 with one process, save_state/load_state round trip -------------------------------------
def one_process_strategy(setup: Setup, kind: str) -> dict[str, Any]:
    import torch.distributed as dist

    from stoker import Accelerator, DDPStrategy, FSDPStrategy

    if dist.is_initialized():
        raise Skip("a process group already exists in this process")
    if "MASTER_ADDR" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise Skip("launched under a multi-process launcher: this row is for one process")
    make = (lambda: DDPStrategy()) if kind == "ddp" else (lambda: FSDPStrategy())
    batches = setup.pick(20, 10, 2)
    data = regression_data(batches * 2)

    def run(accelerator: Any, seed: int, steps: int) -> tuple[nn.Module, Any, Any]:
        model = accelerator.prepare(mlp(seed=seed))
        opt = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-3))
        loader = accelerator.prepare(DataLoader(data, batch_size=16, shuffle=True))
        for i, (x, y) in enumerate(loader):
            if i == steps:
                break
            accelerator.backward(F.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
        return model, opt, loader

    first = Accelerator(strategy=make(), cpu=not setup.cuda)
    try:
        backend = dist.get_backend()
        model_a, _, _ = run(first, 0, batches)
        with tempfile.TemporaryDirectory() as folder:
            first.save_state(folder)
            second = Accelerator(strategy=make(), cpu=not setup.cuda)
            model_b, opt_b, loader_b = run(second, 1, 0)  # other initial weights, no steps
            second.load_state(folder)
            full = lambda m: [t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
                              for t in (p.detach() for p in first.unwrap_model(m).parameters())]
            diff = max((a - b).abs().max().item() for a, b in zip(full(model_a), full(model_b)))
            second.end_training()
    finally:
        first.end_training()
    return {"backend": backend, "wrapped": type(model_a).__name__, "trained_steps": batches,
            "max_diff_after_load": diff, "expect": "0", "verdict": "pass" if diff == 0 else "FAIL"}


# -- (e) peak GPU memory against a raw loop -------------------------------------------------------------------
def peak_memory(setup: Setup) -> dict[str, Any]:
    if not setup.cuda:
        raise Skip("CUDA only: torch has no peak-allocation counter for the CPU")
    from stoker import Accelerator

    make_model, make_input, precision, _ = _speed_models(setup, "transformer")
    peaks = {}
    for side in ("raw", "stoker"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(setup.device)
        base = torch.cuda.memory_allocated(setup.device)
        model = make_model().to(setup.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = make_input()
        accelerator = None
        if side == "stoker":
            accelerator = Accelerator(mixed_precision="bf16")
            model, opt = accelerator.prepare(model, opt)
        for _ in range(3):
            if accelerator is None:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = model(x)
                out.float().pow(2).mean().backward()
            else:
                accelerator.backward(model(x).pow(2).mean())
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(setup.device)
        peaks[side] = (torch.cuda.max_memory_allocated(setup.device) - base) / 2**20
        del model, opt, x, accelerator
    ratio = peaks["stoker"] / peaks["raw"] if peaks["raw"] else math.nan
    return {"raw_MiB": round(peaks["raw"], 1), "stoker_MiB": round(peaks["stoker"], 1), "ratio": round(ratio, 3),
            "expect": "ratio <= 1.05", "verdict": "pass" if ratio <= 1.05 else "check"}
