"""A logger's folders: a file in the way of one, and the next free ``version_{n}`` number in a folder."""

from __future__ import annotations

import os
import re

__all__ = ["blocking_file", "free_version_under"]

_VERSION_DIR = re.compile(r"^version_(\d+)$")


def blocking_file(folder: str | os.PathLike) -> str | None:
    """The existing file that stops ``folder`` from being created (itself or a folder above it), else None."""
    path = os.path.abspath(folder)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return None if os.path.isdir(path) else path


def free_version_under(root_dir: str | os.PathLike) -> int:
    """One more than the largest ``version_{n}`` folder in ``root_dir`` (0 if none)."""
    try:
        entries = os.scandir(root_dir)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    with entries:
        numbers_seen = [
            int(match.group(1))
            for entry in entries
            if entry.is_dir() and (match := _VERSION_DIR.match(entry.name))
        ]
    return max(numbers_seen, default=-1) + 1


def attribute_type_error(owner: object, attribute: str, value: object, kind: str) -> TypeError:
    """The error for a logger attribute of the wrong type, most often a method where a property was meant."""
    what = "a method" if callable(value) else repr(value)
    fix = f" Make it a property: @property def {attribute}(self)." if callable(value) else ""
    return TypeError(f"{type(owner).__name__}.{attribute} is {what}, not {kind}.{fix}")
