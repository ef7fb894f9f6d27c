"""The training step: the accumulation window (``window.py``), one precision object per mode (``precision.py``),
the optimizer and scheduler wrappers (``optimizer.py``) and the guarded torch fast paths (``torch_shortcuts.py``)."""
