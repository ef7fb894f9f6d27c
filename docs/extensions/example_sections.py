"""A griffe extension for the API reference: stoker's docstrings title their doctests ``Example:``.

Google style, as griffe reads it, knows ``Examples:`` (a section of ``>>>`` code) but renders ``Example:`` as an
admonition whose ``>>>`` lines become nested quotes, and whose ``x[:3]`` becomes a broken cross-reference. The
docstrings are written for ``help()`` first, so the reference reads the singular as the plural instead of asking
every module to change.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_SINGULAR = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rewrites a docstring's ``Example:`` section title to ``Examples:`` before griffe parses it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
