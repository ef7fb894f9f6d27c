"""Random number generator states of this process, as plain data that the safe tree format (``tree.py``) stores
without pickle.

Covers Python's ``random``, NumPy's global generator, torch's CPU generator and every CUDA (and MPS) device's
generator. Generators that belong to a data loader or sampler are not here: the prepared loader saves those
with its position (``data.py``).
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def capture_rng_state(cuda: bool = True) -> dict[str, Any]:
    """This process's RNG states: tuples, ints, strings, numpy arrays and uint8 tensors only. ``cuda=False`` leaves
    the CUDA generators out without touching CUDA (in a forked process, where initializing CUDA fails).

    Example:
        >>> state = capture_rng_state()
        >>> a = torch.rand(2); restore_rng_state(state); b = torch.rand(2)
        >>> torch.equal(a, b)
        True
    """
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=True),
        "torch": torch.get_rng_state(),
    }
    if cuda and torch.cuda.is_available():  # every visible device: a process may draw numbers on more than its own
        state["cuda"] = torch.cuda.get_rng_state_all()
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Puts back the states returned by :func:`capture_rng_state` (possibly after a save/load round-trip).

    Example:
        >>> restore_rng_state(load_tree("checkpoint_3/random_states_0.safetensors"))
    """
    if not isinstance(state, dict) or "torch" not in state:
        raise ValueError(f"Not an RNG state from capture_rng_state(): expected a dict with a 'torch' entry, got "
                         f"{type(state).__name__} with keys {sorted(state) if isinstance(state, dict) else None}.")
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        np.random.set_state(tuple(state["numpy"]))
    torch.set_rng_state(state["torch"].to("cpu", torch.uint8))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if count != len(cuda):
            warnings.warn(f"The checkpoint holds CUDA RNG states for {len(cuda)} devices but {count} are visible; "
                          f"restoring the first {min(count, len(cuda))}.", stacklevel=2)
        for device, s in enumerate(cuda[:count]):
            torch.cuda.set_rng_state(s.to("cpu", torch.uint8), device)
    elif cuda:
        warnings.warn("The checkpoint holds CUDA RNG states but CUDA is not available here; they are not restored "
                      "(CPU, Python and NumPy states are).", stacklevel=2)
    if "mps" in state and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"].to("cpu", torch.uint8))


@contextlib.contextmanager
def kept_rng_state(cuda: bool = True) -> Iterator[None]:
    """Every generator of :func:`capture_rng_state` is as it was before the block once the block ends (also when it
    raises): what the block draws leaves no trace. ``cuda=False``: the CUDA generators are not touched.

    Example:
        >>> with kept_rng_state():
        ...     a = torch.rand(2)
        >>> torch.equal(a, torch.rand(2))
        True
    """
    state = capture_rng_state(cuda=cuda)
    try:
        yield
    finally:
        restore_rng_state(state)
