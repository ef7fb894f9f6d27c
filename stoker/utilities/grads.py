"""``pytorch_lightning.utilities.grads``'s ``grad_norm`` (``stoker/trainer/grad_norm.py``)."""

from stoker.trainer.grad_norm import grad_norm

__all__ = ["grad_norm"]
