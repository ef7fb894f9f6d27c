"""Lightning's ``GradClipAlgorithmType``: the two clipping algorithms as an enum, for scripts that pass
``gradient_clip_algorithm=GradClipAlgorithmType.VALUE``. Its members are the strings themselves, so the Trainer and
``clip_gradients`` take them wherever they take ``"norm"`` / ``"value"``."""

from __future__ import annotations

from enum import Enum

__all__ = ["GradClipAlgorithmType"]


class GradClipAlgorithmType(str, Enum):
    """``NORM``: scale all gradients so that their total norm is at most the value; ``VALUE``: clamp each element."""

    NORM = "norm"
    VALUE = "value"

    @staticmethod
    def supported_type(value: str) -> bool:
        """Whether ``value`` names one of the algorithms."""
        return value in GradClipAlgorithmType.supported_types()

    @staticmethod
    def supported_types() -> list[str]:
        """The algorithms' names."""
        return [member.value for member in GradClipAlgorithmType]
