"""``pytorch_lightning.core.mixins.hparams_mixin``'s name: ``HyperparametersMixin`` (``stoker/trainer/hparams.py``)."""

from stoker.trainer.hparams import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
