"""``seed_everything``: Lightning's name for seeding every random number generator, on stoker's ``set_seed``.

Owns: choosing the seed (the argument, else the ``STOKER_GLOBAL_SEED`` or ``PL_GLOBAL_SEED`` environment variable,
else 0), checking it, and recording it in ``STOKER_GLOBAL_SEED`` so that processes started later (the workers a
``Trainer(devices=N)`` launches, subprocesses) can call ``seed_everything()`` and get the same seed. The seeding
itself is :func:`stoker.set_seed` (python ``random``, numpy, torch on every device).
"""

from __future__ import annotations

import os
import warnings

from ...accelerator import check_seed, set_seed

__all__ = ["seed_everything"]

#: The variable ``seed_everything`` writes and reads first; Lightning's ``PL_GLOBAL_SEED`` is read after it.
SEED_ENV = "STOKER_GLOBAL_SEED"
LIGHTNING_SEED_ENV = "PL_GLOBAL_SEED"
#: Lightning's record of ``seed_everything(workers=...)``, which its worker-seeding helpers read.
SEED_WORKERS_ENV = "PL_SEED_WORKERS"
_MAX_SEED = 2**32 - 1  # numpy's limit: a seed every generator accepts as it is


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seeds python's ``random``, numpy and torch (CPU and every CUDA device) with one seed, and returns it.

    Args:
        seed: An int in ``[0, 2**32 - 1]``. ``None`` reads ``STOKER_GLOBAL_SEED``, then Lightning's
            ``PL_GLOBAL_SEED``; with neither set it uses 0 and warns (as Lightning 2.x does).
        workers: Loaders prepared by the Trainer or the Accelerator always seed their worker processes (each
            epoch's workers get python, numpy and torch seeds derived from the loader's seed, drawn from the seeded
            global generator when the loader is prepared, the epoch and the worker's index), so stoker needs no
            flag. The choice is recorded in ``PL_SEED_WORKERS`` ("1" / "0"), the variable Lightning's own worker
            helpers read, so that loaders a ported script builds with them behave as under Lightning.

    Returns:
        The seed used. It is also written to ``os.environ["STOKER_GLOBAL_SEED"]``.

    Raises:
        ValueError: ``seed`` (or the environment variable) is not an int in ``[0, 2**32 - 1]``.
        TypeError: ``seed`` is not an int (a bool is not accepted either).

    Example:
        >>> seed_everything(42)
        42
        >>> os.environ["STOKER_GLOBAL_SEED"]
        '42'
    """
    if seed is None:
        seed = _seed_from_environment()
    else:
        check_seed(seed, argument="seed_everything(seed=...)", allow_none=True, example="seed_everything(42)")
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed_everything(seed={seed}) is out of range: numpy accepts seeds in [0, {_MAX_SEED}]. "
                         "Pass a seed in that range.")
    set_seed(seed)
    os.environ[SEED_ENV] = str(seed)
    os.environ[SEED_WORKERS_ENV] = str(int(bool(workers)))
    return seed


def _seed_from_environment() -> int:
    for name in (SEED_ENV, LIGHTNING_SEED_ENV):
        text = os.environ.get(name)
        if text is None:
            continue
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"seed_everything() found {name}={text!r} in the environment, which is not an int. Set "
                             f"it to an int in [0, {_MAX_SEED}] or pass seed_everything(seed=...).") from None
    warnings.warn(f"seed_everything(): no seed given and neither {SEED_ENV} nor {LIGHTNING_SEED_ENV} is set; using "
                  "seed 0. Pass a seed to silence this.", UserWarning, stacklevel=3)
    return 0
