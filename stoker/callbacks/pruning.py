"""`ModelPruning`: prunes the module's parameters with ``torch.nn.utils.prune`` at epoch ends, and resumes exactly.
Lightning's module path ``callbacks.pruning``.

At the end of each training epoch (or validation run, ``prune_on_train_epoch_end=False``; never in a sanity check) it
asks ``apply_pruning(epoch)`` whether to prune and ``amount(epoch)`` how much, and prunes ``parameters_to_prune``
(default: every layer's ``weight`` and ``bias``) with one of torch's methods, over all at once
(``use_global_unstructured``) or layer by layer. A pruned ``p`` becomes the parameter ``p_orig`` (the same
``nn.Parameter``: the optimizers keep it and its state), the buffer ``p_mask``, and ``p = p_orig * p_mask``,
recomputed before every forward. Masks only grow. The lottery ticket then resets the surviving entries to their values
at the fit's start (``resample_parameters``: to a fresh initialisation). ``make_pruning_permanent`` removes the
re-parametrization when training ends and keeps it out of checkpoints (their weights hold ``p``), so
``load_from_checkpoint`` builds a module without pruning.

Decided here, where Lightning differs (see ``docs/migrating/lightning.md``):

- **Resume is exact.** With ``make_pruning_permanent=False`` the weights hold ``p_orig`` and ``p_mask``; a hook of
  the Accelerator's ``load_state`` re-parametrizes the fresh module's parameters that the checkpoint holds so, before
  they load. With ``make_pruning_permanent=True`` a hook of ``save_state`` writes ``p`` in their place (and, during
  that save, ``module.state_dict()`` folds too, so the ``on_save_checkpoint`` hooks see what is written); the
  callback's state keeps each mask and the values ``p_orig`` holds under it, put back after the weights load (at
  ``on_fit_start``: a resume restores the callbacks' states before ``configure_optimizers``, as Lightning does). A
  checkpoint inside an accumulation window keeps the pair: its gradients are saved under the names ``p_orig``. The
  lottery ticket's starting values are in the state too (as large as the parameters pruned).
- **Importance is the parameters' current value**: torch would rank an already pruned parameter by its value in the
  last forward pass (before the last optimizer step; after a resume, before the checkpoint was loaded).
- **The lottery ticket resets to the starting values each time**, not to a copy that training has since changed.

Not with FSDP (torch prunes whole tensors). A random method draws from torch's generator: with several processes give
each the same seed (``seed_everything``). Cost: torch's forward pre-hook per pruned parameter (one multiply); pruning,
and with ``verbose`` its figures (one device sync each), at epoch ends only.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.utils.prune as torch_prune
from torch import nn

from stoker.callbacks.base import Callback, TrainerView
from stoker.callbacks.pruning_state import (fold, is_pruned, masks_of, remove_all, reparametrize_saved, restore_masks,
                                           trained_values)

__all__ = ["ModelPruning"]

log = logging.getLogger(__name__)

# torch's pruning functions by name (pruning layer by layer) and their method classes (pruning globally)
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ln_structured": torch_prune.ln_structured, "l1_unstructured": torch_prune.l1_unstructured,
    "random_structured": torch_prune.random_structured, "random_unstructured": torch_prune.random_unstructured}
_METHODS = {"ln_structured": torch_prune.LnStructured, "l1_unstructured": torch_prune.L1Unstructured,
            "random_structured": torch_prune.RandomStructured, "random_unstructured": torch_prune.RandomUnstructured}
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)

Target = tuple[nn.Module, str]


def _is_method(value: Any) -> bool:
    return inspect.isclass(value) and issubclass(value, torch_prune.BasePruningMethod)


def _check_choice(value: Any, argument: str) -> None:
    if not (isinstance(value, bool) or callable(value)):
        raise TypeError(f"ModelPruning({argument}={value!r}): expected a bool or a function of the epoch returning "
                        "one.")


class ModelPruning(Callback):
    """Prunes the module's parameters at epoch ends with ``torch.nn.utils.prune`` (see the module's docstring).

    Args:
        pruning_fn: ``"l1_unstructured"``, ``"random_unstructured"``, ``"ln_structured"``, ``"random_structured"``,
            or a ``torch.nn.utils.prune.BasePruningMethod`` subclass (the class; only with
            ``use_global_unstructured=True``).
        parameters_to_prune: ``(module, "weight")`` pairs; empty or None: ``parameter_names`` of every layer.
        parameter_names: ``"weight"`` and/or ``"bias"`` (default both), for the default ``parameters_to_prune``.
        use_global_unstructured: Rank all ``parameters_to_prune`` together (unstructured methods only).
        amount: A fraction (0 to 1) or a count of entries to prune, or a function of the epoch returning one.
        apply_pruning: Whether to prune at an epoch: a bool or a function of the epoch.
        make_pruning_permanent: Remove the re-parametrization when training ends, and keep it out of checkpoints.
        use_lottery_ticket_hypothesis: After pruning, reset the surviving entries to their starting values (a bool
            or a function of the epoch).
        resample_parameters: With the lottery ticket, reset to a fresh initialisation (``reset_parameters``) instead.
        pruning_dim: The dimension a structured method prunes along (required for them).
        pruning_norm: The norm of ``"ln_structured"`` (required for it).
        verbose: 0 silent; 1 logs the overall sparsity at each pruning; 2 also each parameter's (INFO records of the
            ``stoker.callbacks.pruning`` logger).
        prune_on_train_epoch_end: Prune at the training epoch's end; False: at the end of each validation run.

    Raises:
        TypeError: An argument of the wrong kind (e.g. a method instance rather than its class).
        ValueError: An impossible setting (an unknown method name, a structured method without ``pruning_dim``...).

    Example:
        >>> pruning = ModelPruning("l1_unstructured", amount=lambda epoch: 0.2 if epoch < 3 else 0)
        >>> trainer = Trainer(callbacks=[pruning], max_epochs=5)  # doctest: +SKIP
    """

    PARAMETER_NAMES = ("weight", "bias")

    def __init__(self, pruning_fn: Callable | str, parameters_to_prune: Sequence[Target] | None = (),
                 parameter_names: list[str] | None = None, use_global_unstructured: bool = True,
                 amount: float | Callable[[int], float] = 0.5,
                 apply_pruning: bool | Callable[[int], bool] = True, make_pruning_permanent: bool = True,
                 use_lottery_ticket_hypothesis: bool | Callable[[int], bool] = True,
                 resample_parameters: bool = False, pruning_dim: int | None = None, pruning_norm: int | None = None,
                 verbose: int = 0, prune_on_train_epoch_end: bool = True) -> None:
        self._parameter_names = tuple(parameter_names or self.PARAMETER_NAMES)
        unknown = [n for n in self._parameter_names if n not in self.PARAMETER_NAMES]
        if unknown:
            raise ValueError(f"ModelPruning(parameter_names=...): {unknown[0]} isn't in {self.PARAMETER_NAMES}; "
                             "torch prunes a layer's weight or bias.")
        self._use_global_unstructured, self._structured = use_global_unstructured, False
        self.pruning_fn = self._resolve_method(pruning_fn, pruning_dim, pruning_norm)
        if isinstance(amount, bool) or not (isinstance(amount, (int, float)) or callable(amount)):
            raise TypeError(f"ModelPruning(amount={amount!r}): expected an int, a float or a function of the epoch.")
        if isinstance(amount, (int, float)) and (amount < 0 or isinstance(amount, float) and amount > 1):
            raise ValueError(f"ModelPruning(amount={amount}): a fraction is between 0 and 1, a count at least 0.")
        if verbose not in (0, 1, 2):
            raise ValueError(f"ModelPruning(verbose={verbose!r}): verbose must be any of (0, 1, 2).")
        _check_choice(apply_pruning, "apply_pruning")
        _check_choice(use_lottery_ticket_hypothesis, "use_lottery_ticket_hypothesis")
        self.amount, self._apply_pruning, self._verbose = amount, apply_pruning, verbose
        self._make_pruning_permanent = make_pruning_permanent
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        self._requested = self._check_targets(parameters_to_prune)
        self._parameters_to_prune: list[Target] = list(self._requested)
        self._initial: dict[str, torch.Tensor] = {}  # the lottery ticket's starting values, by state-dict name
        self._masks: dict[str, Any] = {}  # restored masks (make_pruning_permanent), put back once the weights load
        self._layers: dict[int, nn.Module] = {}  # with resample_parameters: copies of the target layers, by id
        self._module: nn.Module | None = None
        self._trainer: TrainerView | None = None
        self._hooks: list[Any] = []
        self._view_hook: Any = None  # during a save that folds: module.state_dict() folds too (the hooks' view)
        self._keys: list[str] = []  # each target's state-dict name in the module (``layer.mlp_1.weight``)

    @property
    def state_key(self) -> str:
        """Distinct for callbacks of different methods, so that two of them (pruning by turns) keep their states."""
        return self._generate_state_key(pruning_fn=self._method_name)

    # -- arguments ----------------------------------------------------------------------------------------------
    def _resolve_method(self, pruning_fn: Any, dim: int | None, norm: int | None) -> Any:
        """The function (layer by layer) or method class (global) that prunes; its name for the log."""
        if isinstance(pruning_fn, str):
            key = pruning_fn.lower()
            if key not in _FUNCTIONS:
                raise ValueError(f"ModelPruning(pruning_fn={pruning_fn!r}): `pruning_fn` is expected to be a str in "
                                 f"{list(_FUNCTIONS)} or a torch BasePruningMethod subclass.")
            kwargs: dict[str, Any] = {}
            if key.endswith("_structured"):
                if dim is None:
                    raise ValueError(f"ModelPruning({key!r}): pruning_dim should be provided for structured pruning.")
                if key == "ln_structured" and norm is None:
                    raise ValueError("ModelPruning: when requesting `ln_structured` pruning, the `pruning_norm` "
                                     "should be provided (e.g. 1 or 2).")
                kwargs = {"dim": dim, **({"n": norm} if key == "ln_structured" else {})}
            self._structured = key.endswith("_structured")
            method: Any = _METHODS[key] if self._use_global_unstructured else partial(_FUNCTIONS[key], **kwargs)
            self._method_name = _METHODS[key].__name__ if self._use_global_unstructured else key
        elif _is_method(pruning_fn):
            if not self._use_global_unstructured:
                raise ValueError(f"ModelPruning({pruning_fn.__name__}): a BasePruningMethod class is currently only "
                                 "supported with use_global_unstructured=True.")
            method, self._method_name = pruning_fn, pruning_fn.__name__
        else:
            hint = " (pass the class, not an instance)" if isinstance(pruning_fn, torch_prune.BasePruningMethod) else ""
            raise TypeError(f"ModelPruning(pruning_fn={pruning_fn!r}): `pruning_fn` is expected to be a str in "
                            f"{list(_FUNCTIONS)} or a torch BasePruningMethod subclass{hint}.")
        if self._use_global_unstructured and getattr(method, "PRUNING_TYPE", None) != "unstructured":
            raise ValueError(f"ModelPruning({self._method_name}): only an 'unstructured' method is supported with "
                             "`use_global_unstructured=True`; pass use_global_unstructured=False to prune layer by "
                             "layer.")
        return method

    @staticmethod
    def _check_targets(targets: Any) -> list[Target]:
        if targets is None:
            return []
        if not isinstance(targets, (list, tuple)) or not all(
                isinstance(t, (list, tuple)) and len(t) == 2 and isinstance(t[0], nn.Module) and isinstance(t[1], str)
                for t in targets):
            raise TypeError(f"ModelPruning(parameters_to_prune={targets!r}): expected a list of (nn.Module, "
                            "'parameter_name') pairs, or nothing for every layer's weight and bias.")
        return [(m, n) for m, n in targets]

    @staticmethod
    def sanitize_parameters_to_prune(pl_module: nn.Module, parameters_to_prune: Sequence[Target] = (),
                                     parameter_names: Sequence[str] = ()) -> list[Target]:
        """``parameters_to_prune`` checked against ``pl_module``; empty: ``parameter_names`` of every layer (the
        module itself and plain containers aside) that has them as parameters.

        Raises:
            ValueError: a pair names a module outside ``pl_module`` or a parameter its module lacks.
        """
        names = tuple(parameter_names) or ModelPruning.PARAMETER_NAMES
        layers = [m for m in pl_module.modules() if m is not pl_module and not isinstance(m, _CONTAINERS)]
        if not parameters_to_prune:
            return [(m, n) for n in names for m in layers
                    if isinstance(getattr(m, n, None), nn.Parameter) or is_pruned(m, n)]
        known = {id(m) for m in layers}
        missing_modules = [m for m, _ in parameters_to_prune if id(m) not in known]
        missing = [n for m, n in parameters_to_prune if id(m) in known and not hasattr(m, n)]
        if missing_modules or missing:
            raise ValueError("ModelPruning: some provided `parameters_to_prune` don't exist in the model. Found "
                             f"missing modules: {missing_modules} and missing parameters: {missing}.")
        return list(parameters_to_prune)

    def filter_parameters_to_prune(self, parameters_to_prune: Sequence[Target] = ()) -> Sequence[Target]:
        """Override to choose which of the sanitized ``(module, name)`` pairs are pruned (default: all)."""
        return parameters_to_prune

    # -- setting up a fit ---------------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.accelerator.strategy.shards_parameters:
            raise ValueError("ModelPruning prunes whole parameters, which a strategy that shards them (FSDP) does not "
                             "hold; train with DDP or one device.")
        self._module, self._trainer = module, trainer
        targets = self.sanitize_parameters_to_prune(module, self._requested, self._parameter_names)
        self._parameters_to_prune = list(self.filter_parameters_to_prune(targets))
        prefixes = {id(m): name for name, m in module.named_modules()}  # pruning never adds modules: found once
        self._keys = [f"{prefixes[id(m)]}.{n}" if prefixes[id(m)] else n for m, n in self._parameters_to_prune]
        flat = [key for key, (m, n) in zip(self._keys, self._parameters_to_prune) if trained_values(m, n).dim() < 2]
        if self._structured and flat:
            raise ValueError(f"ModelPruning({self._method_name!r}): structured pruning removes whole rows or columns, "
                             f"so it needs parameters of 2 or more dimensions; {flat} have 1. Pass "
                             "parameter_names=['weight'] or choose parameters_to_prune.")
        if self._use_lottery_ticket_hypothesis is not False and not self._resample_parameters:
            self._initial = {key: trained_values(m, n).detach().clone()
                             for key, (m, n) in zip(self._keys, self._parameters_to_prune)}
        if self._resample_parameters:  # plain copies to initialise afresh (their values are drawn again each time)
            self._layers = {id(m): copy.deepcopy(m) for m, _ in self._parameters_to_prune
                            if callable(getattr(m, "reset_parameters", None))}
        hooks = trainer.accelerator.checkpoint_hooks
        self._hooks = [hooks.register(hooks.save, self._fold_for_save, "ModelPruning"),
                       hooks.register(hooks.load, self._shape_for_load, "ModelPruning")]

    def teardown(self, trainer: TrainerView, module: Any, stage: str) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._end_folded_view()

    # -- pruning ------------------------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if self._prune_on_train_epoch_end:
            self._run_pruning(trainer.current_epoch, trainer.is_global_zero)

    def on_validation_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if not self._prune_on_train_epoch_end and not trainer.sanity_checking and trainer.fitting:
            self._run_pruning(trainer.current_epoch, trainer.is_global_zero)

    def _run_pruning(self, epoch: int, report: bool = True) -> None:
        prune = self._apply_pruning(epoch) if callable(self._apply_pruning) else self._apply_pruning
        amount = self.amount(epoch) if callable(self.amount) else self.amount
        if not prune or not amount:
            return
        self.apply_pruning(amount, report)
        lottery = self._use_lottery_ticket_hypothesis
        if lottery(epoch) if callable(lottery) else lottery:
            self.apply_lottery_ticket_hypothesis()

    def apply_pruning(self, amount: float, report: bool = True) -> None:
        """Prunes ``amount`` more of ``parameters_to_prune`` now (logging the sparsity with ``verbose``)."""
        before = self._sparsity() if self._verbose and report else []
        if self._use_global_unstructured:
            accepted = set(inspect.signature(self.pruning_fn).parameters) - {"self"}
            kwargs = {"amount": amount} if "amount" in accepted else {}
            ranks = {(m, n): trained_values(m, n).detach() for m, n in self._parameters_to_prune}
            torch_prune.global_unstructured(self._parameters_to_prune, pruning_method=self.pruning_fn,
                                            importance_scores=ranks, **kwargs)
        else:
            takes_scores = "importance_scores" in inspect.signature(self.pruning_fn).parameters
            for m, n in self._parameters_to_prune:
                scores = {"importance_scores": trained_values(m, n).detach()} if takes_scores else {}
                self.pruning_fn(m, name=n, amount=amount, **scores)
        if self._verbose and report:
            self._log_sparsity(before, self._sparsity(), amount)

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Resets the targets' surviving entries to their values at the fit's start (``resample_parameters``: to a
        fresh ``reset_parameters()`` of a copy of each layer, drawn layer by layer in the targets' order)."""
        fresh: dict[int, nn.Module] = {}
        for key, (m, n) in zip(self._keys, self._parameters_to_prune):
            if id(m) in self._layers:
                if id(m) not in fresh:  # a copy of the layer from the fit's start, initialised afresh
                    fresh[id(m)] = layer = copy.deepcopy(self._layers[id(m)])
                    layer.reset_parameters()  # type: ignore[operator]
                source = getattr(fresh[id(m)], n)
            else:
                source = self._initial[key]
            with torch.no_grad():
                trained_values(m, n).copy_(source)

    def _sparsity(self) -> list[tuple[int, int]]:
        """(pruned entries, entries) of each target: one device sync each."""
        return [(int((getattr(m, n + "_mask") == 0).sum()) if is_pruned(m, n) else 0, trained_values(m, n).numel())
                for m, n in self._parameters_to_prune]

    def _log_sparsity(self, before: list[tuple[int, int]], after: list[tuple[int, int]], amount: float) -> None:
        total = sum(size for _, size in after) or 1
        was, now = sum(z for z, _ in before), sum(z for z, _ in after)
        log.info(f"Applied `{self._method_name}`. Pruned: {was}/{total} ({was / total:.2%}) -> {now}/{total} "
                 f"({now / total:.2%})")
        if self._verbose == 2:
            for (m, n), (z0, size), (z1, _) in zip(self._parameters_to_prune, before, after):
                log.info(f"Applied `{self._method_name}` to `{m!r}.{n}` with amount={amount}. Pruned: {z0} "
                         f"({z0 / size:.2%}) -> {z1} ({z1 / size:.2%})")

    # -- the end of training ------------------------------------------------------------------------------------
    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        if self._make_pruning_permanent:
            self.make_pruning_permanent(module)

    def make_pruning_permanent(self, module: nn.Module) -> None:
        """Removes the re-parametrization of every pruned parameter in ``module``: ``p`` is a parameter again,
        holding ``p_orig * p_mask``."""
        remove_all(module)

    # -- checkpoints --------------------------------------------------------------------------------------------
    def _model_index(self, models: list[nn.Module]) -> int | None:
        assert self._trainer is not None
        found = [i for i, m in enumerate(models) if self._trainer.accelerator.unwrap_model(m) is self._module]
        return found[0] if found else None

    def _fold_for_save(self, models: list[nn.Module], weights: list[dict[str, torch.Tensor]], output_dir: str) -> None:
        """``save_state`` pre-hook: with ``make_pruning_permanent``, the weights written hold ``p = p_orig * p_mask``
        in place of the pair (the pair itself is in this callback's state). Not inside an open accumulation window:
        its gradients are saved under the parameters' names (``p_orig``), so the pair stays for them to load into."""
        index = self._model_index(models)
        if not self._make_pruning_permanent or index is None or index >= len(weights):
            return
        assert self._trainer is not None
        if not self._trainer.window_closed and any(getattr(m, n + "_orig").grad is not None
                                                   for m, n in self._parameters_to_prune if is_pruned(m, n)):
            return
        fold(weights[index], self._keys)
        if self._view_hook is None and self._module is not None:  # the hooks' checkpoint["state_dict"] shows it too
            keys = self._keys

            def fold_view(module: nn.Module, state_dict: dict[str, Any], prefix: str, metadata: Any) -> None:
                fold(state_dict, [prefix + key for key in keys])

            self._view_hook = self._module.register_state_dict_post_hook(fold_view)  # (torch marks the function)

    def _end_folded_view(self) -> None:
        if self._view_hook is not None:
            self._view_hook.remove()
            self._view_hook = None

    def on_save_checkpoint(self, trainer: TrainerView, module: Any, checkpoint: dict[str, Any]) -> None:
        self._end_folded_view()  # the save's view was built before the hooks ran

    def on_train_batch_start(self, trainer: TrainerView, module: Any, batch: Any, batch_idx: int) -> None:
        self._end_folded_view()  # a save that failed before its hooks ran

    def _shape_for_load(self, models: list[nn.Module], input_dir: str) -> None:
        """``load_state`` pre-hook: re-parametrizes the parameters the checkpoint's weights hold pruned
        (``p_orig`` and ``p_mask``), so that they load into the same shape."""
        from stoker.accelerator import checkpoint_weight_names

        index = self._model_index(models)
        if index is not None and self._module is not None:
            reparametrize_saved(self._module, checkpoint_weight_names(input_dir, index), self._keys)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self._initial:
            state["initial"] = dict(self._initial)
        if self._make_pruning_permanent and self._module is not None:
            state.update(masks_of(self._module, self._keys))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Takes the starting values back; the parameters the checkpoint saved as ``p`` are re-parametrized once the
        weights have loaded (``on_fit_start``: a resume restores the callbacks' states before the weights)."""
        if "initial" in state_dict:
            self._initial = {key: value.clone() for key, value in state_dict["initial"].items()}
        self._masks = {key: state_dict[key] for key in ("masks", "hidden") if key in state_dict}

    def on_fit_start(self, trainer: TrainerView, module: Any) -> None:
        if self._masks and self._module is not None:
            restore_masks(self._module, self._masks)
        self._masks = {}
