"""Validation of ``Trainer(...)`` arguments: once, where they enter, with messages that say how to fix them."""

from __future__ import annotations

import math
from typing import Any

from ..accelerator import check_accumulation_steps, check_seed


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def optional_int(name: str, value: Any, minimum: int, none_aliases: tuple = ()) -> int | None:
    """``value`` as an int >= ``minimum``, or None (also for any of ``none_aliases``, e.g. Lightning's -1)."""
    if value is None or (none_aliases and _is_int(value) and value in none_aliases):
        return None
    if not _is_int(value) or value < minimum:
        alias = f" (or {', '.join(map(str, none_aliases))})" if none_aliases else ""
        raise ValueError(f"Trainer({name}={value!r}) must be None{alias} or an int >= {minimum}.")
    return value


def positive_int(name: str, value: Any) -> int:
    if not _is_int(value) or value < 1:
        raise ValueError(f"Trainer({name}={value!r}) must be an int >= 1.")
    return value


def accumulation_steps(name: str, value: Any) -> int:
    """``Trainer(accumulate=...)`` (or Lightning's ``accumulate_grad_batches``): the engine's one check of the
    window length, so the Trainer, the Accelerator and ``stoker launch`` refuse the same values alike."""
    return check_accumulation_steps(value, argument=f"Trainer({name}=...)")


def clip_value(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise ValueError(f"Trainer({name}={value!r}) must be None (no clipping) or a finite number > 0.")
    return float(value)


def clip_algorithm(value: Any, argument: str = "Trainer(gradient_clip_algorithm=...)") -> str | None:
    """Lightning's ``gradient_clip_algorithm``: None (the default, "norm"), "norm" or "value" (any case), lowered.

    One check for both places it enters: ``Trainer(gradient_clip_algorithm=...)`` and the module's
    ``clip_gradients(..., gradient_clip_algorithm=...)`` (``argument`` names which, ``...`` standing for the value).
    """
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in ("norm", "value"):
        return value.lower()
    raise ValueError(f"{argument.replace('...', repr(value))} must be 'norm' (the default: clip the gradients' total "
                     "norm) or 'value' (clamp each element).")


def batch_limit(name: str, value: Any) -> int | float | None:
    """None (all batches), an int count >= 0, or a fraction in [0, 1] (1.0 means all)."""
    if value is None:
        return None
    if _is_int(value):
        if value < 0:
            raise ValueError(f"Trainer({name}={value!r}) must be >= 0: a number of batches, or a fraction in [0, 1].")
        return value
    if isinstance(value, float) and 0.0 <= value <= 1.0:
        return None if value == 1.0 else value
    raise ValueError(f"Trainer({name}={value!r}) must be None (all batches), an int number of batches, or a float "
                     "fraction of the loader in [0.0, 1.0].")


def resolve_limit(name: str, limit: int | float | None, length: int | None) -> int | None:
    """The number of batches to run per epoch for a loader of ``length`` (None: all, length unknown or not)."""
    if limit is None:
        return None
    if isinstance(limit, float):
        if length is None:
            raise ValueError(f"Trainer({name}={limit!r}) is a fraction, but the loader has no length (an iterable "
                             "dataset). Give an int number of batches instead.")
        return int(length * limit)
    return limit


def val_check_interval(value: Any) -> int | float:
    if _is_int(value) and value >= 1:
        return value
    if isinstance(value, float) and 0.0 < value <= 1.0:
        return value
    raise ValueError(f"Trainer(val_check_interval={value!r}) must be a float in (0.0, 1.0] (a fraction of the "
                     "training epoch) or an int >= 1 (every that many training batches).")


def accelerator_choice(value: Any) -> bool:
    """Returns ``cpu`` (force CPU) for ``Trainer(accelerator=...)``."""
    import torch

    choices = ("auto", "cpu", "gpu", "cuda", "mps")
    key = value.lower() if isinstance(value, str) else None
    if key not in choices:
        raise ValueError(f"Trainer(accelerator={value!r}) is not an accelerator. Expected one of: "
                         + ", ".join(repr(c) for c in choices) + ".")
    if key in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(f"Trainer(accelerator={value!r}) but torch sees no CUDA device. Use accelerator='auto' or "
                         "'cpu', or install a CUDA build of torch.")
    if key == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError("Trainer(accelerator='mps') but MPS is not available here. Use 'auto' or 'cpu'.")
    return key == "cpu"


def seed_value(value: Any) -> int | None:
    """``Trainer(seed=...)``: None or an int (the engine's check, shared with ``set_seed``/``seed_everything``)."""
    return check_seed(value, argument="Trainer(seed=...)", allow_none=True)


# -- Lightning's names ------------------------------------------------------------------------------------------------
# Lightning argument -> the stoker argument it is an alias of (documented in README "Coming from Lightning").
ALIASES = {"accumulate_grad_batches": "accumulate", "gradient_clip_val": "clip_grad_norm / clip_grad_value"}
# Lightning arguments stoker does not take, with what to do instead (an unknown name gets a did-you-mean).
NOT_SUPPORTED = {
    "overfit_batches": "use limit_train_batches=n and the same loader for validation",
    "profiler": "use torch.profiler around trainer.fit",
    "plugins": "precision and strategy are Trainer(precision=...) and Trainer(strategy=...)",
    "sync_batchnorm": "convert the module with torch.nn.SyncBatchNorm.convert_sync_batchnorm before fit",
    "barebones": "stoker's default loop is already lean; pass logger=False, enable_progress_bar=False, "
                 "enable_checkpointing=False, enable_model_summary=False",
    "inference_mode": "evaluation runs under torch.no_grad()",
    "enable_autolog_hparams": "hyperparameters are logged when the module has hparams",
    "model_registry": "not supported",
}


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
    if not _is_int(value) or value < 0:
        raise ValueError(f"Trainer(fast_dev_run={value!r}) must be True (1 batch), False, or an int >= 0 (that many "
                         "batches of training and validation, without checkpoints or loggers).")
    return value


def sanity_steps(value: Any) -> int | None:
    """``num_sanity_val_steps``: an int >= 0, or -1 (None here) for every validation batch."""
    if _is_int(value) and value == -1:
        return None
    if not _is_int(value) or value < 0:
        raise ValueError(f"Trainer(num_sanity_val_steps={value!r}) must be an int >= 0 (batches per val loader to "
                         "run before training; 0: none, stoker's default) or -1 (every batch).")
    return value


def max_time(value: Any) -> Any:
    """``max_time`` as a ``timedelta`` (``"DD:HH:MM:SS"``, a ``timedelta`` or a ``timedelta`` keyword dict)."""
    if value is None:
        return None
    from ..callbacks.timer import parse_duration

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


def flag(name: str, value: Any, allow_none: bool = False) -> bool | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        raise TypeError(f"Trainer({name}={value!r}) must be True or False{' or None' if allow_none else ''}.")
    return value


def num_nodes(value: Any, processes_per_node: int) -> int:
    """Checks ``num_nodes`` against the launcher: more than one node needs ``torchrun --nnodes``."""
    import os

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
