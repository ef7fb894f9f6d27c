"""`BaseFinetuning` and `BackboneFinetuning`: train a model with parts of it frozen, and thaw them into new optimizer
param groups at chosen epochs (transfer learning). Lightning's module path ``callbacks.finetuning``.

``BaseFinetuning`` calls ``freeze_before_training(module)`` in ``setup`` (before ``configure_optimizers``, which
should then pass only the trainable parameters to its optimizer) and ``finetune_function(module, epoch, optimizer)``
at each epoch start, for each optimizer. Its static helpers freeze and thaw modules; ``unfreeze_and_add_param_group``
thaws modules and gives their parameters a new param group.

Freezing never switches a module between train and eval mode (the Trainer does that for the whole module): a frozen
BatchNorm layer still normalises a training batch with the batch's statistics. ``train_bn=False`` freezes its
weight and bias too and stops it from updating its running statistics (``track_running_stats=False``); thawing
turns both back on.

Resuming: the callback's state holds every param group the optimizers had at the last epoch start (parameters by
name) and which parameters and BatchNorm layers were frozen then. A resumed fit calls :meth:`restore_param_groups`
before the optimizers' state is loaded (``stoker/trainer/checkpointing.py``): the groups added during the saved run
are added again and the module is frozen as it was, so that the saved optimizer state fits and the fit continues
exactly. An epoch start already handled before the checkpoint (a resume in the middle of an epoch) is not handled
twice.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from stoker.callbacks.base import Callback, TrainerView
from stoker.user_frame import user_stacklevel

if TYPE_CHECKING:
    from torch.optim import Optimizer

__all__ = ["BackboneFinetuning", "BaseFinetuning", "multiplicative"]

log = logging.getLogger(__name__)

#: A module, or any nesting of iterables of modules (lists, tuples, ``nn.ModuleList``, ``nn.ModuleDict``).
Modules = nn.Module | Iterable[Any]


def multiplicative(epoch: int) -> float:
    """``BackboneFinetuning``'s default ``lambda_func``: the backbone's rate doubles every epoch."""
    return 2.0


def _layout(module: nn.Module) -> dict[str, list[str]]:
    """What is frozen in ``module``: parameters without ``requires_grad``, BatchNorm layers not tracking statistics."""
    return {"frozen": [name for name, p in module.named_parameters() if not p.requires_grad],
            "untracked": [name for name, m in module.named_modules()
                          if isinstance(m, _BatchNorm) and not m.track_running_stats]}


def _apply_layout(module: nn.Module, layout: Mapping[str, list[str]]) -> None:
    frozen, untracked = set(layout.get("frozen", [])), set(layout.get("untracked", []))
    for name, param in module.named_parameters():
        param.requires_grad = name not in frozen
    for name, layer in module.named_modules():
        if isinstance(layer, _BatchNorm):
            layer.track_running_stats = name not in untracked


def _with_names(groups: Iterable[Mapping[str, Any]], names: Mapping[nn.Parameter, str]) -> list[dict[str, Any]]:
    """Param groups with each parameter replaced by its name in the module (what a checkpoint can hold)."""
    return [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[p] for p in g["params"]]}
            for g in groups]


class BaseFinetuning(Callback):
    """Base class of fine-tuning callbacks: override ``freeze_before_training`` and ``finetune_function``.

    Example:
        >>> class ThawEncoder(BaseFinetuning):
        ...     def freeze_before_training(self, module):
        ...         self.freeze(module.encoder)
        ...     def finetune_function(self, module, epoch, optimizer):
        ...         if epoch == 5:  # from the 6th epoch on, the encoder trains at a tenth of the head's rate
        ...             self.unfreeze_and_add_param_group(module.encoder, optimizer, initial_denom_lr=10.0)

    The module's ``configure_optimizers`` should give its optimizer only the trainable parameters
    (``filter(lambda p: p.requires_grad, self.parameters())``): a parameter may be in one param group only.
    """

    def __init__(self) -> None:
        # Per optimizer index: its param groups (parameters by name) at the last epoch start.
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._layout: dict[str, list[str]] = {}
        self._finetuned_epoch: int | None = None  # the last epoch whose start ran finetune_function

    # -- what subclasses write ------------------------------------------------------------------------------------
    def freeze_before_training(self, pl_module: nn.Module) -> None:
        """Freezes what must not train at first (called in ``setup``, before ``configure_optimizers``)."""
        raise NotImplementedError(f"{type(self).__name__} must define freeze_before_training(self, module).")

    def finetune_function(self, pl_module: nn.Module, current_epoch: int, optimizer: Optimizer) -> None:
        """Thaws what should train from ``current_epoch`` on (called at each epoch start, for each optimizer)."""
        raise NotImplementedError(f"{type(self).__name__} must define finetune_function(self, module, epoch, "
                                  "optimizer).")

    # -- hooks ----------------------------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: nn.Module, stage: str) -> None:
        self._finetuned_epoch = None  # a new run (a resumed one gets it back from the checkpoint after setup)
        self.freeze_before_training(pl_module)

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: nn.Module) -> None:
        epoch = trainer.current_epoch
        if epoch == self._finetuned_epoch:  # a resume inside this epoch: its start ran before the checkpoint
            return
        names = {p: n for n, p in pl_module.named_parameters()}
        for index, optimizer in enumerate(trainer.optimizers):  # as configure_optimizers returned them
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, epoch, optimizer)
            known = self._internal_optimizer_metadata.get(index)
            if known is None:
                self._internal_optimizer_metadata[index] = _with_names(optimizer.param_groups, names)
            elif len(optimizer.param_groups) != before:
                known.extend(_with_names(optimizer.param_groups[before:], names))
        self._layout = _layout(pl_module)
        self._finetuned_epoch = epoch

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata, "layout": self._layout,
                "finetuned_epoch": self._finetuned_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._internal_optimizer_metadata = {int(k): list(v) for k, v in
                                             state_dict.get("internal_optimizer_metadata", {}).items()}
        self._layout = dict(state_dict.get("layout") or {})
        self._finetuned_epoch = state_dict.get("finetuned_epoch")

    def restore_param_groups(self, trainer: TrainerView, state: Mapping[str, Any]) -> None:
        """Called by a resuming fit with this callback's saved ``state``, after ``setup`` and
        ``configure_optimizers`` and before the optimizers' state is loaded: the module is frozen as it was when the
        state was saved, and each optimizer gets back the param groups added to it since ``configure_optimizers``."""
        module = trainer.module
        if state.get("layout"):
            _apply_layout(module, state["layout"])
        params = dict(module.named_parameters())
        for index, groups in dict(state.get("internal_optimizer_metadata") or {}).items():
            if int(index) >= len(trainer.optimizers):
                raise ValueError(f"{type(self).__name__}: the checkpoint holds param groups of optimizer #{index}, "
                                 f"but configure_optimizers returned {len(trainer.optimizers)} optimizer(s). Resume "
                                 "with the optimizers the checkpoint was saved with.")
            optimizer = trainer.optimizers[int(index)]
            for group in groups[len(optimizer.param_groups):]:
                missing = [n for n in group["params"] if n not in params]
                if missing:
                    raise ValueError(f"{type(self).__name__}: the checkpoint's param group of {missing} names "
                                     f"parameters {type(module).__name__} does not have; resume with the same model.")
                optimizer.add_param_group({**group, "params": [params[n] for n in group["params"]]})

    # -- helpers (static, as in Lightning: subclasses and scripts call them on the class) ---------------------------
    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf modules of ``modules`` (a module, or nested iterables of them), and every module that holds
        parameters of its own beside its children."""
        if isinstance(modules, nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, nn.Module):
            found: Iterable[nn.Module] = modules.modules()
        elif isinstance(modules, Iterable):
            found = [leaf for m in modules for leaf in BaseFinetuning.flatten_modules(m)]
        else:
            raise TypeError(f"Expected a torch.nn.Module or an iterable of modules, got {type(modules).__name__} "
                            f"({modules!r}).")
        return [m for m in found if next(m.children(), None) is None or next(m.parameters(recurse=False), None)
                is not None]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[nn.Parameter]:
        """The parameters of ``modules`` whose ``requires_grad`` equals ``requires_grad``; BatchNorm layers' left out
        when ``train_bn=False``."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):  # a parent's own only: its children are listed too
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Thaws ``modules``: their parameters train and their BatchNorm layers track statistics again."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freezes the parameters ``module`` holds itself (not its children's); a BatchNorm layer also stops
        updating its running statistics."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freezes every parameter of ``modules``, except BatchNorm layers' when ``train_bn=True`` (these stay
        trainable and keep tracking statistics)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """``params`` without those already in a param group of ``optimizer`` (warns when there are some)."""
        present = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = list(params)
        kept = [p for p in params if id(p) not in present]
        if len(kept) < len(params):
            warnings.warn(
                "The provided params to be frozen already exist within another group of this optimizer: "
                f"{len(params) - len(kept)} of the parameters to thaw are already optimized by this "
                f"{type(getattr(optimizer, 'optimizer', optimizer)).__name__} and are left out of the new param "
                "group. Did you init your optimizer in configure_optimizers with all the module's parameters, frozen "
                "ones included? Pass only the trainable ones, e.g. "
                "SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=...).",
                UserWarning, stacklevel=user_stacklevel())
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(modules: Modules, optimizer: Optimizer, lr: float | None = None,
                                     initial_denom_lr: float = 10.0, train_bn: bool = True) -> None:
        """Thaws ``modules`` and adds their parameters that ``optimizer`` does not have yet as a new param group,
        with learning rate ``lr``, or without it the first group's rate divided by ``initial_denom_lr``.
        ``train_bn=False``: their BatchNorm layers' parameters stay out of the group."""
        BaseFinetuning.make_trainable(modules)
        rate = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        thawed = BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        params = BaseFinetuning.filter_on_optimizer(optimizer, thawed)
        if params:
            optimizer.add_param_group({"params": params, "lr": rate})


class BackboneFinetuning(BaseFinetuning):
    """Trains the module's ``backbone`` (an ``nn.Module`` attribute) from epoch ``unfreeze_backbone_at_epoch`` on, in
    its own param group (of each optimizer), at a rate that grows each epoch.

    At the unfreeze epoch the backbone's rate is ``backbone_initial_lr``, or the first group's rate times
    ``backbone_initial_ratio_lr``. At each later epoch ``e`` it is multiplied by ``lambda_func(e + 1)``; with
    ``should_align`` it never exceeds the first group's rate (it takes that rate once it would). ``train_bn``: the
    backbone's BatchNorm layers train too; ``verbose`` logs both rates (rounded to ``rounding`` digits) at each
    change. ``initial_denom_lr`` is handed to ``unfreeze_and_add_param_group`` (used there only without a rate).

    Example:
        >>> from stoker import Trainer
        >>> trainer = Trainer(callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=5, lambda_func=lambda e: 1.5)])
    """

    def __init__(self, unfreeze_backbone_at_epoch: int = 10, lambda_func: Callable[[int], float] = multiplicative,
                 backbone_initial_ratio_lr: float = 10e-2, backbone_initial_lr: float | None = None,
                 should_align: bool = True, initial_denom_lr: float = 10.0, train_bn: bool = True,
                 verbose: bool = False, rounding: int = 12) -> None:
        super().__init__()
        _check_arguments(unfreeze_backbone_at_epoch, lambda_func, backbone_initial_ratio_lr, backbone_initial_lr,
                         initial_denom_lr)
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None  # the backbone's rate set at the last epoch start

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.previous_backbone_lr = state_dict.get("previous_backbone_lr")

    def setup(self, trainer: TrainerView, pl_module: nn.Module, stage: str) -> None:
        backbone = getattr(pl_module, "backbone", None)
        if not isinstance(backbone, nn.Module):
            found = "has none" if backbone is None else f"has one of type {type(backbone).__name__}"
            # Missing: Lightning's MisconfigurationException, a ValueError in stoker; another type: a TypeError.
            error = ValueError if backbone is None else TypeError
            raise error(f"BackboneFinetuning trains the module's `backbone` attribute, an nn.Module, and "
                        f"{type(pl_module).__name__} {found}. Assign the layers to fine-tune to `self.backbone` in "
                        "__init__, or write a BaseFinetuning subclass for other layouts.")
        super().setup(trainer, pl_module, stage)

    def freeze_before_training(self, pl_module: nn.Module) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: nn.Module, epoch: int, optimizer: Optimizer) -> None:
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            rate = self.backbone_initial_lr
            rate = current_lr * self.backbone_initial_ratio_lr if rate is None else rate
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, rate, train_bn=self.train_bn,
                                              initial_denom_lr=self.initial_denom_lr)
        elif epoch > self.unfreeze_backbone_at_epoch:
            if self.previous_backbone_lr is None:
                raise RuntimeError(
                    f"BackboneFinetuning(unfreeze_backbone_at_epoch={self.unfreeze_backbone_at_epoch}): this fit "
                    f"reached epoch {epoch} without thawing the backbone (it started after the unfreeze epoch, from "
                    "a checkpoint without this callback's state). Resume from a checkpoint saved with this callback, "
                    "or lower unfreeze_backbone_at_epoch.")
            rate = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and rate > current_lr:
                rate = current_lr
            optimizer.param_groups[-1]["lr"] = rate
        else:
            return
        self.previous_backbone_lr = rate
        if self.verbose:
            log.info(f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(rate, self.rounding)}")


def _check_arguments(epoch: Any, lambda_func: Any, ratio: Any, initial_lr: Any, denom: Any) -> None:
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise TypeError(f"BackboneFinetuning(unfreeze_backbone_at_epoch={epoch!r}) must be an int: the index of the "
                        "epoch whose start thaws the backbone (0 for the first epoch).")
    if epoch < 0:
        raise ValueError(f"BackboneFinetuning(unfreeze_backbone_at_epoch={epoch}) must be 0 or more: the index of "
                         "the epoch whose start thaws the backbone (0 for the first epoch).")
    if not callable(lambda_func):
        raise TypeError(f"BackboneFinetuning(lambda_func={lambda_func!r}) must be a function of the epoch that "
                        "returns the factor of the backbone's rate, e.g. lambda epoch: 1.5.")
    for name, value in (("backbone_initial_ratio_lr", ratio), ("backbone_initial_lr", initial_lr),
                        ("initial_denom_lr", denom)):
        if value is None and name == "backbone_initial_lr":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
            raise TypeError(f"BackboneFinetuning({name}={value!r}) must be a number.")
        if value < 0 or (value == 0 and name == "initial_denom_lr"):
            raise ValueError(f"BackboneFinetuning({name}={value!r}) must be a positive number.")
