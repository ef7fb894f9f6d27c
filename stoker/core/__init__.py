"""Lightning's ``core`` module paths (``pytorch_lightning.core.module`` ...) for renamed scripts: the same classes as
``stoker.LightningModule`` / ``stoker.LightningDataModule``."""

from stoker.trainer import LightningModule
from stoker.trainer.datamodule import LightningDataModule

__all__ = ["LightningDataModule", "LightningModule"]
