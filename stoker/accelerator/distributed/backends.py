"""The process group's backend name, checked where a strategy is built rather than where torch would first meet it
(``init_process_group`` answers an unknown name with a bare ``AssertionError``)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


def check_backend(backend: Any, owner: str = "DDPStrategy", argument: str = "backend") -> str | None:
    """``backend`` when torch knows it ("gloo", "nccl", a registered one, or per device: "cpu:gloo,cuda:nccl");
    None stays None (NCCL on CUDA, gloo on CPU).

    Raises:
        TypeError: ``backend`` is not a string or None.
        ValueError: a name torch has no backend of.
    """
    if backend is None:
        return None
    if not isinstance(backend, str):
        raise TypeError(f"{owner}({argument}={backend!r}) must be a backend name such as 'gloo' or 'nccl', or None.")
    known = [name for name in dist.Backend.backend_list if name not in ("undefined", "fake")]
    names = [part.split(":")[-1].strip().lower() for part in backend.split(",")]
    unknown = [name for name in names if name not in dist.Backend.backend_list or name == "undefined"]
    if unknown or not backend.strip():
        raise ValueError(f"{owner}({argument}={backend!r}): torch.distributed has no backend "
                         f"{unknown[0] if unknown else ''!r}. Expected one of {known} (or one per device, e.g. "
                         "'cpu:gloo,cuda:nccl'), or None for the default (NCCL on CUDA, gloo on CPU).")
    return backend
