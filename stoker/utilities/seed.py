"""``pytorch_lightning.utilities.seed``'s name: ``isolate_rng``, the engine's ``kept_rng_state`` under Lightning's
name and argument."""

from __future__ import annotations

from contextlib import AbstractContextManager

from stoker.accelerator import kept_rng_state


def isolate_rng(include_cuda: bool = True) -> AbstractContextManager[None]:
    """A block whose random draws leave the global generators (torch's, CUDA's, NumPy's, Python's) as they were
    before it, also when it raises. ``include_cuda=False`` leaves CUDA untouched (in a forked process, where
    initializing CUDA fails).

    Example:
        >>> import torch
        >>> with isolate_rng():
        ...     a = torch.rand(1)
        >>> torch.equal(a, torch.rand(1))
        True
    """
    return kept_rng_state(cuda=include_cuda)


__all__ = ["isolate_rng"]
