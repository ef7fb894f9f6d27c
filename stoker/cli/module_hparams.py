"""The hyperparameters of the modules the CLI builds (``LightningCLI(load_from_checkpoint_support=True)``): a module
or data module that calls ``save_hyperparameters()`` keeps the *parsed configuration* of its arguments (class paths
and their ``init_args``, plain data a checkpoint can hold) rather than the objects ``__init__`` received, plus
``_instantiator`` (this package's :func:`instantiate_module`) and, when it was given by class path, ``_class_path``.
``load_from_checkpoint`` then rebuilds the same objects through :func:`instantiate_module` (dependency injection:
``activation: torch.nn.Module``, ``optimizer: OptimizerCallable``), and ``--ckpt_path`` switches to the saved class.

Owns the record (what goes into ``hparams``) and the rebuild; it goes through ``save_hyperparameters``, the
module's public method, so the saved names stay those the module chose (its ``ignore=`` kept).
"""

from __future__ import annotations

from typing import Any, Callable

from ..trainer.hparams import HyperparametersMixin
from ..trainer.loading import INSTANTIATOR

__all__ = ["INSTANTIATOR", "ConfigHparams", "instantiate_module"]



class ConfigHparams:
    """jsonargparse's instantiator for the ``model`` or ``data`` group: builds the class as usual, then records the
    parsed configuration of the arguments it saved (``dump`` gives the group's section of the config)."""

    def __init__(self, dump: Callable[[], dict[str, Any]], key: str) -> None:
        self.dump = dump
        self.key = key

    def __call__(self, class_type: type, *args: Any, applied_instantiation_links: dict | None = None,
                 **kwargs: Any) -> Any:
        built = class_type(*args, **kwargs)
        if isinstance(built, HyperparametersMixin) and built.hparams:  # it called save_hyperparameters
            given = self._given(applied_instantiation_links or {})
            record = {k: given[k] for k in built.hparams if k in given}  # the names it chose to save (ignore= kept)
            record.update({k: v for k, v in given.items() if k.startswith("_")})
            for name in [k for k in built.hparams if k not in record]:  # a base class's own arguments, not this one's
                del built.hparams[name]
            built.save_hyperparameters(record)
        return built

    def _given(self, links: dict[str, Any]) -> dict[str, Any]:
        section = dict(self.dump().get(self.key) or {})
        if "class_path" in section:  # given by class path: the arguments flat, the class beside them
            section = {"_class_path": section["class_path"], **(section.get("init_args") or {}),
                       **(section.get("dict_kwargs") or {})}
        prefix = f"{self.key}."
        for key, value in links.items():  # links applied at instantiation are not in the dump
            if key.startswith(prefix):
                _set_nested(section, key[len(prefix):].removeprefix("init_args."), value)
        return {**section, "_instantiator": INSTANTIATOR}


def _set_nested(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``data["a"]["b"] = value`` for ``dotted="a.b"`` (a link's target inside a class-typed argument)."""
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def instantiate_module(class_type: type, config: dict[str, Any]) -> Any:
    """Builds ``class_type`` (or the subclass ``config["_class_path"]`` names) from a configuration saved by
    :class:`ConfigHparams`, class-typed arguments included (what ``load_from_checkpoint`` calls)."""
    from .parser import ArgumentParser, instantiate

    parser = ArgumentParser(exit_on_error=False)
    if "_class_path" in config:
        parser.add_subclass_arguments(class_type, "module", fail_untyped=False)
        config = {"class_path": config["_class_path"],
                  "dict_kwargs": {k: v for k, v in config.items() if k != "_class_path"}}
    else:
        parser.add_class_arguments(class_type, "module", fail_untyped=False)
    return instantiate(parser, parser.parse_object({"module": config})).module
