"""Lightning's ``utilities.imports`` flags for renamed scripts: whether an optional package can be imported."""

from importlib.util import find_spec

_OMEGACONF_AVAILABLE = find_spec("omegaconf") is not None

__all__ = ["_OMEGACONF_AVAILABLE"]
