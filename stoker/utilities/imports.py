"""Lightning's ``utilities.imports`` flags for renamed scripts: whether an optional package can be imported, or is
at least a given version."""

from importlib.util import find_spec

_OMEGACONF_AVAILABLE = find_spec("omegaconf") is not None
_RICH_AVAILABLE = find_spec("rich") is not None
_TORCHVISION_AVAILABLE = find_spec("torchvision") is not None

__all__ = ["_OMEGACONF_AVAILABLE", "_RICH_AVAILABLE", "_TORCHVISION_AVAILABLE", "_TORCHMETRICS_GREATER_EQUAL_0_11", "_TORCH_GREATER_EQUAL_2_8"]


def _version_at_least(package: str, minimum: tuple[int, ...]) -> bool:
    """Whether ``package`` is installed at ``minimum`` or later (release numbers only: "0.11.4" -> (0, 11, 4))."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version(package)
    except PackageNotFoundError:
        return False
    parts = []
    for piece in text.split(".")[:len(minimum)]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        parts.append(int(digits or 0))
    return tuple(parts) >= minimum


_TORCHMETRICS_GREATER_EQUAL_0_11 = _version_at_least("torchmetrics", (0, 11))
_TORCH_GREATER_EQUAL_2_8 = _version_at_least("torch", (2, 8))
