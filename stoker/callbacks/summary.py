"""`ModelSummary`: a table of the module's layers, printed once at the start of every ``fit``.

Owns: counting parameters (per layer and in total, trainable or not, shared parameters once), their size in
memory (from each parameter's real dtype, so ``bf16`` weights count 2 bytes), the layer listing to a depth, the
optional input/output shapes and FLOPs (``torch.utils.flop_counter``) from ``module.example_input_array``, and the
table's text. The Trainer adds this
callback by default; ``Trainer(enable_model_summary=False)`` leaves it out.

Cost: one pass over the parameters at ``fit`` start (no device work); with ``example_input_array``, one forward
pass without gradients.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from stoker.callbacks.base import Callback, TrainerView

__all__ = ["ModelSummary", "SummaryTable", "summarize"]

UNKNOWN_SIZE = "?"  # a shape the example forward pass did not see
NOT_APPLICABLE = "n/a"
LEFTOVER_PARAMS_NAME = "other params"  # the row of the parameters the root module holds itself


@dataclass
class LayerRow:
    """One line of the table: a sub-module, its parameters (counted once each) and their bytes."""

    name: str
    type: str
    params: int
    trainable: int
    bytes: int
    training: bool | None
    in_size: Any = UNKNOWN_SIZE
    out_size: Any = UNKNOWN_SIZE


class SummaryTable:
    """The summary of ``module`` to ``max_depth``: rows, totals and the text table (``str(table)``).

    Args:
        module: The module to describe (the root itself is not a row).
        max_depth: 1 lists the direct children, n lists sub-modules down to n levels, -1 all of them, 0 none.
        autocast: A context manager factory for the example forward pass (the Trainer's precision), or None.
        example_forward: Run ``module.example_input_array`` through the module for the shapes (False: no shapes).

    Example:
        >>> table = summarize(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
        >>> table.total_parameters, table.trainable_parameters
        (15, 15)
    """

    def __init__(self, module: nn.Module, max_depth: int = 1, autocast: Any = None,
                 example_forward: bool = True) -> None:
        _check_depth("summarize", max_depth)
        self.module, self.max_depth = module, max_depth
        modes = [m.training for m in list(module.modules())[1:]]
        self.modules_in_train_mode, self.modules_in_eval_mode = modes.count(True), modes.count(False)
        self.layers = [_row(name, m) for name, m in self.named_layers()]
        self.total_flops, self.flop_counts = 0, {row.name: {} for row in self.layers}  # counted in the example forward
        example = getattr(module, "example_input_array", None)
        self.has_shapes = example_forward and example is not None and bool(self.layers)
        if self.has_shapes:  # (it also gives lazy layers their parameters: counted after it)
            self._record_shapes(example, autocast)
            for row, (name, m) in zip(self.layers, self.named_layers()):
                row.params, row.trainable, row.bytes = _counts(_unique_params(m))
        self.total_parameters, self.trainable_parameters, self.total_bytes = _counts(_unique_params(module))
        self.other_parameters = self.total_parameters - self._params_under_children()
        lazy = sum(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())
        if lazy:  # Lightning's sentence last, for a warnings filter written for it
            warnings.warn(f"The summary of {type(module).__name__} leaves out {lazy} parameter(s) of lazy layers, "
                          "not initialized before a first forward pass (give the module an example_input_array to "
                          "count them). The total number of parameters detected may be inaccurate.", UserWarning,
                          stacklevel=3)

    @property
    def model_size(self) -> float:
        """Megabytes (1e6 bytes) the parameters take in their dtypes."""
        return self.total_bytes / 1e6

    def named_layers(self) -> list[tuple[str, nn.Module]]:
        """The listed layers as ``(name, module)``, down to ``max_depth``."""
        if self.max_depth == 0:
            return []
        if self.max_depth == 1:
            return list(self.module.named_children())
        layers = list(self.module.named_modules())[1:]
        if self.max_depth > 0:
            layers = [(name, m) for name, m in layers if name.count(".") < self.max_depth]
        return layers

    def _params_under_children(self) -> int:
        seen = {id(p) for _, child in self.module.named_children() for p in child.parameters()}
        return sum(p.numel() for p in _unique_params(self.module) if id(p) in seen)

    def _record_shapes(self, example: Any, autocast: Any) -> None:
        from stoker.accelerator import send_to_device

        rows = {id(m): row for (_, m), row in zip(self.named_layers(), self.layers)}
        handles = []
        for _, m in self.named_layers():
            def hook(layer: nn.Module, args: tuple, kwargs: dict, out: Any, row: LayerRow = rows[id(m)]) -> None:
                inputs = (*args, *kwargs.values())
                if row.in_size == UNKNOWN_SIZE:  # a layer called twice keeps its first shapes
                    # no input, or a 0-dim one, has no size to show (as in Lightning: "?")
                    row.in_size = _shape(inputs[0] if len(inputs) == 1 else inputs) or UNKNOWN_SIZE
                    row.out_size = _shape(out) or UNKNOWN_SIZE
            if not isinstance(m, torch.jit.ScriptModule):  # which takes no hooks: its shapes stay unknown
                handles.append(m.register_forward_hook(hook, with_kwargs=True))
        device = next((p.device for p in self.module.parameters()), torch.device("cpu"))
        example = send_to_device(example, device)
        modes = [(m, m.training) for m in self.module.modules()]
        self.module.eval()
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        try:
            with torch.no_grad(), (autocast() if autocast is not None else contextlib.nullcontext()), counter:
                if isinstance(example, (list, tuple)):
                    self.module(*example)
                elif isinstance(example, dict):
                    self.module(**example)
                else:
                    self.module(example)
            self.total_flops = counter.get_total_flops()
            counts, root = counter.get_flop_counts(), type(self.module).__name__
            self.flop_counts = {row.name: dict(counts.get(f"{root}.{row.name}", {})) for row in self.layers}
        finally:
            for handle in handles:
                handle.remove()
            for m, mode in modes:
                m.training = mode

    def columns(self) -> list[tuple[str, list[str]]]:
        """The table's columns as ``(title, cells)``, one cell per row (the root's own parameters last, if any)."""
        columns = [(" ", [str(i) for i in range(len(self.layers))]), ("Name", [r.name for r in self.layers]),
                   ("Type", [r.type for r in self.layers]),
                   ("Params", [readable_count(r.params) for r in self.layers]),
                   ("Trainable", [readable_count(r.trainable) for r in self.layers]),
                   ("Size", [readable_bytes(r.bytes) for r in self.layers]),
                   ("Mode", ["train" if r.training else "eval" for r in self.layers])]
        if self.has_shapes:
            columns += [("In sizes", [str(r.in_size) for r in self.layers]),
                        ("Out sizes", [str(r.out_size) for r in self.layers])]
        if self.other_parameters:  # parameters held by the root module itself, outside any listed layer
            values = [" ", LEFTOVER_PARAMS_NAME, NOT_APPLICABLE, readable_count(self.other_parameters), "", "",
                      NOT_APPLICABLE, NOT_APPLICABLE, NOT_APPLICABLE]
            columns = [(title, cells + [values[i]]) for i, (title, cells) in enumerate(columns)]
        return columns

    def totals(self) -> list[tuple[str, str]]:
        """The lines under the table as ``(value, label)``: parameters, size in MB, modules per mode."""
        non_trainable = self.total_parameters - self.trainable_parameters
        return [(readable_count(self.trainable_parameters), "Trainable params"),
                (readable_count(non_trainable), "Non-trainable params"),
                (readable_count(self.total_parameters), "Total params"),
                (f"{self.model_size:,.3f}", "Total estimated model params size (MB)"),
                (str(self.modules_in_train_mode), "Modules in train mode"),
                (str(self.modules_in_eval_mode), "Modules in eval mode")]

    def __str__(self) -> str:
        columns = self.columns()
        widths = [max([len(title), *(len(c) for c in cells)]) for title, cells in columns]
        rule = "-" * (sum(widths) + 3 * len(widths))
        lines = [" | ".join(t.ljust(w) for (t, _), w in zip(columns, widths)).rstrip(), rule]
        for i in range(len(columns[0][1])):
            lines.append(" | ".join(cells[i].ljust(w) for (_, cells), w in zip(columns, widths)).rstrip())
        lines.append(rule)
        lines += [f"{value:<10}{label}" for value, label in self.totals()]
        return "\n".join(lines)


def summarize(module: nn.Module, max_depth: int = 1, autocast: Any = None,
              example_forward: bool = True) -> SummaryTable:
    """The :class:`SummaryTable` of ``module`` (``print(summarize(model))`` shows it)."""
    return SummaryTable(module, max_depth, autocast, example_forward)


class ModelSummary(Callback):
    """Prints a table of the module's layers at the start of every ``fit`` (main process only).

    The table lists each layer down to ``max_depth`` with its type, parameter count, trainable parameters, size
    in memory and train/eval mode (plus input and output shapes when the module defines
    ``example_input_array``, except with FSDP); then the totals, and a line with the device, processes,
    precision and gradient accumulation of the run. Sizes come from the parameters' real dtypes. The Trainer adds a
    ``ModelSummary()`` unless one is given or ``Trainer(enable_model_summary=False)``.

    Args:
        max_depth: 1 (default) lists the module's direct children; n lists sub-modules n levels deep; -1 all;
            0 prints nothing.

    Attributes:
        table: The last :class:`SummaryTable` (None before the first ``fit``).

    Example:
        >>> trainer = Trainer(callbacks=[ModelSummary(max_depth=2)])   # doctest: +SKIP
        >>> trainer.fit(module, loader)                                # doctest: +SKIP
          | Name  | Type       | Params | Trainable | Size   | Mode
        ...
    """

    def __init__(self, max_depth: int = 1) -> None:
        _check_depth("ModelSummary", max_depth)
        self.max_depth = max_depth
        self.table: SummaryTable | None = None

    def on_fit_start(self, trainer: TrainerView, module: Any) -> None:
        if self.max_depth == 0 or not trainer.is_global_zero:
            return
        accelerator = trainer.accelerator
        autocast = accelerator.autocast if accelerator.mixed_precision != "no" else None
        # A sharded module's forward is collective (FSDP gathers weights): only the main process runs this, so no
        # example forward there, and no shapes.
        self.table = summarize(module, self.max_depth, autocast,
                               example_forward=not accelerator.strategy.shards_parameters)
        steps = accelerator.gradient_accumulation_steps
        accumulation = f"{steps} micro-batch{'es' if steps > 1 else ''} per optimizer step"
        precision = str(getattr(trainer, "precision", accelerator.mixed_precision))
        self.show(self.table, f"Device: {accelerator.device} | processes: {accelerator.num_processes} | precision: "
                              f"{'fp32' if precision == 'no' else precision} | accumulation: {accumulation}")

    def show(self, table: SummaryTable, run: str) -> None:
        """Prints ``table`` and the line about the ``run`` (device, processes, precision, accumulation); override it
        to show the summary another way (``RichModelSummary`` draws it with rich)."""
        print(f"{table}\n{run}", flush=True)


def _check_depth(owner: str, max_depth: Any) -> None:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
        raise ValueError(f"{owner}(max_depth={max_depth!r}) must be an int: -1 (every layer), 0 (no table) or a "
                         "depth >= 1.")


def _unique_params(module: nn.Module) -> list[torch.Tensor]:
    """Parameters counted once each (``parameters()`` already skips shared ones); lazy ones have no size yet."""
    return [p for p in module.parameters() if not isinstance(p, nn.parameter.UninitializedParameter)]


def _counts(params: list[torch.Tensor]) -> tuple[int, int, int]:
    """(parameters, trainable parameters, bytes) of ``params``."""
    return (sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad),
            sum(p.numel() * p.element_size() for p in params))


def _row(name: str, module: nn.Module) -> LayerRow:
    params, trainable, size = _counts(_unique_params(module))
    return LayerRow(name=name, type=type(module).__name__, params=params, trainable=trainable, bytes=size,
                    training=module.training)


def _shape(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    return UNKNOWN_SIZE


def readable_count(number: int) -> str:
    """``1234`` -> ``"1.2 K"``, ``132608`` -> ``"132 K"``, ``5`` -> ``"5"`` (K, M, B, T: thousands to trillions)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if number >= scale:
            value = number / scale
            return f"{value:,.1f} {unit}" if value < 100 else f"{int(value):,d} {unit}"
    return str(int(number))


def readable_bytes(number: int) -> str:
    """``528`` -> ``"528 B"``, ``530432`` -> ``"530.4 KB"`` (powers of 1000, as the MB total)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if number >= scale:
            return f"{number / scale:,.1f} {unit}"
    return f"{int(number)} B"
