"""Checking for a logger's optional package without importing it, and the error that names what to install."""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["is_installed", "missing_package_error"]


def is_installed(package: str) -> bool:
    """Whether ``package`` can be imported, without importing it (``sys.modules[package] = None`` counts as no; a
    module already in ``sys.modules`` without a spec, such as a test's stand-in module, counts as yes)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return sys.modules.get(package) is not None


def missing_package_error(owner: str, package: str, install: str) -> ModuleNotFoundError:
    """The error for a logger whose backend package is not installed: what is missing and what to install."""
    hint = f"`pip install '{install}'`" + (f" (or `pip install {package}`)" if install != package else "")
    return ModuleNotFoundError(
        f"{owner} needs the {package!r} package, which is not installed. Install it with {hint}.", name=package)
