"""Exporting a ``TrainingModule``: ``to_onnx`` and ``to_torchscript``, as Lightning's methods of the same names.

Owns: the example input (given, else ``example_input_array``, moved to the module's device), the mode around an
export (eval during it, the previous mode restored after), and the errors for what is missing. Does not own the
export itself (``torch.onnx.export``, ``torch.jit.script``/``trace``).

One choice differs from Lightning: ``to_onnx`` exports in eval mode, as torch's TorchScript-based exporter did by
default (``training=TrainingMode.EVAL``). Lightning exports in the module's current mode, and torch's
``torch.export``-based exporter (the default since torch 2.9) records what that mode does: a module left in training
mode gets dropout and batch statistics in its ONNX graph. To export training behaviour, call ``torch.onnx.export``
yourself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import torch

from ..accelerator import send_to_device


def example_input(module: Any, given: Any, method: str) -> Any:
    """``given``, else the module's ``example_input_array``, on the module's device."""
    sample = given if given is not None else module.example_input_array
    if sample is None:
        raise ValueError(f"{type(module).__name__}.{method} needs an example input: pass one, or set "
                         "self.example_input_array in the module's __init__ (a tensor or a tuple of forward's "
                         "arguments).")
    return send_to_device(sample, module.device)


@contextlib.contextmanager
def exporting(module: Any) -> Iterator[None]:
    """Eval mode, no autograd, and ``self.trainer`` None instead of an error without a Trainer (the scripter reads
    every attribute); the module's mode and flag restored after."""
    mode = module.training
    object.__setattr__(module, "_jit_is_scripting", True)
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        object.__setattr__(module, "_jit_is_scripting", False)
        module.train(mode)


def to_onnx(module: Any, file_path: str | os.PathLike | Any | None, input_sample: Any, **kwargs: Any) -> Any:
    """``torch.onnx.export`` of ``module`` with its example input (see ``TrainingModule.to_onnx``)."""
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if kwargs.get("dynamo") is False:  # torch's older TorchScript-based exporter needs only onnx
        missing = [name for name in missing if name == "onnx"]
    if missing:
        raise ModuleNotFoundError(f"{type(module).__name__}.to_onnx() needs {' and '.join(missing)} (torch's ONNX "
                                  f"exporter uses them): pip install {' '.join(missing)}")
    sample = example_input(module, input_sample, "to_onnx()")
    args = sample if isinstance(sample, tuple) else (sample,)
    if isinstance(file_path, os.PathLike):
        file_path = os.fspath(file_path)
    with exporting(module):
        return torch.onnx.export(module, args, file_path, **kwargs)


def to_torchscript(module: Any, file_path: str | os.PathLike | None, method: str | None, example_inputs: Any,
                   **kwargs: Any) -> Any:
    """``torch.jit.script`` or ``torch.jit.trace`` of ``module``, saved to ``file_path`` when given (see
    ``TrainingModule.to_torchscript``)."""
    if method not in ("script", "trace"):
        raise ValueError(f"{type(module).__name__}.to_torchscript(method={method!r}) is not a method. Expected "
                         "'script' (compile forward's code) or 'trace' (record it on example inputs).")
    with exporting(module):
        if method == "script":
            scripted = torch.jit.script(module, **kwargs)
        else:
            inputs = example_input(module, example_inputs, "to_torchscript(method='trace')")
            scripted = torch.jit.trace(module, example_inputs=inputs, **kwargs)
    if file_path is not None:
        torch.jit.save(scripted, os.fspath(file_path))
    return scripted
