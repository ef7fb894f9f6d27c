"""``pytorch_lightning.core.datamodule``'s name: ``LightningDataModule`` (stoker's ``DataModule``)."""

from stoker.trainer.datamodule import LightningDataModule

__all__ = ["LightningDataModule"]
