"""`TrainingModule`: a ``torch.nn.Module`` that also says how to train, evaluate and log itself.

Owns: the step methods users override, ``log``/``log_dict`` (forwarded to the Trainer's results, see
``logging.py``) and the convenience properties (``save_hyperparameters``: ``hparams.py``'s mixin). Does not own: when anything runs
(``loops.py``) or how logged values are reduced (``logging.py``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .class_only import class_only
from .hparams import HyperparametersMixin
from .logging import check_log_scope, warn_outside_run, warn_without_logger
from .module_runtime import RuntimeFacts
from .step_hooks import StepHooks
from .strict_loading import StrictLoading


class TrainingModule(HyperparametersMixin, StrictLoading, RuntimeFacts, StepHooks):
    """Your model plus how to train it: subclass it and write ``training_step`` and ``configure_optimizers``.

    ``training_step`` returns a loss tensor (a per-batch *mean*; accumulation windows average it over the
    micro-batches they hold) or a dict with ``"loss"``. ``{"loss": summed_loss, "num_items": n}`` asks for the
    exact per-item mean over the whole window and all processes (token losses with ragged batches).

    Example:
        >>> class Regressor(TrainingModule):
        ...     def __init__(self, lr: float = 1e-2):
        ...         super().__init__()
        ...         self.save_hyperparameters()
        ...         self.net = torch.nn.Linear(8, 1)
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         loss = torch.nn.functional.mse_loss(self.net(x), y)
        ...         self.log("train/loss", loss, prog_bar=True)
        ...         return loss
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        >>> Trainer(max_epochs=2).fit(Regressor(), loader)  # doctest: +SKIP

    Set ``automatic_optimization = False`` (class or instance attribute) to step the optimizers yourself in
    ``training_step`` with ``self.optimizers()``, ``self.manual_backward(loss)`` and ``opt.step()`` (see
    ``stoker/trainer/manual.py`` for the rules).
    """

    #: False: ``training_step`` does its own backward and optimizer steps (manual optimization).
    automatic_optimization: bool = True
    #: The key of the saved hyperparameters in the checkpoint dict the ``on_*_checkpoint`` hooks see.
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    # Not compiled by torch.jit.script (to_torchscript): they read the Trainer, which is no part of the model.
    __jit_unused_properties__ = ["trainer", "device", "global_rank", "local_rank", "global_step", "current_epoch",
                                 "logger", "loggers", "example_input_array", "hparams_initial", "strict_loading",
                                 "dtype", "on_gpu"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Plain attributes (not submodules): the Trainer is not part of the model's state.
        object.__setattr__(self, "_trainer", None)
        object.__setattr__(self, "_example_input_array", None)
        object.__setattr__(self, "_requires_grad_state", {})

    def __getstate__(self) -> dict[str, Any]:
        # copy.deepcopy / pickle of a module must not drag its Trainer (loggers, loaders, open files) along.
        state = dict(super().__getstate__())
        state["_trainer"] = None
        return state

    # -- steps (override these) -----------------------------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Returns the loss of one batch: a scalar tensor, or a dict with ``"loss"`` (and optionally ``"num_items"``)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not define training_step(self, batch, batch_idx); Trainer.fit needs it to "
            "return the batch's loss."
        )

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluates one validation batch (log metrics with ``self.log``). Optional."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluates one test batch. Optional."""

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        """Returns the prediction for one batch; the default is ``self(batch)`` (``dataloader_idx`` is passed when
        ``predict`` reads several loaders)."""
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Returns an optimizer, ``(optimizer, scheduler)``, or ``{"optimizer": ..., "lr_scheduler": ...}``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not define configure_optimizers(); Trainer.fit needs it to return an "
            "optimizer, e.g. `return torch.optim.AdamW(self.parameters(), lr=1e-3)`."
        )

    # -- logging ----------------------------------------------------------------------------------------------------
    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: str = "mean",
            enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: Any = None,
            add_dataloader_idx: bool = True, batch_size: int | None = None, metric_attribute: str | None = None,
            rank_zero_only: bool = False) -> None:
        """Records a metric for the loggers, the progress bar and callbacks (``trainer.callback_metrics``).

        Args (Lightning's, in its order):
            name, value: The metric's name; a number, a scalar tensor or a torchmetrics ``Metric`` (reset each epoch).
            prog_bar, logger: Show it on the progress bar; send it to the loggers (None: True; True, no logger: warns).
            on_step, on_epoch: Log this step's value; reduce it over the epoch. Default: a step value in a training
                batch, an epoch value elsewhere. With both, the names get ``_step`` / ``_epoch`` suffixes.
            reduce_fx: ``"mean"`` (weighted by ``batch_size``), ``"sum"``, ``"max"`` or ``"min"``; sync_dist: also
                across processes (a mean weighted by every process's batch sizes).
            add_dataloader_idx: With several evaluation loaders, add ``/dataloader_idx_{i}`` (False: the name as given).
            batch_size: The value's weight in an epoch mean (inferred from the batch when omitted).
            enable_graph, metric_attribute: No effect. sync_dist_group: None only. rank_zero_only: no ``sync_dist``.
        """
        trainer = self._trainer
        if trainer is None:
            return warn_outside_run(type(self).__name__, name)
        if rank_zero_only or sync_dist_group is not None:
            check_log_scope(name, sync_dist, sync_dist_group, rank_zero_only)
        if logger is True:  # given explicitly (the default is None): nothing more on the per-step path
            warn_without_logger(name, trainer.loggers)
        trainer.results.log(name, value, on_step, on_epoch, prog_bar, True if logger is None else logger, reduce_fx,
                            sync_dist, batch_size, add_dataloader_idx)

    def log_dict(self, dictionary: Mapping[str, Any], prog_bar: bool = False, logger: bool | None = None,
                 on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: str = "mean",
                 enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: Any = None,
                 add_dataloader_idx: bool = True, batch_size: int | None = None, rank_zero_only: bool = False) -> None:
        """``self.log`` for every ``name: value`` of ``dictionary``, with the same options (in Lightning's order)."""
        if not isinstance(dictionary, Mapping):
            raise TypeError(f"log_dict expects a mapping of name -> value, got {type(dictionary).__name__}.")
        for name, value in dictionary.items():
            self.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist,
                     sync_dist_group, add_dataloader_idx, batch_size, None, rank_zero_only)

    # -- properties -----------------------------------------------------------------------------------------------
    @property
    def trainer(self) -> Any:
        """The Trainer running this module (raises when there is none)."""
        if self._trainer is None and not self.__dict__.get("_jit_is_scripting"):  # to_torchscript reads it
            raise RuntimeError(f"{type(self).__qualname__} is not attached to a `Trainer`: self.trainer exists only "
                               "while Trainer.fit/validate/test/predict runs it (and after).")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: object) -> None:
        # object.__setattr__: a Trainer is not a submodule (nn.Module's __setattr__ would try to register it).
        object.__setattr__(self, "_trainer", trainer)

    @property
    def device(self) -> torch.device:
        """Where the module's parameters are (the Trainer's device once attached)."""
        if self._trainer is not None:
            return self._trainer.accelerator.device
        for tensor in self.parameters():
            return tensor.device
        for tensor in self.buffers():
            return tensor.device
        return torch.device("cpu")

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes (0 without a Trainer)."""
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        """This process's rank on its node (0 without a Trainer)."""
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def global_step(self) -> int:
        """Optimizer steps applied so far (0 without a Trainer)."""
        return self._trainer.global_step if self._trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        """The current epoch (0 without a Trainer)."""
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger (None without a Trainer or loggers)."""
        return self._trainer.logger if self._trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's loggers (empty without a Trainer)."""
        return list(self._trainer.loggers) if self._trainer is not None else []

    @property
    def example_input_array(self) -> Any:
        """An example input of ``forward`` (a tensor, tuple or dict); ``ModelSummary`` shows in/out sizes with it."""
        return self._example_input_array

    @example_input_array.setter
    def example_input_array(self, value: Any) -> None:
        object.__setattr__(self, "_example_input_array", value)

    def configure_model(self) -> None:
        """Builds (parts of) the model at the start of every run, after ``setup``; return early once built."""

    def configure_callbacks(self) -> Any:
        """Callbacks this module brings (a Callback or a list); merged into the Trainer's at each run, where one of
        the same type replaces the Trainer's. Default: none."""
        return []

    # Lightning's loader hooks, defined here to be overridden: the Trainer asks for one only when the subclass (or
    # the instance) defines it, so these bodies run only when called directly.
    def train_dataloader(self) -> Any:
        """The training loader(s) ``fit`` uses when given none: a DataLoader, a list or dict of them, an iterable."""
        raise NotImplementedError(f"{type(self).__name__} defines no train_dataloader(); define it, or pass loaders.")

    def val_dataloader(self) -> Any:
        """The validation loader(s) ``fit``/``validate`` use when given none (asked for at the first validation)."""
        raise NotImplementedError(f"{type(self).__name__} defines no val_dataloader(); define it, or pass loaders.")

    def test_dataloader(self) -> Any:
        """The loader(s) ``test`` uses when given none."""
        raise NotImplementedError(f"{type(self).__name__} defines no test_dataloader(); define it, or pass loaders.")

    def predict_dataloader(self) -> Any:
        """The loader(s) ``predict`` uses when given none."""
        raise NotImplementedError(f"{type(self).__name__} defines no predict_dataloader(); define it, or pass "
                                  "loaders.")

    # -- manual optimization (automatic_optimization = False; see manual.py) -------------------------------------
    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The prepared optimizer (one) or list of them; wrapped so ``step()`` counts as a ``global_step``."""
        trainer = self.trainer
        run = getattr(trainer, "fit_run", None)  # the fit's run (trainer/run.py) holds the wrappers
        opts = run.manual_optimizers if use_pl_optimizer and run is not None else None
        if opts is None or len(opts) != len(trainer.prepared_optimizers):
            opts = list(trainer.prepared_optimizers if use_pl_optimizer else trainer.optimizers)
        return opts[0] if len(opts) == 1 else opts

    def lr_schedulers(self) -> Any:
        """The scheduler (one), a list of them, or None; under manual optimization step them yourself.

        Your own scheduler objects, as in Lightning, so ``isinstance(sch, ReduceLROnPlateau)`` holds (the Trainer's
        configs hold them as ``configure_optimizers`` returned them)."""
        schedulers = [c.scheduler for c in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward of ``loss`` through the Accelerator (fp16 scaling), with the backward hooks around it; ``args``
        and ``kwargs`` go to :meth:`backward`. Runs ``Trainer.manual_backward`` (``stoker.Trainer``: through
        ``trainer.strategy.backward``, as in Lightning)."""
        self.trainer.manual_backward(loss, *args, **kwargs)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters require grad until :meth:`untoggle_optimizer` (GAN generator/critic)."""
        state: dict[torch.Tensor, bool] = {}
        for opt in self.trainer.optimizers:
            for group in opt.param_groups:
                for param in group["params"]:
                    if param not in state:
                        state[param] = param.requires_grad
                        param.requires_grad = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.requires_grad = state[param]
        object.__setattr__(self, "_requires_grad_state", state)

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Restores the ``requires_grad`` flags :meth:`toggle_optimizer` changed."""
        state = self._requires_grad_state
        for param, flag in state.items():
            param.requires_grad = flag
        object.__setattr__(self, "_requires_grad_state", {})

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """:meth:`toggle_optimizer` for the ``with`` block, then :meth:`untoggle_optimizer`."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    # -- loading --------------------------------------------------------------------------------------------------
    @class_only
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, map_location: Any = None, strict: bool | None = None,
                             *, hparams_file: str | os.PathLike | None = None, weights_only: bool | None = None,
                             **hparam_overrides: Any) -> Any:
        """Builds the module from its saved hyperparameters (``hparam_overrides`` win) and loads its weights
        (through the module's ``load_state_dict(state_dict, strict=...)``: an override of it sees the load).

        Args:
            checkpoint_path: A Trainer/ModelCheckpoint checkpoint folder, a ``save_model`` weights folder (e.g.
                ``ModelCheckpoint(export_weights=True)``'s ``weights/...``), a ``.safetensors`` file beside
                ``hparams.json``, or a single-file PyTorch checkpoint (a ``.ckpt`` written by Lightning: its
                ``state_dict`` and ``hyper_parameters``).
            map_location: Device for the weights (``"cpu"``, ``"cuda:0"``, a ``torch.device``); default: CPU.
            strict: Fail on missing or unexpected keys; None: the module's ``strict_loading`` (a value that
                contradicts a ``strict_loading`` the module sets is a ``ValueError``).
            hparams_file: Hyperparameters to build the module from instead of the saved ones, as in Lightning: a
                ``.yaml``/``.yml`` (e.g. the CSV logger's ``hparams.yaml``), ``.json`` or ``key,value`` ``.csv``.
            weights_only: Lightning's switch for ``torch.load``. A stoker checkpoint holds no pickled objects and
                is always read as plain data; a single-file checkpoint is read with ``torch.load(weights_only=True)``
                unless this is False (a full unpickle: only for a file you trust).
            **hparam_overrides: Constructor arguments that replace the saved ones.

        Example:
            >>> model = Regressor.load_from_checkpoint("checkpoints/last", lr=1e-3)  # doctest: +SKIP
        """
        from .loading import load_module

        return load_module(cls, checkpoint_path, map_location, strict, hparam_overrides, hparams_file, weights_only)

    # -- export ---------------------------------------------------------------------------------------------------
    def exporting(self) -> contextlib.AbstractContextManager[None]:
        """To trace the module yourself: eval mode, no grad, ``self.trainer`` None without a Trainer (then restored)."""
        from .export import exporting
        return exporting(self)

    def to_onnx(self, file_path: str | os.PathLike | Any | None = None, input_sample: Any = None,
                **kwargs: Any) -> Any:
        """Exports the module to ONNX with ``torch.onnx.export`` (needs ``onnx``, and ``onnxscript`` for torch's
        default exporter), in eval mode, on ``input_sample`` (default: ``example_input_array``) moved to the
        module's device; ``kwargs`` go to ``torch.onnx.export``. Returns what it returns.

        Example:
            >>> model.to_onnx("model.onnx", torch.randn(1, 64))  # doctest: +SKIP
        """
        from .export import to_onnx

        return to_onnx(self, file_path, input_sample, **kwargs)

    def to_torchscript(self, file_path: str | os.PathLike | None = None, method: str | None = "script",
                       example_inputs: Any = None, **kwargs: Any) -> Any:
        """The module as TorchScript (``method="script"``: ``torch.jit.script``; ``"trace"``: ``torch.jit.trace`` on
        ``example_inputs``, default ``example_input_array``), in eval mode; saved with ``torch.jit.save`` to
        ``file_path`` when given. (TorchScript is deprecated in recent torch: prefer ``to_onnx`` or ``torch.export``.)

        Example:
            >>> scripted = model.to_torchscript("model.pt")  # doctest: +SKIP
        """
        from .export import to_torchscript

        return to_torchscript(self, file_path, method, example_inputs, **kwargs)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only; while a progress bar is enabled, through its ``print``, so that
        the line goes above the bar instead of garbling it."""
        if self._trainer is not None:
            from stoker.callbacks.progress import ProgressBar  # lazy: the callbacks build on this module

            bar = next((c for c in self._trainer.callbacks if isinstance(c, ProgressBar) and c.is_enabled), None)
            if bar is not None:  # a bar's own `print` (a custom bar may override it); drawn on global zero only
                bar.print(*args, **kwargs)
            else:
                self._trainer.accelerator.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # -- hooks: no-ops here, see stoker/callbacks/base.py for when each runs ----------------------------------------
    def setup(self, stage: str) -> None: ...
    def teardown(self, stage: str) -> None: ...
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_exception(self, exception: BaseException) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
