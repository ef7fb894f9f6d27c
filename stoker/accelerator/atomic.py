"""The old path of ``stoker.accelerator.checkpointing.atomic`` (kept importable for existing code): this name *is*
that module (the same object, so patching either patches both). New code imports from ``stoker.accelerator``."""

import sys

from .checkpointing import atomic as _module

sys.modules[__name__] = _module
