"""``TrainingModule.load_from_checkpoint``: rebuilding a module from saved hyperparameters and loading its weights.

Owns: where the hyperparameters and weights of each saved form are, and the errors when something is missing (the
format of the ``hparams.json`` written beside exported weights is ``stoker.callbacks.hparams_file``'s). Reads:

* a Trainer checkpoint folder (``Trainer.save_checkpoint`` / ``ModelCheckpoint``): ``model.safetensors`` and the
  Trainer state's ``hyper_parameters``;
* a weights folder (``Accelerator.save_model``, ``ModelCheckpoint(export_weights=True)``'s ``weights/...``) or a
  ``.safetensors`` file, with ``hparams.json`` beside them (written by ``export_weights`` and
  :func:`write_hparams`);
* a single-file PyTorch checkpoint (a Lightning ``.ckpt``, read by the engine): its ``state_dict`` and
  ``hyper_parameters``.

Hyperparameters a checkpoint cannot hold (a sub-model, an arbitrary object: stored as their ``repr``) are listed
as such; loading needs them passed again as overrides. Hyperparameters saved from one container argument come back
in it (``hparams.as_container_argument``). The weights are read whole and go through the module's own
``load_state_dict(state_dict, strict=...)`` (:func:`load_weights`), as in Lightning.
"""

from __future__ import annotations

import importlib
import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any

import torch

# The hparams file is written by ModelCheckpoint (callbacks layer) and read here: one definition, below both.
from stoker.callbacks.hparams_file import HPARAMS_NAME, read_hparams_file, write_hparams
from stoker.user_frame import user_stacklevel

from .hparams import as_container_argument, not_checkpointable
from ..accelerator import is_torch_file, read_torch_file

__all__ = ["HPARAMS_NAME", "INSTANTIATOR", "load_module", "locate", "not_checkpointable", "trainer_checkpoint", "write_hparams"]

_TRAINER_FORMAT = "stoker-trainer"
# What checkpointing.build_payload keeps beside the hooks' dict, under "trainer".
_OWN = ("hyper_parameters_not_stored", "results", "callback_metrics", "other_schedulers")


def trainer_checkpoint(folder: str, check_all: bool = True) -> dict[str, Any] | None:
    """The Trainer's state stored in a ``save_state`` folder (``checkpointing.build_payload``; None: it holds none).
    ``check_all=False`` checksums only the files read here (a resume reads it before ``load_state`` checks all)."""
    from ..accelerator import load_tree, verify_checkpoint

    names = sorted(n for n in verify_checkpoint(folder, files=None if check_all else [])["files"]
                   if n.startswith("custom_checkpoint") and "_process" not in n)
    if not check_all:
        verify_checkpoint(folder, files=names)
    for name in names:
        tree = load_tree(os.path.join(folder, name))
        if isinstance(tree, dict) and tree.get("format") == _TRAINER_FORMAT:
            return tree
    return None


def trainer_own(payload: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(checkpoint, the Trainer's own bookkeeping)`` of a stored state; checkpoints written before the two were
    apart kept the bookkeeping inside the checkpoint dict, where it is taken out here."""
    checkpoint = dict(payload["checkpoint"])
    if "trainer" in payload:
        return checkpoint, dict(payload["trainer"])
    return checkpoint, {k: checkpoint.pop(k) for k in _OWN if k in checkpoint}


def locate(path: str, weights_only: bool | None = None) -> tuple[str | dict[str, torch.Tensor], dict[str, Any] | None,
                                                                 list[str], dict[str, Any] | None, dict[str, Any]]:
    """``(weights: their file or folder, or the tensors themselves; hparams or None, names not stored, trainer
    checkpoint or None, the record the hparams came with)`` of a saved module (the record: the checkpoint or the
    hparams file, which may name a container argument, ``hparams.container_keys``)."""
    from ..accelerator import STATE_NAME

    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, STATE_NAME)):  # a save_state folder
            if any(n.endswith(".distcp") for n in os.listdir(path)):
                raise ValueError(f"{path} is a sharded (FSDP) checkpoint; load_from_checkpoint reads whole weights. "
                                 "Export them with ModelCheckpoint(export_weights=True) or Accelerator.save_model "
                                 "and load that folder.")
            payload = trainer_checkpoint(path)
            if payload is None:
                return os.path.join(path, "model.safetensors"), None, [], None, {}
            checkpoint, own = trainer_own(payload)
            hparams = dict(checkpoint.get("hyper_parameters") or {})
            not_stored = list(own.get("hyper_parameters_not_stored") or [])
            return os.path.join(path, "model.safetensors"), hparams, not_stored, checkpoint, checkpoint
        weights = path
        beside = os.path.join(path, HPARAMS_NAME)
        from ..accelerator import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_NAME

        if not any(os.path.isfile(os.path.join(path, n)) for n in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME,
                                                                    WEIGHTS_NAME)):
            raise FileNotFoundError(
                f"load_from_checkpoint: {path} is neither a checkpoint folder (Trainer.save_checkpoint / "
                "ModelCheckpoint: it would hold stoker_state.json) nor a weights folder (save_model / "
                "ModelCheckpoint(export_weights=True): model.safetensors). Pass one of those, or a .safetensors file."
            )
    elif os.path.isfile(path) and not path.endswith(".safetensors") and is_torch_file(path):
        checkpoint = read_torch_file(path, "load_from_checkpoint", weights_only=weights_only)  # e.g. Lightning's .ckpt
        return checkpoint["state_dict"], checkpoint.get("hyper_parameters"), [], checkpoint, checkpoint
    elif os.path.isfile(path):
        if not path.endswith(".safetensors"):
            raise ValueError(f"load_from_checkpoint: {path} is neither a .safetensors file nor a torch.save file. "
                             "Pass a checkpoint folder, a weights folder, a .safetensors file or a single-file "
                             "PyTorch checkpoint (a Lightning .ckpt).")
        weights, beside = path, os.path.join(os.path.dirname(path), HPARAMS_NAME)
    else:
        raise FileNotFoundError(f"load_from_checkpoint: nothing at {path!r}. Pass a checkpoint folder "
                                "(e.g. checkpoints/last), a weights folder or a .safetensors file.")
    if os.path.isfile(beside):
        hparams, not_stored, record = read_hparams_file(beside)
        return weights, hparams, not_stored, None, record
    return weights, None, [], None, {}


def _constructor_arguments(cls: type, path: str, hparams: dict[str, Any] | None, not_stored: list[str],
                           overrides: dict[str, Any], record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The keyword arguments for ``cls(...)``: saved hyperparameters (in the one argument they came in, when the
    ``record`` names it and ``__init__`` still takes it), then the overrides."""
    signature = inspect.signature(cls.__init__)
    params = list(signature.parameters.values())[1:]  # the first is self, whatever its name
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                   inspect.Parameter.KEYWORD_ONLY)}
    stored = {k: v for k, v in (hparams or {}).items() if k not in not_stored}
    container = as_container_argument(stored, record, prefix)
    if container is not stored and set(container) <= named:
        # the values a checkpoint could not keep are left out of the container (as Lightning drops them)
        hparams, not_stored = container, []
    missing_stored = [n for n in not_stored if n not in overrides and (takes_any or n in named)]
    if missing_stored:
        raise ValueError(
            f"{cls.__name__}.load_from_checkpoint({path!r}): the hyperparameter(s) {missing_stored} could not be "
            "saved (not plain data: e.g. a module or an object; the checkpoint holds only their repr). Pass them "
            "again: " + f"{cls.__name__}.load_from_checkpoint(path, " + ", ".join(f"{n}=..." for n in missing_stored)
            + ")."
        )
    kwargs = {k: v for k, v in (hparams or {}).items() if k not in not_stored}
    kwargs.update(overrides)
    if not takes_any:
        kwargs = {k: v for k, v in kwargs.items() if k in named}
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
                and p.name not in kwargs]
    if required:
        where = "it holds no hyperparameters" if not hparams else f"its hyperparameters are {sorted(hparams)}"
        raise ValueError(
            f"{cls.__name__}.load_from_checkpoint({path!r}) cannot build {cls.__name__}: __init__ needs {required} "
            f"and {where}. Call self.save_hyperparameters() in __init__ (then checkpoints hold them), or pass them: "
            f"{cls.__name__}.load_from_checkpoint(path, " + ", ".join(f"{n}=..." for n in required) + ")."
        )
    return kwargs


# The one builder a checkpoint's hyperparameters may name (``_instantiator``): LightningCLI's, which rebuilds the
# arguments from their parsed configuration (``stoker/cli/module_hparams.py`` writes it).
INSTANTIATOR = "stoker.cli.instantiate_module"


def _build(cls: type, path: str, hparams: dict[str, Any] | None, not_stored: list[str], overrides: dict[str, Any],
           record: Mapping[str, Any], prefix: str = "") -> Any:
    """``cls`` built from its saved hyperparameters; those that name an ``_instantiator`` (a module built by
    ``stoker.cli.LightningCLI``, whose hyperparameters are its parsed configuration) are built by it."""
    instantiator = (hparams or {}).get("_instantiator")
    if instantiator is None:
        return cls(**_constructor_arguments(cls, path, hparams, not_stored, overrides, record, prefix))
    if instantiator != INSTANTIATOR:  # a checkpoint is data: it never chooses which code to import and run
        raise ValueError(f"load_from_checkpoint({path!r}): its hyperparameters name the instantiator "
                         f"{instantiator!r}; the only one a checkpoint may name is {INSTANTIATOR!r} (written by "
                         "stoker.cli.LightningCLI). The checkpoint was edited or comes from elsewhere.")
    module_name, _, name = instantiator.rpartition(".")
    build = getattr(importlib.import_module(module_name), name)
    config = {k: v for k, v in (hparams or {}).items() if k != "_instantiator" and k not in not_stored}
    return build(cls, {**config, **overrides})


def _device(map_location: Any) -> torch.device | None:
    """The device the weights go to. Besides a device, ``torch.load``'s other forms: a dict from saved to wanted
    device, and a function ``(storage, location) -> storage``. The weights are read on the CPU (safetensors), so
    both are asked where ``"cpu"`` goes."""
    if map_location is None:
        return None
    if isinstance(map_location, (str, torch.device)):
        return torch.device(map_location)
    if isinstance(map_location, dict):
        target = map_location.get("cpu", map_location.get(torch.device("cpu")))
        return None if target is None else torch.device(target)
    if callable(map_location):
        moved = map_location(torch.empty(0).untyped_storage(), "cpu")
        return None if moved is None else torch.device(moved.device)
    raise TypeError(f"load_from_checkpoint(map_location={map_location!r}): expected a device ('cpu', 'cuda:0', a "
                    "torch.device), a dict from saved to wanted device, a function (storage, location) -> storage "
                    "as torch.load takes, or None (the weights stay where the new module's parameters are: the CPU).")


def read_hparams_file_for_loading(hparams_file: Any) -> dict[str, Any]:
    """The hyperparameters in ``load_from_checkpoint(hparams_file=...)``: Lightning's forms, a ``.yaml``/``.yml``
    file (the CSV logger's ``hparams.yaml``; JSON is YAML too), a ``.json`` file, or a ``.csv`` file of ``key,value``
    rows (each value read as YAML: ``0.1``, ``true``, ``[1, 2]``, text)."""
    import csv

    import yaml

    if not isinstance(hparams_file, (str, os.PathLike)):
        raise TypeError(f"load_from_checkpoint(hparams_file={hparams_file!r}) must be a path (str or os.PathLike).")
    path = os.fspath(hparams_file)
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".yaml", ".yml", ".json", ".csv"):
        raise ValueError(f"load_from_checkpoint(hparams_file={path!r}): expected a .yaml, .yml, .json or .csv file "
                         "(e.g. the CSVLogger's hparams.yaml).")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load_from_checkpoint(hparams_file={path!r}): no such file.")
    with open(path, newline="" if extension == ".csv" else None, encoding="utf-8") as f:
        if extension == ".csv":
            rows = list(csv.DictReader(f))
            if rows and not {"key", "value"} <= set(rows[0]):
                raise ValueError(f"{path} has no 'key' and 'value' columns; a .csv hparams_file holds key,value rows.")
            hparams = {row["key"]: yaml.safe_load(row["value"]) if row["value"] else None for row in rows}
        else:
            hparams = yaml.safe_load(f)
    if hparams is None:
        return {}
    if not isinstance(hparams, dict):
        raise ValueError(f"{path} holds a {type(hparams).__name__}, not a mapping of hyperparameter names to values.")
    return {str(k): v for k, v in hparams.items()}


def _check_path(cls: type, checkpoint_path: Any, weights_only: Any = None) -> None:
    """The one check of ``load_from_checkpoint``'s ``checkpoint_path`` (modules and data modules), and of the
    ``weights_only`` it takes for Lightning's signature (nothing in a stoker checkpoint is unpickled)."""
    if weights_only is not None and not isinstance(weights_only, bool):
        raise TypeError(f"{cls.__name__}.load_from_checkpoint(weights_only={weights_only!r}): expected True, False "
                        "or None.")
    if not isinstance(checkpoint_path, (str, os.PathLike)):
        raise TypeError(f"{cls.__name__}.load_from_checkpoint: checkpoint_path must be a path (str or os.PathLike), "
                        f"got {type(checkpoint_path).__name__}.")
    if "://" in os.fspath(checkpoint_path):  # Lightning downloads a single-file checkpoint from a URL
        raise ValueError(f"{cls.__name__}.load_from_checkpoint({os.fspath(checkpoint_path)!r}): a URL. A stoker "
                         "checkpoint is a folder, read from this machine's file system: copy the folder here first "
                         "(e.g. with the storage's own copy tool) and pass its local path.")


def load_weights(module: torch.nn.Module, weights: str | dict[str, torch.Tensor], strict: bool) -> None:
    """Loads the saved weights through the module's own ``load_state_dict(state_dict, strict=...)`` (as Lightning
    does: a module that overrides it, e.g. to rename old keys, sees every load), then says which keys a loose load
    left out. A strict load that fails on the keys says which ones, in stoker's words."""
    from ..accelerator import MismatchedKeysError, key_mismatch, read_state_dict, strip_compile_prefix

    if isinstance(weights, dict):  # a single-file checkpoint's state_dict, already read
        state, label = {strip_compile_prefix(k): v for k, v in weights.items()}, "the checkpoint's state_dict"
    else:
        state, label = read_state_dict(weights), weights
    missing, unexpected, groups = key_mismatch(module, set(state))
    for group in groups.values():  # weights the module ties are saved once: give each of its names the tensor
        given = next((state[n] for n in group if n in state), None)
        for name in group if given is not None else ():
            state.setdefault(name, given)
    target = module.state_dict(keep_vars=True)
    actual = {strip_compile_prefix(k): k for k in target}  # a part compiled in __init__ keeps its prefix
    state = {actual.get(k, k): v for k, v in state.items()}
    if not state:
        warnings.warn(f"load_from_checkpoint: {label} holds no weights; {type(module).__name__} keeps the "
                      "parameters its __init__ made.", UserWarning, stacklevel=user_stacklevel())
    assign = any(t.is_meta for t in target.values())  # layers built on the meta device take the tensors as they are
    if assign:
        state = {k: v.to(target[k].dtype) if k in target else v for k, v in state.items()}
    try:
        keys = module.load_state_dict(state, strict=strict, **({"assign": True} if assign else {}))
    except RuntimeError as error:
        if not strict or not (missing or unexpected):
            raise
        raise MismatchedKeysError(
            f"Error(s) loading {label!r} into {type(module).__name__}: missing keys {missing}, unexpected keys "
            f"{unexpected}. Pass strict=False to load the matching keys (or set the module's strict_loading=False). "
            f"(torch's load_state_dict: {error})"
        ) from error
    _warn_left_out(module, keys, strict)


def _warn_left_out(module: torch.nn.Module, keys: Any, strict: bool) -> None:
    """A loose load's report (what ``load_state_dict`` returned): the keys on either side that were not loaded."""
    missing, unexpected = getattr(keys, "missing_keys", None), getattr(keys, "unexpected_keys", None)
    if strict or not isinstance(missing, list) or not isinstance(unexpected, list):
        return  # a load_state_dict of the user's own that reports nothing usable
    for found, where in ((missing, f"of {type(module).__name__} that the checkpoint has no weights for; they keep "
                          "their initial values"), (unexpected, f"in the checkpoint that {type(module).__name__} "
                                                   "does not have; they were not loaded")):
        if found:
            warnings.warn(f"load_from_checkpoint(strict=False): {len(found)} key(s) {where}: {sorted(found)}",
                          UserWarning, stacklevel=user_stacklevel())


def load_module(cls: type, checkpoint_path: Any, map_location: Any, strict: bool | None,
                overrides: dict[str, Any], hparams_file: Any = None, weights_only: bool | None = None) -> Any:
    """See ``TrainingModule.load_from_checkpoint``."""
    _check_path(cls, checkpoint_path, weights_only)
    if not isinstance(cls, type):
        raise TypeError("load_from_checkpoint is a classmethod: call it on the class, e.g. "
                        "MyModule.load_from_checkpoint(path).")
    path = os.path.abspath(os.fspath(checkpoint_path))
    device = _device(map_location)
    weights, hparams, not_stored, checkpoint, record = locate(path, weights_only)
    if hparams_file is not None:  # Lightning's rule: the file's hyperparameters replace the checkpoint's
        hparams = read_hparams_file_for_loading(hparams_file)
        not_stored = [n for n in not_stored if n not in hparams]
    module = _build(cls, path, hparams, not_stored, overrides, record)
    module.configure_model()  # layers it builds exist before the weights load (Lightning's order)
    if checkpoint is not None:
        module.on_load_checkpoint(checkpoint)
    load_weights(module, weights, module.strict_for_loading(strict))
    if device is not None:
        module.to(device)
    return module


def load_datamodule(cls: type, checkpoint_path: Any, hparams_file: Any, overrides: dict[str, Any],
                    weights_only: bool | None = None) -> Any:
    """See ``DataModule.load_from_checkpoint``: the data module built from the hyperparameters a Trainer checkpoint
    saved for it (``hparams_file`` replaces them, ``overrides`` win), with its ``state_dict`` restored."""
    _check_path(cls, checkpoint_path, weights_only)
    from ..accelerator import STATE_NAME

    path = os.path.abspath(os.fspath(checkpoint_path))
    payload = trainer_checkpoint(path) if os.path.isfile(os.path.join(path, STATE_NAME)) else None
    if payload is None:
        raise FileNotFoundError(f"{cls.__name__}.load_from_checkpoint({path!r}): not a Trainer checkpoint folder "
                                "(Trainer.save_checkpoint / ModelCheckpoint). Pass one of those.")
    checkpoint = trainer_own(payload)[0]
    hparams = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    if hparams_file is not None:
        hparams = read_hparams_file_for_loading(hparams_file)
    datamodule = _build(cls, path, hparams, [], overrides, checkpoint, "datamodule_")
    if "datamodule" in checkpoint:
        datamodule.load_state_dict(checkpoint["datamodule"])
    return datamodule

