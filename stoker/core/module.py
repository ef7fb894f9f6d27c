"""``pytorch_lightning.core.module``'s name: ``LightningModule`` (stoker's ``TrainingModule``)."""

from stoker.trainer import LightningModule

__all__ = ["LightningModule"]
