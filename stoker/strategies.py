"""Lightning's ``pytorch_lightning.strategies`` module path: the names are in ``stoker/compat/lightning/strategies.py``."""

from .compat.lightning.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy, Strategy

__all__ = ["DDPStrategy", "DeepSpeedStrategy", "FSDPStrategy", "Strategy"]
