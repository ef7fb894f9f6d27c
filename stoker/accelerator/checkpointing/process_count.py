"""Loading a checkpoint saved by another number of processes: loader positions and RNG states.

Model, optimizer and scheduler states are the same on every process (replicated, or resharded by
``torch.distributed.checkpoint`` under FSDP2), so only what each process saves for itself needs a rule:

- **loader positions**: each loader's saved position also holds a form that does not depend on the process count
  (``data/position.py``); every process reads its own file, or the main process's when the saving run had fewer
  processes (the processes of one run take their batches in step, so any of them describes the position);
- **RNG states**: a process that has its own file keeps its own state; one that has none (its rank did not
  exist in the saving run) gets a state derived from the main process's saved one and its rank
  (:func:`derive_rng_state`), so that dropout differs between processes and a resume is repeatable.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..data.position import ProcessCountError, plan_resume
from .atomic import CheckpointError
from .tree import load_tree

_SEED_RANGE = 2**62


def derive_rng_state(main_state: dict[str, Any], rank: int) -> int:
    """Seeds this process's generators (Python's ``random``, NumPy's global one, torch's CPU and CUDA ones) with
    ``(s + rank) mod 2**62``, where ``s`` is the first number torch's CPU generator draws from the main process's
    saved state (``torch.randint(2**62)``); returns that seed.

    Example:
        >>> derive_rng_state(load_tree("ckpt/random_states_0.safetensors"), rank=1)
    """
    generator = torch.Generator()
    generator.set_state(main_state["torch"].to("cpu", torch.uint8))
    seed = (int(torch.randint(_SEED_RANGE, (1,), generator=generator).item()) + rank) % _SEED_RANGE
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # every CUDA device's generator too
    return seed


def rng_file(rank: int) -> str:
    return f"random_states_{rank}.safetensors"


def check_loader_states(path: str, parts: Iterable[tuple[str, Any, Any]], trees: dict[str, Any],
                        state: dict[str, Any], num_processes: int) -> None:
    """Checks every loader state among ``parts`` against its loader, and a save made by another process count
    (``state``: the checkpoint's ``stoker_state.json``), before anything is loaded.

    Raises:
        CheckpointError: a state is malformed (names the file and the key).
        ProcessCountError: a position saved by another number of processes cannot be continued exactly here, or
            the save was made inside an accumulation window (each process's gradients so far belong to its own
            share of the batches, which another process count divides differently).
    """
    saved_processes = state["num_processes"]
    if saved_processes != num_processes and state["counters"].get("micro_step", 0):
        raise ProcessCountError(
            f"Cannot resume {path} with {num_processes} process(es): it was saved by {saved_processes} in the "
            f"middle of a gradient accumulation window (micro_step {state['counters']['micro_step']}), whose "
            f"gradients so far are split by process. Resume with {saved_processes} processes, or from a checkpoint "
            "saved after an optimizer step (e.g. ModelCheckpoint(every_n_train_steps=...)).")
    for name, loader, label in parts:
        if not name.startswith("dataloader"):
            continue
        state = trees[name]
        file = os.path.join(path, name)
        try:
            if isinstance(state, dict) and "position" not in state and saved_processes != loader.num_processes:
                raise ProcessCountError(
                    f"the position was saved by {saved_processes} process(es) before stoker recorded positions "
                    f"that hold on another process count, and this run has {loader.num_processes}. Resume with "
                    f"{saved_processes} processes (then save again), or start the epoch over.")
            plan_resume(loader, state)
        except ProcessCountError as error:
            raise ProcessCountError(f"Cannot continue {label} from {file}: {error}") from None
        except ValueError as error:
            raise CheckpointError(f"{file}: the {label} position is malformed: {error}. The checkpoint was altered "
                                  "or written by another tool; load another checkpoint or re-save this one.") from None


def restore_rng(path: str, files: dict[str, Any], rank: int) -> bool:
    """Restores this process's RNG states from its own file, or derives them (:func:`derive_rng_state`) from the
    main process's; False when the checkpoint has neither (this process keeps its current states)."""
    from .rng import restore_rng_state

    own, main = rng_file(rank), rng_file(0)
    if own in files:
        restore_rng_state(load_tree(os.path.join(path, own)))
        return True
    if main in files:
        derive_rng_state(load_tree(os.path.join(path, main)), rank)
        return True
    return False
