"""`DataModule`: the data side of a run in one object (Lightning's ``LightningDataModule`` contract).

Owns: the hooks a data module defines (``prepare_data``, ``setup(stage)``, ``teardown(stage)``, the four
``*_dataloader`` methods, ``state_dict``/``load_state_dict``), ``save_hyperparameters``/``hparams``,
:meth:`DataModule.from_datasets`, and two helpers for whoever runs a data module: :func:`defines` (does it provide a
loader hook?) and :func:`prepare_data_once` (the once-per-node rule of ``prepare_data``). It does not own when the
hooks run: that is the Trainer's (``datamodule=`` on ``fit``/``validate``/``test``/``predict``).

The contract, as a Trainer runs it::

    prepare_data()            once per node, on the local main process (once per job with
                              prepare_data_per_node = False); the other processes wait for it
    setup(stage)              on every process; stage is "fit", "validate", "test" or "predict"
    train_dataloader() ...    the loaders the stage needs
    state_dict()              saved in checkpoints; load_state_dict(state) on resume
    teardown(stage)           on every process, also after an exception
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping, Sized
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader, Dataset, IterableDataset

from .hooks import defines_hook
from .class_only import class_only
from .hparams import HyperparametersMixin
from .step_hooks import BatchTransfer

if TYPE_CHECKING:
    from ..accelerator import Accelerator

__all__ = ["DataModule", "LightningDataModule", "defines", "prepare_data_once"]

LOADER_HOOKS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")


class DataModule(HyperparametersMixin, BatchTransfer):
    """Downloads, splits and loads the data of a run: subclass it and define the hooks you need.

    Define ``setup(stage)`` to build datasets (on every process), ``prepare_data()`` for work that must happen once
    per machine (downloads, tokenization to disk; do not set attributes there: other processes never run it), and
    the ``*_dataloader()`` methods the run uses. A loader method that is not defined raises a clear error when
    called; :func:`defines` tells whether one is. Hyperparameters saved with :meth:`save_hyperparameters` are
    in ``self.hparams`` and in checkpoints.

    Attributes:
        prepare_data_per_node: True (default): ``prepare_data`` runs on the local main process of every node;
            False: only on the global main process (for data on a shared file system).
        trainer: The Trainer running this data module, or None.

    Example:
        >>> class MNISTData(DataModule):
        ...     def __init__(self, root: str = "data", batch_size: int = 64):
        ...         super().__init__()
        ...         self.save_hyperparameters()
        ...     def prepare_data(self):
        ...         MNIST(self.hparams.root, download=True)                   # once per node
        ...     def setup(self, stage):
        ...         full = MNIST(self.hparams.root, transform=ToTensor())
        ...         self.train_set, self.val_set = random_split(full, [55000, 5000])
        ...     def train_dataloader(self):
        ...         return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)
        ...     def val_dataloader(self):
        ...         return DataLoader(self.val_set, batch_size=self.hparams.batch_size)
        >>> trainer.fit(model, datamodule=MNISTData())                       # doctest: +SKIP
    """

    prepare_data_per_node: bool = True
    #: The key of its saved hyperparameters in the checkpoint dict the ``on_*_checkpoint`` hooks see.
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"

    def __init__(self) -> None:
        super().__init__()
        self.trainer: Any = None

    # -- data hooks (override these) ------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Work done once per node (or job) before ``setup``: downloads, writing preprocessed files."""

    def setup(self, stage: str) -> None:
        """Builds what ``stage`` ("fit", "validate", "test", "predict") needs; runs on every process."""

    def on_exception(self, exception: BaseException) -> None:
        """An exception (``KeyboardInterrupt`` included) is leaving the run this data module feeds."""

    def teardown(self, stage: str) -> None:
        """Releases what ``setup(stage)`` built; runs on every process, also after an exception."""

    def train_dataloader(self) -> Any:
        """The training loader (``Trainer.fit``)."""
        raise _missing(self, "train_dataloader", "Trainer.fit")

    def val_dataloader(self) -> Any:
        """The validation loader(s) (``Trainer.fit`` when defined, ``Trainer.validate``)."""
        raise _missing(self, "val_dataloader", "Trainer.validate")

    def test_dataloader(self) -> Any:
        """The test loader(s) (``Trainer.test``)."""
        raise _missing(self, "test_dataloader", "Trainer.test")

    def predict_dataloader(self) -> Any:
        """The prediction loader(s) (``Trainer.predict``)."""
        raise _missing(self, "predict_dataloader", "Trainer.predict")

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (tensors, numbers, strings, None, lists, dicts); empty by default."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""

    # -- construction from datasets -------------------------------------------------------------------------------
    @class_only
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, map_location: Any = None, *,
                             hparams_file: str | os.PathLike | None = None, weights_only: bool | None = None,
                             **hparam_overrides: Any) -> Any:
        """The data module a Trainer checkpoint was written with: built from the hyperparameters it saved
        (``save_hyperparameters`` in ``__init__``; ``hparams_file`` replaces them, ``hparam_overrides`` win), its
        ``state_dict`` restored. ``map_location`` is taken for Lightning's signature (a data module holds no
        weights), and ``weights_only`` too (a stoker checkpoint holds no pickled objects).

        Example:
            >>> dm = MyData.load_from_checkpoint("checkpoints/last.ckpt", batch_size=64)  # doctest: +SKIP
        """
        from .loading import load_datamodule

        return load_datamodule(cls, checkpoint_path, hparams_file, hparam_overrides, weights_only)

    @classmethod
    def from_datasets(cls, train_dataset: Any = None, val_dataset: Any = None, test_dataset: Any = None,
                      predict_dataset: Any = None, batch_size: int = 1, num_workers: int = 0,
                      **datamodule_kwargs: Any) -> DataModule:
        """A data module whose loader methods wrap the given datasets in ``DataLoader``s.

        Each argument is a ``Dataset``, or a list/tuple/dict of them (several loaders, in that order or by key). The
        train loaders shuffle (unless the dataset is an ``IterableDataset``); the others keep the order. Loader
        methods are defined only for the datasets given.

        Args:
            train_dataset, val_dataset, test_dataset, predict_dataset: The datasets, or None.
            batch_size: The loaders' batch size.
            num_workers: The loaders' worker processes.
            **datamodule_kwargs: Passed to ``cls(...)``; ``batch_size``/``num_workers`` are passed too when
                ``cls.__init__`` takes them.

        Example:
            >>> dm = DataModule.from_datasets(train_set, val_set, batch_size=32)   # doctest: +SKIP
            >>> trainer.fit(model, datamodule=dm)                                  # doctest: +SKIP
        """
        for name, value in (("batch_size", batch_size), ("num_workers", num_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "batch_size" else 0):
                raise ValueError(f"DataModule.from_datasets({name}={value!r}) must be an int >= "
                                 f"{1 if name == 'batch_size' else 0}.")
        accepted = inspect.signature(cls.__init__).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        extra = {k: v for k, v in (("batch_size", batch_size), ("num_workers", num_workers))
                 if (k in accepted or takes_all) and k not in datamodule_kwargs}
        datamodule = cls(**datamodule_kwargs, **extra)
        for hook, datasets, shuffle in (("train_dataloader", train_dataset, True),
                                        ("val_dataloader", val_dataset, False),
                                        ("test_dataloader", test_dataset, False),
                                        ("predict_dataloader", predict_dataset, False)):
            if datasets is not None:
                _check_datasets(hook, datasets)
                setattr(datamodule, hook, _LoaderFactory(datasets, batch_size, num_workers, shuffle))
        return datamodule

    def __repr__(self) -> str:
        hparams = f"({', '.join(f'{k}={v!r}' for k, v in self.hparams.items())})" if self.hparams else "()"
        return f"{type(self).__name__}{hparams}"

    def __str__(self) -> str:
        """One line per loader method with the size of the dataset(s) it gives now (Lightning's print of a data
        module): ``{Train dataloader: size=64}``, ``1. size=16 ; 2. size=NA`` for several loaders (NA: a dataset
        without a length), ``None`` for a method that is not defined or fails (e.g. before ``setup``)."""
        lines = []
        for label, hook in zip(("Train", "Validation", "Test", "Predict"), LOADER_HOOKS):
            try:
                loaders = getattr(self, hook)()
            except Exception:  # not defined, or what it reads is not built yet: a print must not fail on it
                loaders = None
            lines.append(f"{{{label} dataloader: {_sizes(loaders)}}}")
        return os.linesep.join(lines)


class _LoaderFactory:
    """The loader method ``from_datasets`` installs: builds fresh ``DataLoader``s on every call."""

    def __init__(self, datasets: Any, batch_size: int, num_workers: int, shuffle: bool) -> None:
        self.datasets, self.batch_size, self.num_workers, self.shuffle = datasets, batch_size, num_workers, shuffle

    def _loader(self, dataset: Any) -> DataLoader:
        shuffle = self.shuffle and not isinstance(dataset, IterableDataset)
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers)

    def __call__(self) -> Any:
        datasets = self.datasets
        if isinstance(datasets, Mapping):
            return {key: self._loader(d) for key, d in datasets.items()}
        if isinstance(datasets, (list, tuple)):
            return [self._loader(d) for d in datasets]
        return self._loader(datasets)


def _sizes(loaders: Any) -> str:
    """``size=N`` of a loader's dataset (``NA`` without a length); numbered (or keyed) for a list or dict of loaders."""
    if loaders is None:
        return "None"
    if isinstance(loaders, (list, tuple, Mapping)):
        named = loaders.items() if isinstance(loaders, Mapping) else enumerate(loaders, start=1)
        return " ; ".join(f"{name}. {_sizes(loader)}" for name, loader in named)
    dataset = getattr(loaders, "dataset", None)
    return f"size={len(dataset)}" if isinstance(dataset, Sized) else "size=NA"


def _check_datasets(hook: str, datasets: Any) -> None:
    items: Iterable[Any] = (datasets.values() if isinstance(datasets, Mapping)
                            else datasets if isinstance(datasets, (list, tuple)) else [datasets])
    for item in items:
        if not isinstance(item, Dataset):
            argument = hook.replace("_dataloader", "_dataset")
            raise TypeError(f"DataModule.from_datasets({argument}=...) got a {type(item).__name__}; expected a "
                            "torch.utils.data.Dataset, or a list/tuple/dict of them.")


def _missing(datamodule: DataModule, hook: str, caller: str) -> NotImplementedError:
    return NotImplementedError(
        f"{type(datamodule).__name__} does not define {hook}(); {caller} needs it to return a DataLoader. Define "
        f"{hook}(self) in {type(datamodule).__name__}, or pass the loader(s) to {caller} directly."
    )


def defines(datamodule: Any, hook: str) -> bool:
    """Whether ``datamodule`` provides loader hook ``hook`` (its class overrides it, or ``from_datasets`` set it).

    Example:
        >>> defines(DataModule.from_datasets(train_set), "val_dataloader")   # doctest: +SKIP
        False
    """
    if hook not in LOADER_HOOKS:
        raise ValueError(f"defines(..., {hook!r}): not a loader hook. Expected one of: {', '.join(LOADER_HOOKS)}.")
    return defines_hook(datamodule, hook, DataModule)


LightningDataModule = DataModule  # Lightning's name (a script's `pl.LightningDataModule` after renaming its imports)


def prepare_data_once(obj: object, accelerator: Accelerator) -> None:
    """Runs ``obj.prepare_data()`` once per node on its local main process (once per job when
    ``obj.prepare_data_per_node`` is False, on the main process), then makes every process wait for it.

    Call it on every process, at the same point (it ends with a barrier). ``obj`` is a :class:`DataModule` or
    anything with ``prepare_data`` (a module may define one too).

    Example:
        >>> prepare_data_once(datamodule, trainer.accelerator)               # doctest: +SKIP
    """
    prepare = getattr(obj, "prepare_data", None)
    if not callable(prepare):
        return
    per_node = bool(getattr(obj, "prepare_data_per_node", True))
    chosen = accelerator.is_local_main_process if per_node else accelerator.is_main_process
    error: BaseException | None = None
    if chosen:
        try:
            prepare()
        except Exception as exc:  # told to the other processes below, then raised here
            error = exc
    if accelerator.num_processes > 1:
        # The barrier is a sum of failure flags: a failure on one process stops all of them (a plain barrier would
        # leave the others waiting until a timeout for a process that has already died).
        import torch

        flag = torch.tensor(0.0 if error is None else 1.0, device=accelerator.device)
        failures = int(accelerator.reduce(flag, "sum").item())
        if failures and error is None:
            raise RuntimeError(f"{type(obj).__name__}.prepare_data() failed on {failures} other process(es); their "
                               "error says why.")
    if error is not None:
        raise error
