"""The state file of a ``save_state`` folder, ``stoker_state.json``: what it holds, how it is written and checked.

It holds the loop counters (optimizer ``step``, ``micro_step``, ``iteration`` of automatic naming), the process
count, how many objects of each kind were saved, and ``saved_at``: the wall-clock time of the save, so that "the
newest checkpoint" means the one written last (a folder's mtime changes when it is copied, and its steps may belong
to an older run in the same folder). ``checkpoint.py`` writes and reads it through these functions.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from .atomic import CheckpointError, _read_json, verify_checkpoint

STATE_NAME = "stoker_state.json"


def part_name(stem: str, i: int, rank: int = 0) -> str:
    """The file of the ``i``-th object of a kind (``model``, ``optimizer``...): Accelerate's names as safetensors
    (``model.safetensors``, ``optimizer_1.safetensors``); a process's own files get ``_process{rank}``."""
    stem += f"_process{rank}" if rank else ""
    return f"{stem}.safetensors" if i == 0 else f"{stem}_{i}.safetensors"


def encode_state(counters: dict[str, int], num_processes: int, counts: dict[str, int]) -> str:
    """The JSON text of a state file for a save made now."""
    state = {"counters": counters, "num_processes": num_processes, "counts": counts, "saved_at": time.time()}
    return json.dumps(state, indent=1)


_KINDS = ("models", "optimizers", "schedulers", "dataloaders", "custom_objects")


def read_state(path: str) -> dict[str, Any]:
    """The checked contents of ``{path}/stoker_state.json`` (counters, process count, object counts).

    Raises:
        CheckpointError: the file is not JSON, nests absurdly deep, or a key is missing or has the wrong type or
            a negative value; the message names the file and the key.
    """
    file = os.path.join(path, STATE_NAME)
    state = _read_json(file, "stoker state")

    def bad(key: str, value: Any, expected: str) -> CheckpointError:
        found = "missing" if value is _MISSING else f"{value!r:.80}"
        return CheckpointError(f"{file}: key {key!r} is {found}, expected {expected}. The checkpoint was altered or "
                               "written by another tool; load another checkpoint or re-save this one.")

    def count(key: str, value: Any, least: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad(key, value, "a non-negative integer" if least == 0 else f"an integer >= {least}")
        return value

    if not isinstance(state, dict):
        raise bad("(top level)", state, "an object")
    for key in ("counters", "counts"):
        if not isinstance(state.get(key, _MISSING), dict):
            raise bad(key, state.get(key, _MISSING), "an object")
    for key in ("step", "micro_step", "iteration"):
        if key in state["counters"] or key == "step":
            count(f"counters.{key}", state["counters"].get(key, _MISSING))
    count("num_processes", state.get("num_processes", _MISSING), least=1)
    for kind in _KINDS:
        count(f"counts.{kind}", state["counts"].get(kind, _MISSING))
    saved_at = state.get("saved_at")  # absent in checkpoints written before it was recorded
    if saved_at is not None and (isinstance(saved_at, bool) or not isinstance(saved_at, (int, float))
                                 or not math.isfinite(saved_at) or saved_at < 0):
        raise bad("saved_at", saved_at, "a non-negative number of seconds (the time of the save)")
    return state


_MISSING = object()


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """Optimizer steps recorded in the complete ``save_state`` folder ``path``; None when it is not one (missing,
    incomplete, altered, or not a checkpoint at all)."""
    written = checkpoint_written(path)
    return None if written is None else written[0]


def checkpoint_written(path: str | os.PathLike) -> tuple[int, float | None] | None:
    """``(optimizer steps, when it was saved)`` of the complete ``save_state`` folder ``path``: the time in
    wall-clock seconds, None for a checkpoint written before stoker recorded it. None when ``path`` is not a
    complete checkpoint (missing, incomplete, altered, or not a checkpoint at all)."""
    path = os.fspath(path)
    try:
        verify_checkpoint(path, files=[STATE_NAME])
        state = read_state(path)
    except (CheckpointError, OSError):
        return None
    saved_at = state.get("saved_at")
    return int(state["counters"]["step"]), None if saved_at is None else float(saved_at)


def checkpoints_in(folder: str | os.PathLike) -> list[tuple[os.DirEntry, int, float | None]]:
    """The complete ``save_state`` folders directly inside ``folder`` (hidden temporary ones skipped), each as
    ``(entry, optimizer steps, saved_at)`` (see :func:`checkpoint_written`); empty when ``folder`` is missing."""
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if e.is_dir() and not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        written = checkpoint_written(entry.path)
        if written is not None:
            found.append((entry, *written))
    return found
