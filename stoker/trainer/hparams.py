"""Hyperparameters of modules and datamodules: ``HyperparametersMixin`` (the base of ``TrainingModule`` and
``DataModule``, and of any class of a user's that wants them): ``hparams`` (an ``AttributeDict``),
``hparams_initial`` (what ``save_hyperparameters`` saved, unchanged by later edits), ``save_hyperparameters`` (the
arguments of the ``__init__`` calls that built the object, a dataclass's fields, or a mapping given to it); and what
the Trainer sends to its loggers when ``fit`` starts (the two merged, unless saved with ``logger=False``)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..callbacks.hparams_file import plain_form
from ..user_frame import user_stacklevel

if TYPE_CHECKING:
    from ..loggers import Logger

# The attribute save_hyperparameters(logger=...) sets on its owner (Lightning's name, which scripts read); only this
# module writes or reads it. Absent: the owner's hparams go to the loggers when it has any.
_TO_LOGGERS = "_log_hyperparams"
# The __init__ argument that held the one container save_hyperparameters got (Lightning's attribute name), and
# the container's kind: load_from_checkpoint passes the saved values back under that name, in that kind.
_CONTAINER, _CONTAINER_KIND = "_hparams_name", "_hparams_kind"
_NAMESPACE, _DICT, _DICTCONFIG = "Namespace", "dict", "DictConfig"


def _is_dictconfig(value: Any) -> bool:
    """Whether ``value`` is an OmegaConf ``DictConfig`` (a Hydra config), told without importing omegaconf."""
    return any(c.__name__ == _DICTCONFIG and c.__module__.startswith("omegaconf") for c in type(value).__mro__)


def _kind(container: Any) -> str:
    """The kind of container ``save_hyperparameters`` got, as the checkpoint records it (``hparams_type``)."""
    if isinstance(container, argparse.Namespace):
        return _NAMESPACE
    return _DICTCONFIG if _is_dictconfig(container) else _DICT


class AttributeDict(dict):
    """A dict whose keys are also attributes: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"hparams has no {name!r}; it holds: {sorted(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class HparamsOwner(Protocol):
    """What keeps hyperparameters: a ``TrainingModule`` or a ``DataModule`` (a protocol: both import this module)."""

    hparams: AttributeDict


class HyperparametersError(TypeError, ValueError):
    """``save_hyperparameters`` got something that is neither argument names nor one container of hyperparameters
    (a ``TypeError``; a ``ValueError`` too, the class a Lightning script catches for it)."""


class HyperparametersMixin:
    """``hparams``, ``hparams_initial`` and ``save_hyperparameters`` for any class (Lightning's mixin of the same
    name): ``TrainingModule`` and ``DataModule`` are built on it, and a plain class of a user's can be too.

    Example:
        >>> class Encoder(HyperparametersMixin):
        ...     def __init__(self, width: int = 64, depth: int = 2):
        ...         super().__init__()
        ...         self.save_hyperparameters()
        >>> Encoder(width=32).hparams
        {'width': 32, 'depth': 2}
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not any("hparams" in vars(cls) for cls in type(self).__mro__):  # a class's own `hparams` wins (Lightning)
            object.__setattr__(self, "hparams", AttributeDict())

    def save_hyperparameters(self, *names: Any, ignore: Sequence[str] | str | None = None, frame: Any = None,
                             logger: bool = True) -> None:
        """Stores the arguments of the ``__init__`` that called it in ``self.hparams`` (and so in checkpoints and,
        unless ``logger=False``, in the loggers). A second call (a subclass's after its base's) adds to what the
        first saved, and removes the names it ignores.

        A class whose ``__init__`` calls its base's with ``super().__init__(...)``: the arguments of every
        ``__init__`` of the object on the way (the outermost, the subclass's, wins a name both have), and, as in
        Lightning, those of a holder (a module, datamodule or mixin) whose ``__init__`` builds this object; a
        plain object's ``__init__`` ends the chain. A dataclass calling it from ``__post_init__``: its fields that
        ``__init__`` takes.

        Args:
            *names: Only these arguments (default: all of them); or one mapping, ``argparse.Namespace`` or
                dataclass instance whose items are the hyperparameters.
            ignore: Arguments to leave out (e.g. a sub-model passed in: its weights are saved with the module's).
            frame: The frame of the function whose arguments to save (default: the caller's).
            logger: False keeps them out of the loggers (still in ``hparams`` and checkpoints).

        Example:
            >>> def __init__(self, hidden: int = 64, lr: float = 1e-3):
            ...     super().__init__()
            ...     self.save_hyperparameters()  # self.hparams == {"hidden": 64, "lr": 0.001}
        """
        if not isinstance(logger, bool):
            raise TypeError(f"save_hyperparameters(logger={logger!r}) must be True or False.")
        caller = frame if frame is not None else inspect.currentframe().f_back  # type: ignore[union-attr]
        try:
            values = _hparams_of(self, caller, names, ignore)
            container = _container_argument(caller, names)
        finally:
            del caller
        object.__setattr__(self, _CONTAINER, container[0] if container else None)
        object.__setattr__(self, _CONTAINER_KIND, container[1] if container else None)
        if container is not None and container[1] == _DICTCONFIG and len(values) == len(names[0]):
            # as in Lightning, a Hydra config given whole is the hparams itself (its nested attribute access and
            # interpolations kept); the checkpoint records its kind, and load_from_checkpoint builds one again
            object.__setattr__(self, "hparams", names[0])
        else:
            if "hparams" not in vars(self):  # a subclass that did not call super().__init__() first
                object.__setattr__(self, "hparams", AttributeDict())
            for name in {ignore} if isinstance(ignore, str) else set(ignore or ()):
                self.hparams.pop(name, None)  # an ignored name is no hyperparameter, also if a base class saved it
            self.hparams.update(values)
        object.__setattr__(self, "_hparams_initial", copy.deepcopy(dict(self.hparams)))
        object.__setattr__(self, _TO_LOGGERS, logger)

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of what ``save_hyperparameters`` saved, whatever was changed in ``hparams`` since (empty when it
        was not called): what the loggers get."""
        return AttributeDict(copy.deepcopy(self.__dict__.get("_hparams_initial", {})))


def _hparams_of(owner: object, caller: Any, names: tuple[Any, ...], ignore: Sequence[str] | str | None
                ) -> dict[Any, Any]:
    """What ``owner.save_hyperparameters(*names, ignore=...)`` called from the frame ``caller`` saves."""
    if len(names) == 1 and not isinstance(names[0], str):
        return _given_hparams(names[0], ignore)
    bad = [a for a in names if not isinstance(a, str)]
    if bad:
        raise HyperparametersError(
            f"{_primitives(bad[0])}save_hyperparameters{names!r}: pass argument names (strings) of __init__, or a "
            f"single mapping of hyperparameters; got {type(bad[0]).__name__}.")
    if caller is None:
        raise RuntimeError("save_hyperparameters() could not find the calling __init__ (no frame information).")
    values = _init_arguments_of(owner, caller)
    ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
    if names:
        unknown = [n for n in names if n not in values]
        if unknown:
            raise ValueError(f"save_hyperparameters({', '.join(map(repr, names))}): {unknown} are not arguments "
                             f"of {type(owner).__name__}.__init__; its arguments are {sorted(values)}.")
        values = {n: values[n] for n in names}
    values = {k: v for k, v in values.items() if k not in ignored}
    for name, value in values.items():
        if isinstance(value, torch.nn.Module):
            warnings.warn(f"save_hyperparameters: the argument {name!r} is an nn.Module, whose weights are in the "
                          f"checkpoint already; keeping the object in hparams stores it twice (Attribute {name!r} is "
                          f"an instance of `nn.Module` and is already saved during checkpointing). Leave it out "
                          f"with save_hyperparameters(ignore=[{name!r}]).", UserWarning, stacklevel=4)
    return values


def _container_argument(caller: Any, names: tuple[Any, ...]) -> tuple[str, str] | None:
    """``(argument name, kind)`` when the one object given to ``save_hyperparameters`` is an argument of the calling
    ``__init__`` (``def __init__(self, hparams): self.save_hyperparameters(hparams)``); None otherwise."""
    if len(names) != 1 or isinstance(names[0], str) or caller is None or caller.f_code.co_name != "__init__":
        return None
    found = [name for name, value in _init_arguments(caller).items() if value is names[0]]
    return (found[0], _kind(names[0])) if found else None


def container_keys(owner: object, prefix: str = "") -> dict[str, str]:
    """The checkpoint's record of a container argument (Lightning's keys ``hparams_name`` / ``hparams_type``, with
    ``prefix`` ``"datamodule_"`` for a data module's); empty when the hyperparameters came otherwise."""
    name = getattr(owner, _CONTAINER, None)
    if not isinstance(name, str):
        return {}
    return {f"{prefix}hparams_name": name, f"{prefix}hparams_type": getattr(owner, _CONTAINER_KIND, _DICT)}


def as_container_argument(hparams: dict[str, Any], record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The constructor arguments of saved hyperparameters: ``{name: the container}`` when ``record`` (a checkpoint,
    or an hparams file) says they came in one argument (see :func:`container_keys`), else ``hparams`` unchanged."""
    name = record.get(f"{prefix}hparams_name")
    if not isinstance(name, str):
        return hparams
    kind = record.get(f"{prefix}hparams_type")
    kind = kind.__name__ if isinstance(kind, type) else kind  # a Lightning .ckpt stores the class (DictConfig)
    if kind == _NAMESPACE:
        return {name: argparse.Namespace(**hparams)}
    if kind == _DICTCONFIG:  # a Hydra config comes back as one, so cfg.model.width reads as it did
        try:
            from omegaconf import OmegaConf
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(f"The checkpoint's hyperparameters came in an OmegaConf DictConfig (argument "
                                      f"{name!r}); install omegaconf to load it (pip install omegaconf).") from error
        return {name: OmegaConf.create(hparams)}
    return {name: AttributeDict(hparams)}


def _init_arguments_of(owner: object, caller: Any) -> dict[str, Any]:
    """The arguments of the ``__init__`` calls running from ``caller`` outwards while each builds a hyperparameter
    holder (the object's own chain, a subclass's value over its base's, and, as in Lightning, a holder building this
    one in its ``__init__``; a plain object's ``__init__`` ends the chain), a dataclass's ``__init__`` fields (called
    from ``__post_init__``), or else the calling function's."""
    chain, frame = [], caller
    while frame is not None and frame.f_code.co_name == "__init__" and frame.f_code.co_argcount \
            and isinstance(frame.f_locals.get(frame.f_code.co_varnames[0]), HyperparametersMixin):
        chain.append(_init_arguments(frame))
        frame = frame.f_back
    del frame
    if not chain and dataclasses.is_dataclass(owner) and caller.f_code.co_name == "__post_init__":
        return {f.name: getattr(owner, f.name) for f in dataclasses.fields(owner) if f.init}
    values: dict[str, Any] = {}
    for arguments in chain or [_init_arguments(caller)]:
        values.update(arguments)  # innermost first: the subclass's value of a name wins
    return values


def _init_arguments(frame: Any) -> dict[str, Any]:
    """The named arguments (and ``**kwargs``) of the function running in ``frame``, without ``self``."""
    code = frame.f_code
    local = frame.f_locals
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    values = {n: local[n] for n in names[1:] if n in local}  # names[0] is self
    flags = code.co_flags
    position = count
    if flags & inspect.CO_VARARGS:
        star = code.co_varnames[position]
        if local.get(star):
            values[star] = list(local[star])
        position += 1
    if flags & inspect.CO_VARKEYWORDS:
        values.update(local.get(code.co_varnames[position], {}))
    return values


def _primitives(value: Any) -> str:
    """Lightning's first sentence when a plain number or string stands where hyperparameters were expected."""
    kinds = (bool, int, float, str)
    return f"Primitives {kinds} are not allowed. " if isinstance(value, kinds) else ""


def _given_hparams(given: Any, ignore: Sequence[str] | str | None) -> dict[Any, Any]:
    """The items of the one object given to ``save_hyperparameters``, without ``ignore``."""
    if isinstance(given, argparse.Namespace):
        given = vars(given)
    elif dataclasses.is_dataclass(given) and not isinstance(given, type):
        given = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}
    if not isinstance(given, Mapping):
        raise HyperparametersError(
            f"{_primitives(given)}save_hyperparameters({given!r}): expected argument names of __init__, or one "
            f"mapping, argparse.Namespace or dataclass instance of hyperparameters; got {type(given).__name__}.")
    ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
    return {k: v for k, v in given.items() if k not in ignored}


def hparams_for_loggers(module: HparamsOwner, datamodule: HparamsOwner | None = None) -> dict[Any, Any]:
    """The hyperparameters the loggers get: the module's and the datamodule's (each unless saved with
    ``logger=False``; each as first saved, see ``_logged``), merged; empty when there are none.

    Raises:
        RuntimeError: a key both have, with different values (which one the loggers should show is unknowable).
    """
    parts = [_logged(owner) for owner in (module, datamodule) if owner is not None and getattr(owner, _TO_LOGGERS, True)]
    if len(parts) < 2:
        return parts[0] if parts else {}
    ours, theirs = parts
    # "_class_path" (stoker.cli's record of the class each was built from) differs by nature: not a clash (Lightning's
    # rule too); the merged dict shows the data module's
    clashes = [key for key in ours.keys() & theirs.keys() if key != "_class_path" and _differ(ours[key], theirs[key])]
    if clashes:
        detail = ", ".join(f"{k!r}: {ours[k]!r} in the module, {theirs[k]!r} in the datamodule" for k in clashes)
        raise RuntimeError(f"Error while merging hparams: the keys {clashes} are present in both the "
                           "LightningModule's and LightningDataModule's hparams but have different values. For the "
                           f"loggers: {detail}. Give the key one value, rename it in one of them, or save one side's "
                           "hyperparameters with logger=False.")
    return {**ours, **theirs}


def _logged(owner: HparamsOwner) -> dict[Any, Any]:
    """What the loggers get of ``owner``: ``hparams_initial`` (what ``save_hyperparameters`` saved, not later
    edits), or ``hparams`` when it was filled by hand."""
    initial = owner.hparams_initial if isinstance(owner, HyperparametersMixin) else {}
    return dict(initial or getattr(owner, "hparams", {}) or {})


def _differ(a: Any, b: Any) -> bool:
    """Whether two values of one hyperparameter disagree (tensors by value; objects that cannot be compared: unless
    they are the same object)."""
    if type(a) is not type(b):
        return True
    if isinstance(a, torch.Tensor):
        return a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.cpu(), b.cpu())
    try:
        return bool(a != b)
    except Exception:  # an object whose comparison is no bool (an array) or fails
        return a is not b


def log_hyperparams(module: torch.nn.Module, datamodule: HparamsOwner | None, loggers: list[Logger], main: bool
                    ) -> None:
    """At the start of ``fit``: on the main process, a word on hyperparameters a checkpoint cannot keep
    (`warn_unstorable`); the merged hyperparameters (`hparams_for_loggers`, checked on every process so that a
    clash stops them all), then on the main process, to each logger, those (when there are any), the module's
    graph, and ``save`` (Lightning's order; ``log_graph`` does nothing unless a logger records graphs, ``save``
    writes the run's ``hparams.yaml`` when a logger keeps one)."""
    if main:
        warn_unstorable(module)
    if not loggers:
        return
    hparams = hparams_for_loggers(module, datamodule)
    if not main:
        return
    for logger in loggers:
        if hparams:
            logger.log_hyperparams(hparams)
        logger.log_graph(module)
        logger.save()


def warn_unstorable(module: torch.nn.Module) -> None:
    """Names the saved hyperparameters a checkpoint keeps only as their ``repr`` (a function, a lock, an object
    that is not plain data), so that ``load_from_checkpoint`` asks for them again; sub-modules are left to
    ``save_hyperparameters``' own warning (their weights are in the checkpoint)."""
    hparams = dict(getattr(module, "hparams", None) or {})
    for name in not_checkpointable(hparams):
        if isinstance(hparams[name], torch.nn.Module):
            continue
        cls = type(module).__name__
        warnings.warn(f"The hyperparameter {name!r} of {cls} ({type(hparams[name]).__name__}) is not plain data: "
                      f"checkpoints keep only its repr, so {cls}.load_from_checkpoint(path, {name}=...) needs it "
                      "passed again. If it is no hyperparameter, leave it out: "
                      f"save_hyperparameters(ignore=[{name!r}]).", UserWarning, stacklevel=user_stacklevel())


def not_checkpointable(hparams: dict[str, Any]) -> list[str]:
    """Names of the hyperparameters a Trainer checkpoint can keep only as their ``repr``."""
    return sorted(k for k, v in hparams.items() if not plain_form(v, for_json=False)[1])
