"""Which checkpoints `ModelCheckpoint` keeps: the ``save_top_k`` best by a score.

Owns: the order of scores (lower is better when minimizing; NaN is never best, so a diverged run cannot displace a
good checkpoint), the best and the worst kept checkpoint, and whether a new score enters the kept set and which
checkpoint it displaces. The kept set is the callback's ``best_k_models`` (path -> score), passed in. Does not own
what the score is (the monitored metric, or the step when ranking by recency: the callback reads it and makes the
processes agree on it), the folder names (checkpoint_files.py) or the writing (checkpoint_writer.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["admit", "better", "kept", "ordering"]


def ordering(score: float, minimize: bool) -> float:
    """``score`` with NaN mapped to the worst value, so NaN checkpoints are never 'best'."""
    if math.isnan(score):
        return math.inf if minimize else -math.inf
    return score


def better(new: float, old: float, minimize: bool) -> bool:
    """Whether ``new`` ranks strictly above ``old`` (a NaN ``new`` never does)."""
    if math.isnan(new):
        return False
    old = ordering(old, minimize)
    return new < old if minimize else new > old


def kept(models: dict[str, float], minimize: bool, best: bool = True) -> str | None:
    """The path of the best kept checkpoint (``best=False``: the worst, the next to be displaced); None if none.

    Example:
        >>> kept({"a": 0.5, "b": 0.2}, minimize=True), kept({"a": 0.5, "b": 0.2}, minimize=True, best=False)
        ('b', 'a')
    """
    if not models:
        return None
    pick = min if minimize == best else max
    return pick(models, key=lambda path: ordering(models[path], minimize))


def admit(models: dict[str, float], save_top_k: int, score: float, minimize: bool,
          new_path: Callable[[list[str]], str]) -> tuple[str | None, list[str]]:
    """Enters ``score`` into ``models`` when it is among the ``save_top_k`` best (-1: all are kept).

    Returns ``(path, evicted)``: the new entry's path (``new_path(replaceable)`` names it; the displaced path may be
    reused), or None when the score does not enter, and the kept paths it displaced, to delete once the new checkpoint
    is complete.

    Example:
        >>> models = {"a": 0.5, "b": 0.2}
        >>> admit(models, 2, 0.3, True, lambda replaceable: "c"), models
        (('c', ['a']), {'b': 0.2, 'c': 0.3})
    """
    displaced: list[str] = []
    if save_top_k != -1 and len(models) >= save_top_k:
        worst = kept(models, minimize, best=False)
        if not better(score, models[worst], minimize):
            return None, []
        displaced.append(worst)
    path = new_path(displaced)
    for old in displaced:
        del models[old]
    models[path] = score
    return path, [p for p in displaced if p != path]
