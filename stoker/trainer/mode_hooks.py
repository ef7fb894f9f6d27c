"""A TrainingModule's train/eval mode: ``freeze``/``unfreeze``, and the module's own hooks around evaluation's mode
switch, ``on_{validation,test,predict}_model_eval`` / ``_train``.

Module-only hooks, as in Lightning (callbacks do not get them). Evaluation calls ``on_{stage}_model_eval`` before
its ``on_{stage}_start`` hooks, and after its ``on_{stage}_end`` hooks puts every sub-module back in the mode it had
(a frozen BatchNorm stays in eval mode) — unless the module overrides ``on_{stage}_model_train``, which is then
called instead and decides alone (validation and test; after predicting the modes are always put back and
``on_predict_model_train`` is not called, as in Lightning 2.6). Override ``on_validation_model_eval`` to keep, e.g., dropout active while
validating (Monte Carlo dropout).
"""

from __future__ import annotations

import warnings

import torch

from ..user_frame import PossibleUserWarning, user_stacklevel
from .overrides import defines_hook

MODE_HOOKS = ("on_validation_model_eval", "on_validation_model_train", "on_test_model_eval", "on_test_model_train",
              "on_predict_model_eval", "on_predict_model_train")


class ModuleModes(torch.nn.Module):
    """``freeze``/``unfreeze``, and the mode hooks' defaults: eval mode before a stage, train mode after it (see the
    module docstring)."""

    def freeze(self) -> ModuleModes:
        """No gradients for any parameter, and eval mode (for inference or a frozen sub-model); returns the module
        (``model = Net.load_from_checkpoint(path).freeze()``)."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> ModuleModes:
        """Gradients for every parameter again, and train mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    def on_validation_model_eval(self) -> None:
        """Before ``on_validation_start``: eval mode for validating (override to keep, e.g., dropout on)."""
        self.eval()

    def on_validation_model_train(self) -> None:
        """After ``on_validation_end``, when overridden: the mode to leave the module in (without an override each
        sub-module gets back the mode it had)."""
        self.train()

    def on_test_model_eval(self) -> None:
        """Before ``on_test_start``: eval mode for testing (override to keep, e.g., dropout on)."""
        self.eval()

    def on_test_model_train(self) -> None:
        """After ``on_test_end``, when overridden: the mode to leave the module in (without an override each
        sub-module gets back the mode it had)."""
        self.train()

    def on_predict_model_eval(self) -> None:
        """Before ``on_predict_start``: eval mode for predicting (override to keep, e.g., dropout on)."""
        self.eval()

    def on_predict_model_train(self) -> None:
        """Kept for Lightning's interface; the Trainer does not call it (as Lightning 2.6 does not): after
        predicting each sub-module gets back the mode it had."""
        self.train()


def overrides_train_hook(module: torch.nn.Module, prefix: str) -> bool:
    """Whether ``module`` (its class or the instance) replaces ``on_{prefix}_model_train``'s default."""
    return defines_hook(module, f"on_{prefix}_model_train", ModuleModes)


def warn_eval_modules(module: torch.nn.Module) -> None:
    """At the start of training, Lightning's warning when any part of ``module`` is in eval mode: the Trainer keeps
    each sub-module's mode (a frozen backbone stays in eval mode), so a part left in eval mode by mistake would
    train without dropout and with frozen BatchNorm statistics."""
    names = [name or type(module).__name__ for name, part in module.named_modules() if not part.training]
    if names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        warnings.warn(f"Found {len(names)} module(s) in eval mode at the start of training. This may lead to "
                      "unexpected behavior during training. If this is intentional, you can ignore this warning. "
                      f"(In eval mode: {shown}. The Trainer keeps each sub-module's mode; call .train() on a part "
                      "that should train with dropout and BatchNorm updates.)", PossibleUserWarning,
                      stacklevel=user_stacklevel())
