"""Checks of Lightning's ``Trainer`` arguments (the names ``stoker.Trainer`` takes beyond the core's): aliases,
arguments stoker does not take (with what to do instead), and the values of the Lightning-only options."""

from __future__ import annotations

import ast
import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

# flag and optional_int: the core's checks, which trainer.py here uses for Lightning's options too
from ...trainer.args import (accumulation_steps, clip_algorithm, clip_value, flag, is_int,  # noqa: F401
                             optional_int, positive_int)

Init = TypeVar("Init", bound=Callable[..., None])

# -- Lightning's names ------------------------------------------------------------------------------------------------
# Lightning argument -> the stoker argument it is an alias of (documented in README "Coming from Lightning").
ALIASES = {"accumulate_grad_batches": "accumulate", "gradient_clip_val": "clip_grad_norm / clip_grad_value"}
# Lightning arguments stoker does not take, with what to do instead (an unknown name gets a did-you-mean).
NOT_SUPPORTED = {
    "plugins": "precision and strategy are Trainer(precision=...) and Trainer(strategy=...)",
    "enable_autolog_hparams": "hyperparameters are logged when the module has hparams",
    "model_registry": "not supported",
}


# The values of those arguments that ask for nothing (Lightning's defaults): taken and ignored, so a script that
# spells its defaults out (plugins=None, enable_autolog_hparams=True) runs unchanged.
_INERT = {"plugins": (None, [], ()), "enable_autolog_hparams": (True,),
          "model_registry": (None,)}
# The value of each that a config written by Lightning's `--print_config` holds (stoker's CLI takes the keys).
INERT_DEFAULTS = {name: values[0] for name, values in _INERT.items()}
# Core arguments whose default Lightning spells None (a config file's null, `Trainer(default_root_dir=args.root)`):
# None given for one of them means its default, as in Lightning.
_NONE_IS_DEFAULT = ("default_root_dir", "val_check_interval", "log_every_n_steps")


def core_arguments(given: dict[str, Any], core_names: list[str], lightning_names: list[str]) -> dict[str, Any]:
    """The core Trainer's arguments among ``given``. Any other name is a TypeError (with a did-you-mean over both
    name sets), except a Lightning argument stoker does not take given a value that asks for nothing (``_INERT``)."""
    unknown = {name: value for name, value in given.items() if name not in core_names
               and not any(value is inert or (type(value) is type(inert) and value == inert)
                           for inert in _INERT.get(name, ()))}
    if unknown:
        raise unknown_arguments(unknown, core_names + lightning_names)
    return {name: value for name, value in given.items()
            if name in core_names and not (value is None and name in _NONE_IS_DEFAULT)}


def _close(name: str, candidates: list[str]) -> str:
    import difflib

    matches = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(m) for m in matches)}?" if matches else ""


def unknown_arguments(unknown: dict[str, Any], known: list[str]) -> TypeError:
    """The error for ``Trainer(**unknown)``: names it, with a did-you-mean over stoker's and Lightning's names."""
    name = sorted(unknown)[0]
    if name in NOT_SUPPORTED:
        return TypeError(f"Trainer({name}=...) is a Lightning argument stoker does not take: {NOT_SUPPORTED[name]}.")
    candidates = sorted(set(known) | set(NOT_SUPPORTED))
    others = f" (also unknown: {', '.join(sorted(unknown)[1:])})" if len(unknown) > 1 else ""
    return TypeError(f"Trainer() got an unknown argument {name!r}{others}.{_close(name, candidates)} The arguments "
                     "are stoker's names and Lightning's (README, 'Coming from Lightning').")


# barebones=True: what it turns off, and why each of these arguments cannot be on with it.
_BAREBONES_OFF = {
    "enable_checkpointing": "saving checkpoints", "logger": "loggers", "enable_progress_bar": "the progress bar",
    "enable_model_summary": "the model summary", "log_every_n_steps": "logging",
    "num_sanity_val_steps": "the sanity check", "fast_dev_run": "a debugging run", "detect_anomaly":
    "autograd's anomaly detection", "profiler": "profiling",
}


def barebones(core: dict[str, Any], lightning: dict[str, Any]) -> None:
    """``Trainer(barebones=True)``: a run that measures the loop's own overhead. Refuses every argument (in
    ``core`` or the Lightning-only ``lightning``) that would switch on one of the costs it removes, then turns
    them off in ``core``: no checkpoints, loggers, progress bar or model summary (``self.log`` is turned off by
    the caller's run options)."""
    from ...utilities.rank_zero import rank_zero_info

    given = {**lightning, **core}
    for name, what in _BAREBONES_OFF.items():
        value = given.get(name)
        if value is not None and value is not False and not (is_int(value) and value == 0):
            raise ValueError(f"`Trainer(barebones=True, {name}={value!r})` was passed: barebones turns off {what}, "
                             f"which costs time the run is meant to measure. Drop {name}, or barebones=True.")
    core.update(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    core.pop("log_every_n_steps", None)  # its 0 ("never") is not the core's value; nothing is logged anyway
    rank_zero_info("Trainer(barebones=True): checkpoints, loggers, self.log, the progress bar, the model summary and "
                   "the sanity check are off, to measure the training loop's own overhead.")


def env_defaults(class_name: str, names: list[str]) -> dict[str, Any]:
    """Lightning's environment defaults: ``PL_{CLASS}_{ARGUMENT}`` (e.g. ``PL_TRAINER_MAX_STEPS=7``) for each
    argument in ``names``, read as a Python literal (``"False"``, ``"7"``, ``"[0, 1]"``) or else kept as text. An unset
    or empty variable gives nothing; the caller lets arguments passed in code win over these."""
    found: dict[str, Any] = {}
    for name in names:
        text = os.environ.get(f"PL_{class_name.upper()}_{name.upper()}")
        if not text:
            continue
        try:
            found[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # not a literal: a string value
            found[name] = text
    return found


def defaults_from_environment(core_names: list[str]) -> Callable[[Init], Init]:
    """Decorates a Trainer's ``__init__``: ``PL_TRAINER_*`` variables (``PL_{CLASS}_*`` for a subclass) are the
    defaults of its arguments (``core_names`` plus its own keyword names), as Lightning reads them; an argument
    passed in code wins."""
    def decorate(init: Init) -> Init:
        @functools.wraps(init)
        def with_environment(self: Any, **arguments: Any) -> None:
            names = core_names + list(inspect.signature(init).parameters)[1:-1]
            init(self, **{**env_defaults(type(self).__name__, names), **arguments})

        return with_environment  # type: ignore[return-value]

    return decorate


def resolve_aliases(accumulate: int, clip_grad_norm: Any, clip_grad_value: Any, accumulate_grad_batches: Any,
                    gradient_clip_val: Any, gradient_clip_algorithm: Any) -> tuple[int, Any, Any]:
    """``(accumulate, clip_grad_norm, clip_grad_value)`` from stoker's names and Lightning's aliases.

    An alias together with its stoker name (set away from its default) is an error: the two would disagree.
    """
    if accumulate_grad_batches is not None:
        if accumulate != 1:
            raise ValueError(f"Trainer(accumulate={accumulate!r}, accumulate_grad_batches={accumulate_grad_batches!r})"
                             ": these are one setting under two names (accumulate_grad_batches is Lightning's name "
                             "for accumulate). Pass only one of them.")
        accumulate = accumulation_steps("accumulate_grad_batches", accumulate_grad_batches)
    algorithm = clip_algorithm(gradient_clip_algorithm)
    if gradient_clip_val is None or gradient_clip_val == 0:  # Lightning's 0 means no clipping too
        if algorithm is not None and gradient_clip_val is None:
            raise ValueError(f"Trainer(gradient_clip_algorithm={gradient_clip_algorithm!r}) without gradient_clip_val: "
                             "give the value to clip to, e.g. gradient_clip_val=1.0.")
        return accumulate, clip_grad_norm, clip_grad_value
    if clip_grad_norm is not None or clip_grad_value is not None:
        raise ValueError("Trainer(gradient_clip_val=...) is Lightning's name for clip_grad_norm (or clip_grad_value "
                         "with gradient_clip_algorithm='value'); it was passed together with clip_grad_norm/"
                         "clip_grad_value. Pass only one of them.")
    if algorithm == "value":
        return accumulate, None, clip_value("gradient_clip_val", gradient_clip_val)
    return accumulate, clip_value("gradient_clip_val", gradient_clip_val), None


def fast_dev_run(value: Any) -> int:
    """Lightning's ``fast_dev_run`` as a batch count: False/0 -> 0 (off), True -> 1, n -> n."""
    if value is True:
        return 1
    if value is False:
        return 0
    if not is_int(value) or value < 0:
        raise ValueError(f"fast_dev_run={value!r} is not a valid configuration. It should be >= 0. ("
                         f"Trainer(fast_dev_run={value!r}) must be True (1 batch), False, or an int >= 0: that many "
                         "batches of training and validation, without checkpoints or loggers.)")
    return value


def overfit_batches(value: Any) -> int | float:
    """``overfit_batches``: 0 (off), an int >= 1 (batches) or a float in (0, 1] (a fraction of each fit loader)."""
    if (is_int(value) and value >= 0) or (isinstance(value, float) and 0.0 <= value <= 1.0):
        return value
    raise ValueError(f"You have passed invalid value {value} for overfit_batches, it has to be in [0.0, 1.0] or an "
                     f"int. Trainer(overfit_batches={value!r}) must be an int >= 0 (that many batches of the train and "
                     "val loaders, read in order) or a float in [0.0, 1.0] (that fraction of them); 0 turns it off.")


def sanity_steps(value: Any, default: int | None) -> int | None:
    """``num_sanity_val_steps``: an int >= 0, or -1 (None here) for every validation batch; None: ``default``."""
    if value is None:
        return default
    if is_int(value) and value == -1:
        return None
    if not is_int(value) or value < 0:
        raise ValueError(f"Trainer(num_sanity_val_steps={value!r}) must be an int >= 0 (batches per val loader to "
                         "run before training; 0: none; 2 by default) or -1 (every batch).")
    return value


def max_time(value: Any) -> Any:
    """``max_time`` as a ``timedelta`` (``"DD:HH:MM:SS"``, a ``timedelta`` or a ``timedelta`` keyword dict)."""
    if value is None:
        return None
    from ...callbacks.timer import parse_duration

    try:
        return parse_duration(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"Trainer(max_time={value!r}): {error}") from error


def matmul_precision(value: Any) -> str | None:
    """``float32_matmul_precision``: None (leave torch's setting) or "highest" | "high" | "medium"."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in ("highest", "high", "medium"):
        raise ValueError(f"Trainer(float32_matmul_precision={value!r}) must be None (leave torch's setting), "
                         "'highest' (full fp32 matmuls), 'high' (TF32 on GPUs that have it) or 'medium' (bf16 "
                         "internally); see torch.set_float32_matmul_precision.")
    return value


def num_nodes(value: Any, processes_per_node: int) -> int:
    """Checks ``num_nodes`` against the launcher: more than one node needs ``torchrun --nnodes``."""
    value = positive_int("num_nodes", value)
    world = os.environ.get("WORLD_SIZE")
    if value > 1 and world is None:
        raise ValueError(f"Trainer(num_nodes={value}) needs a launcher that starts the processes on every node, e.g. "
                         f"`torchrun --nnodes={value} --nproc_per_node=N ... script.py` on each node.")
    if world is not None and value == 1:  # the default: the launcher decides how many nodes there are
        return max(1, int(world) // max(processes_per_node, 1))
    if world is not None and int(world) != value * processes_per_node:
        raise ValueError(f"Trainer(num_nodes={value}) with {processes_per_node} processes per node makes "
                         f"{value * processes_per_node} processes, but the launcher started WORLD_SIZE={world}. "
                         f"Pass num_nodes={max(1, int(world) // max(processes_per_node, 1))} or start as many nodes.")
    return value


def note_ambiguous_values(values: dict[str, Any]) -> None:
    """An info line for the values whose int and float spellings mean different things (1 batch or 100% of them,
    validation after every batch or at the epoch's end), as Lightning logs them."""
    from ...utilities.rank_zero import rank_zero_info

    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                 "overfit_batches"):
        value = values.get(name)
        if value == 1 and not isinstance(value, bool):
            what = "1 batch" if isinstance(value, int) else "100% of the batches"
            rank_zero_info(f"`Trainer({name}={value!r})` was configured so {what} per epoch will be used.")
    value = values.get("val_check_interval")
    if value == 1 and not isinstance(value, bool):
        when = "after every batch" if isinstance(value, int) else "at the end of the training epoch"
        rank_zero_info(f"`Trainer(val_check_interval={value!r})` was configured so validation will run {when}.")


def entry_flags(fn: str, verbose: Any = False, weights_only: Any = None) -> None:
    """``verbose`` and ``weights_only`` of ``Trainer.fit/validate/test/predict``: bools (``weights_only`` may be None).
    ``weights_only`` is Lightning's ``torch.load`` switch: taken for its signature (a stoker checkpoint is never
    unpickled; a single-file checkpoint given to an evaluation is read with ``weights_only=True``)."""
    if not isinstance(verbose, bool):
        raise TypeError(f"Trainer.{fn}(verbose={verbose!r}) must be True or False.")
    if weights_only is not None and not isinstance(weights_only, bool):
        raise TypeError(f"Trainer.{fn}(weights_only={weights_only!r}) must be True, False or None.")
