"""Lightning's facts of a Trainer that are only names over the core's own (``trainer.model``, ``world_size``,
``node_rank`` and ``device_ids``, ``ckpt_path``, ``interrupted``, the clipping settings, ``is_last_batch``,
``evaluating``, ``num_sanity_val_batches``, ``received_sigterm``, ``val_check_batch``, the ``validate_loop`` /
``test_loop`` / ``predict_loop`` views (``loops.py``), and ``max_epochs`` /
``max_steps`` in Lightning's spelling over the core's ``limits``, ``precision_plugin``) and
``init_module()``: a mixin of the Lightning-named ``stoker.Trainer`` (``trainer.py``), kept apart so that each file
stays one idea (the ranks are the core Trainer's own)."""

from __future__ import annotations

import contextlib
import signal
from typing import TYPE_CHECKING

import torch

from ...trainer.auto_step import clip_settings
from .loops import EvaluationLoopView, PredictionLoopView

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ...accelerator import Accelerator
    from ...callbacks import Callback
    from ...trainer import TrainingModule
    from ...trainer.loops import FitLoop
    from ...trainer.options import RunLimits, RunOptions
    from ...trainer.preemption import Preemption
    from ...trainer.run import FitRun
    from ...trainer.setup import RunSetup
    from ...trainer.stages import StageRecord
    from ...trainer.states import TrainerState


class RunFacts:
    """Lightning's names for facts the core Trainer owns (read here, decided there)."""

    accelerator: Accelerator
    run_setup: RunSetup
    state: TrainerState
    module: TrainingModule | None
    num_nodes: int
    fit_loop: FitLoop
    options: RunOptions
    limits: RunLimits
    epochs_unlimited: bool = False
    val_check_seconds: float | None
    fit_run: FitRun | None
    preemption: Preemption
    num_val_batches: list[int | float]
    stage_record: StageRecord
    callbacks: list[Callback]
    precision: str  # the core Trainer's spelling ("fp32", "fp16", "bf16", "bf16-true", ...)

    @property
    def model(self) -> torch.nn.Module | None:
        """Lightning's ``trainer.model``: the module as the last stage ran it (the DDP wrapper under several
        processes), else the module."""
        return self.run_setup.last_model if self.run_setup.last_model is not None else self.module

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Lightning's ``with trainer.init_module(): model = Net()``: the tensors made inside are created on this
        process's device, in the weights' dtype of a true precision ("bf16-true", "64-true"). ``empty_init`` is
        accepted for Lightning's signature; weights are always initialised."""
        dtype = self.accelerator.precision.weights_dtype
        previous = torch.get_default_dtype()
        with torch.device(self.accelerator.device):
            if dtype is not None:
                torch.set_default_dtype(dtype)
            try:
                yield
            finally:
                torch.set_default_dtype(previous)

    @property
    def max_steps(self) -> int:
        """Lightning's spelling of the step limit: -1 when there is none (the loops read ``trainer.limits``)."""
        steps = self.limits.max_steps
        return -1 if steps is None else steps

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self.limits.max_steps = value  # checked there; -1 or None: no limit

    @property
    def max_epochs(self) -> int | None:
        """The epoch limit as given: None when not set, -1 for "no limit" (Lightning's spellings). From the first
        ``fit`` on, one not given reads -1 when ``max_steps`` alone limits the run, as Lightning resolves it; with
        neither limit it stays None (stoker trains one epoch, or ``min_epochs``, where Lightning trains 1000)."""
        epochs, limits = self.limits.max_epochs, self.limits
        resolved = self.fit_run is not None and limits.max_steps is not None
        return -1 if epochs is None and (self.epochs_unlimited or resolved) else epochs

    @max_epochs.setter
    def max_epochs(self, value: int | None) -> None:
        self.limits.max_epochs = value  # checked there
        self.epochs_unlimited = value == -1  # kept apart from None (not set) only to read back as given

    @property
    def val_check_batch(self) -> int | float | None:
        """Lightning's name: validation runs after every this many training batches of the current (or last) fit;
        ``inf`` for a train loader of unknown length validated at its epochs' ends, None before the fit's train
        loader is known or when ``val_check_interval`` is a time."""
        run = self.fit_run
        if run is None or run.train_loader is None or self.val_check_seconds is not None:
            return None
        return float("inf") if run.val_check_batch is None else run.val_check_batch

    @property
    def interrupted(self) -> bool:
        """Lightning's ``trainer.interrupted``: the last run was stopped by the user or a signal (a
        ``KeyboardInterrupt``/``SystemExit``; an exception is ``state.status == "failed"``)."""
        return self.state.status == "interrupted"

    @property
    def ckpt_path(self) -> str | None:
        """Lightning's ``trainer.ckpt_path``: the checkpoint the current (or last) ``fit``, ``validate``, ``test``
        or ``predict`` loaded ("best" and "last" resolved to the folder), None when it loaded none."""
        return self.run_setup.ckpt_path

    @property
    def gradient_clip_val(self) -> float | None:
        """Lightning's name: the value the Trainer clips gradients to (``clip_grad_norm`` or ``clip_grad_value``)."""
        return clip_settings(self)["gradient_clip_val"]

    @property
    def gradient_clip_algorithm(self) -> str | None:
        """Lightning's name: ``"norm"`` or ``"value"`` (None: no clipping)."""
        return clip_settings(self)["gradient_clip_algorithm"]

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes

    @property
    def node_rank(self) -> int:
        """This node's index: the processes' global rank divided by the processes per node."""
        return self.accelerator.process_index // max(1, self.num_devices)

    @property
    def num_devices(self) -> int:
        """Processes (devices) per node."""
        return max(1, self.accelerator.num_processes // max(1, self.num_nodes))

    @property
    def device_ids(self) -> list[int]:
        """Lightning's ``trainer.device_ids``: the device index of each process on this node (process i uses
        visible device i; choose the GPUs with ``CUDA_VISIBLE_DEVICES``)."""
        return list(range(self.num_devices))

    @property
    def is_last_batch(self) -> bool:
        """Lightning's name: the training batch being run (or last run) is its epoch's last."""
        return self.fit_loop.epoch_batches_finished

    @property
    def evaluating(self) -> bool:
        """Lightning's name: a validation (the sanity check's too) or a test is running."""
        return self.state.stage is not None and self.state.stage.evaluating

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        """Batches per val loader a fit's sanity check runs: ``num_sanity_val_steps`` of each, at most all of it;
        empty before the first fit and when no sanity check is asked for (it is a fact of ``fit`` only)."""
        steps = self.options.num_sanity_val_steps
        if steps == 0 or self.fit_run is None:
            return []
        return [n if steps is None else min(steps, n) for n in self.num_val_batches]

    @property
    def validate_loop(self) -> EvaluationLoopView:
        """Lightning's ``trainer.validate_loop`` (its ``max_batches``): a view, see ``loops.py``."""
        return EvaluationLoopView(self, "validate")

    @property
    def test_loop(self) -> EvaluationLoopView:
        """Lightning's ``trainer.test_loop`` (its ``max_batches``): a view, see ``loops.py``."""
        return EvaluationLoopView(self, "test")

    @property
    def predict_loop(self) -> PredictionLoopView:
        """Lightning's ``trainer.predict_loop`` (``predictions``, ``epoch_batch_indices``, ``max_batches``)."""
        return PredictionLoopView(self)

    @property
    def received_sigterm(self) -> bool:
        """Lightning's name: the current (or last) run received SIGTERM (stoker then saves and stops cleanly)."""
        return self.preemption.received == getattr(signal, "SIGTERM", None)


    @property
    def precision_plugin(self) -> PrecisionView:
        """Lightning's ``trainer.precision_plugin``: the run's precision in Lightning's spelling and its device."""
        return PrecisionView(self.precision, self.accelerator.device.type)


# The core's precision names (``trainer.precision``) in Lightning's spelling.
_LIGHTNING_PRECISION = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed", "fp16-true": "16-true",
                        "bf16-true": "bf16-true", "fp64-true": "64-true"}


class PrecisionView:
    """What ``trainer.precision_plugin`` answers: ``precision`` ("32-true", "16-mixed", "bf16-mixed", "16-true",
    "bf16-true" or "64-true") and ``device``, the type of the device the run computes on ("cpu", "cuda", ...).

    Example:
        >>> from stoker import Trainer
        >>> plugin = Trainer(accelerator="cpu", precision="bf16").precision_plugin
        >>> plugin.precision, plugin.device
        ('bf16-mixed', 'cpu')
    """

    def __init__(self, precision: str, device: str) -> None:
        self.precision, self.device = _LIGHTNING_PRECISION[precision], device
