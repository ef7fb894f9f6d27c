"""The version of stoker (also in ``pyproject.toml``): a leaf module, so that any part can read it."""

__version__ = "0.1.0"
