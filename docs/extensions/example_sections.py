"""A griffe extension for the API reference: stoker's docstrings are written for ``help()`` first.

Google style, as griffe reads it, knows ``Examples:`` (a section of ``>>>`` code) but renders ``Example:`` as an
admonition whose ``>>>`` lines become nested quotes, and whose ``x[:3]`` becomes a broken cross-reference. The
docstrings are written for ``help()`` first, so the reference reads the singular as the plural instead of asking
every module to change. Likewise a Sphinx role (``:class:`X```) becomes plain code instead of showing its markup.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_SINGULAR = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
# Sphinx roles (":class:`~stoker.Accelerator`") that some docstrings use: shown as plain code, last name only for "~"
_ROLE = re.compile(r":(?:class|func|meth|attr|mod|obj|data|exc):`(~?)([\w.]+)`")


class ExampleSections(griffe.Extension):
    """Rewrites a docstring's ``Example:`` section title to ``Examples:`` before griffe parses it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _ROLE.sub(_plain_code, text)


def _plain_code(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"
