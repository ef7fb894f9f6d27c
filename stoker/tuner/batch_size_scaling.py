"""The batch-size search (Lightning's ``scale_batch_size``): the largest batch size whose trial run does not run
out of memory.

Owns the two searches over trial results and what counts as out of memory. Each trial writes the size to the
module's (and/or data module's) batch-size attribute, so that the trial's ``fit`` (or ``validate`` / ``test`` /
``predict``) asks its loader hooks again and gets loaders of that size, and runs ``steps_per_trial`` steps
(``trial.py`` undoes it all). ``"power"`` doubles the size after each success and stops at the first failure
(answering the last size that fitted; before any success it halves instead); ``"binsearch"`` doubles likewise, then
bisects between the last success and the first failure, and answers its result less ``margin`` (a safety
allowance). Neither grows past ``max_val`` (8192 by default, as Lightning's; None: no such limit) or the length of
the dataset. The ``logging`` module's INFO lines (logger ``stoker.tuner.batch_size_scaling``) tell each trial's
outcome, each size the search moves on to and a size that reaches the dataset's length or ``max_val``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .trial import Trial, attribute_holders, check_count, set_attribute, stage_dataset_length
from ..trainer.stages import STAGES

if TYPE_CHECKING:
    from ..trainer import Trainer, TrainingModule

log = logging.getLogger(__name__)
MODES = ("power", "binsearch")
# The messages of allocators that ran out: CUDA's caching allocator, cuDNN's workspace, MPS.
_OOM_WORDS = ("out of memory", "CUDNN_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_SUPPORTED")


def is_oom_error(error: BaseException) -> bool:
    """Whether ``error`` says that a device ran out of memory (``torch.OutOfMemoryError`` or an allocator's
    ``RuntimeError``)."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and any(words in str(error) for words in _OOM_WORDS))


def power_search(fits: Callable[[int], int | None], size: int, max_trials: int) -> int:
    """``fits(size)``: None when the size ran out of memory, else the largest size worth trying (see module)."""
    last_fit = None
    for trial in range(max_trials):
        ceiling = fits(size)
        if ceiling is None:
            if last_fit is not None:
                return last_fit
            size = _shrinkable(size) // 2
            continue
        last_fit = size
        if trial + 1 == max_trials or size >= ceiling:
            break
        size = min(2 * size, ceiling)
    return size


def bisect_search(fits: Callable[[int], int | None], size: int, max_trials: int) -> int:
    """Grows like :func:`power_search` until a failure, then bisects between the last fit and the first failure;
    ``max_trials`` counts the sizes that fitted."""
    low, high, successes = 1, None, 0
    while successes < max_trials:
        ceiling = fits(size)
        if ceiling is None:
            high = _shrinkable(size)
            size = (low + high) // 2
            if high - low <= 1 and successes:
                break
            continue
        successes, low = successes + 1, size
        if successes == max_trials or size >= ceiling or (high is not None and high - low <= 1):
            break
        size = min(2 * size, ceiling) if high is None else (low + high) // 2
    return size


def _shrinkable(size: int) -> int:
    """``size``, which ran out of memory; an error when it cannot get smaller."""
    if size <= 1:
        raise RuntimeError("scale_batch_size: even batch size 1 runs out of memory; the model does not fit.")
    return size


def scale_batch_size(trainer: Trainer, module: TrainingModule, fn: str, loaders: dict[str, Any],
                     mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                     batch_arg_name: str = "batch_size", margin: float = 0.05, max_val: int | None = 8192
                     ) -> int | None:
    """Searches (module docstring), writes the size found to ``batch_arg_name`` and returns it; the weights, RNG and
    Trainer are as before. ``loaders``: the keyword arguments of ``trainer.<fn>`` (only a data module: the
    loaders must come from hooks that read the attribute)."""
    if trainer.dry_run:
        warnings.warn("Skipping batch size scaler since `fast_dev_run` is enabled.", UserWarning, stacklevel=3)
        return None
    _check(trainer, mode, steps_per_trial, init_val, max_trials, margin, max_val)
    holders = attribute_holders(module, loaders.get("datamodule"), batch_arg_name)
    if not holders:
        raise ValueError(f"scale_batch_size(batch_arg_name={batch_arg_name!r}) found no such attribute on "
                         f"{type(module).__name__}, its hparams, or the data module; add it and let the loader "
                         "hooks read it.")
    _warn_if_twice(module, holders, batch_arg_name)
    cap = max_val or 2 ** 62
    limit = {"max_steps": steps_per_trial, "max_epochs": None, "limit_val_batches": steps_per_trial} if fn == "fit" \
        else {STAGES[fn].limit: steps_per_trial}
    tried: list[int] = []

    def fits(size: int) -> int | None:
        set_attribute(holders, batch_arg_name, size)
        if tried:  # one line per change of size, as the search moves on from the last result
            log.info("scale_batch_size: trying batch size %d.", size)
        tried.append(size)
        try:
            trial.run(fn, loaders, [], **limit)
        except BaseException as error:
            if not is_oom_error(error):
                raise
            log.info("scale_batch_size: batch size %d ran out of memory.", size)
            return None
        ceiling = min(cap, _fitted(size, stage_dataset_length(trainer, fn)) or cap)
        if size >= cap:
            log.info("scale_batch_size: batch size %d reaches max_val=%d; no larger size is tried.", size, cap)
        return ceiling

    size = min(init_val, cap)
    with Trial(trainer, module) as trial:
        if mode == "power":
            size = power_search(fits, size, max_trials)
        else:
            size = bisect_search(fits, size, max_trials)
            size = max(1, int(size * (1 - margin))) if max_trials else size
        set_attribute(holders, batch_arg_name, size)
        trial.keep_loaders(fn, loaders)
    return size


def _fitted(size: int, length: int | None) -> int | None:
    """Says that ``size`` fitted (and when it holds the whole dataset of ``length`` samples); gives ``length``."""
    log.info("scale_batch_size: batch size %d fits.", size)
    if length is not None and size >= length:
        # Lightning's sentence first (a script or test that reads the log for it finds it), then what it means
        log.info("The batch size %d is greater or equal than the length of your dataset: %d. (scale_batch_size: it "
                 "already holds the whole dataset; no larger size is tried.)", size, length)
    return length


def _warn_if_twice(module: TrainingModule, holders: list[Any], name: str) -> None:
    """The module has ``name`` both as an attribute and in its hparams: both get each size, but its loader hooks
    read one, and the other then holds a value no loader uses; say so, so that the user keeps one."""
    hparams = getattr(module, "hparams", None)
    if any(h is module for h in holders) and any(h is hparams for h in holders):
        warnings.warn(f"Field `model.{name}` and `model.hparams.{name}` are mutually exclusive! "  # Lightning's words
                      f"scale_batch_size: {type(module).__name__} has both `{name}` as an attribute and "
                      f"hparams[{name!r}]; each size tried is written to both, yet only the one its loader hooks "
                      "read takes effect. Keep one of them.", UserWarning, stacklevel=4)


def _check(trainer: Trainer, mode: str, steps: Any, init_val: Any, max_trials: Any, margin: Any, max_val: Any) -> None:
    if mode not in MODES:
        raise ValueError(f"`mode` should be either of ('power', 'binsearch'): scale_batch_size(mode={mode!r}) is not "
                         "a search.")
    for name, value, least in (("steps_per_trial", steps, 1), ("init_val", init_val, 1), ("max_trials", max_trials, 0),
                               ("max_val", 1 if max_val is None else max_val, 1)):
        check_count(f"scale_batch_size({name}=...)", value, least)
    if not 0 <= margin < 1:
        raise ValueError(f"scale_batch_size(margin={margin!r}) must be a fraction in [0, 1).")
    if trainer.accelerator.num_processes > 1:
        raise ValueError(f"scale_batch_size runs in one process; this Trainer has {trainer.accelerator.num_processes}"
                         " (each would meet its own out-of-memory at another size). Search with devices=1.")
