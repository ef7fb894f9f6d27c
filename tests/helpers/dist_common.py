"""Shared by the worker scripts that ``dist_spawn.run_workers`` starts: results out, tensors to JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:  # workers run as scripts: make `tests.helpers` and `stoker` importable
    sys.path.insert(0, str(REPO))

from tests.helpers.weights import flat  # noqa: E402,F401 - the workers' `common.flat`


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def write_result(out_dir: str | Path, result: dict[str, Any], name: str | None = None) -> None:
    """Writes this rank's findings to ``{out_dir}/rank{r}.json`` (or ``name``)."""
    path = Path(out_dir) / (name or f"rank{rank()}.json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)


def max_diff(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)
