"""``pytorch_lightning.core.mixins``' name: ``HyperparametersMixin`` (``stoker/trainer/hparams.py``)."""

from stoker.trainer.hparams import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
