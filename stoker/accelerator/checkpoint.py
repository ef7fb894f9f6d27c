"""Resumable training state: ``save_state`` / ``load_state`` into folders that are either complete or absent.

Owns: the safe tree format (nested dicts, lists, tuples, strings, numbers, None, tensors, numpy arrays -> one
safetensors file whose metadata holds the structure as JSON), the manifest (size and CRC-32 of every file), the
atomic commit (temporary folder beside the target, fsync, rename), verification, automatic checkpoint naming and
rotation. Loading never unpickles: every file is safetensors or JSON.
Does not own: weight export (``weights.py``), RNG capture (``rng.py``), what a loader's position is (``data.py``).
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import pickle
import re
import shutil
import warnings
import zlib
from collections import Counter, OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .rng import capture_rng_state, restore_rng_state
from .weights import (TIED_KEY, FileRecord, _dedupe, fsync_dir, fsync_file, load_checkpoint_in_model,
                      read_safetensors, write_buffers, write_safetensors)

if TYPE_CHECKING:
    from .accelerator import Accelerator

MANIFEST_NAME = "stoker_manifest.json"
STATE_NAME = "stoker_state.json"
TREE_KEY = "stoker_tree"
_FORMAT = "stoker-checkpoint"
_CHECKPOINT_RE = re.compile(r"checkpoint_(\d+)")
_HINT = "return tensors, numbers, strings, lists or dicts (tuples, None, numpy arrays and torch dtypes also work)"


_DICTS = {dict: "dict", OrderedDict: "odict", Counter: "counter", defaultdict: "defaultdict"}
_KINDS_OF_DICT = {tag: kind for kind, tag in _DICTS.items()}
_FACTORIES = {f.__name__: f for f in (int, float, str, bool, list, dict, set, tuple)}


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete, altered, or not a stoker checkpoint."""


# -- the safe tree format -----------------------------------------------------------------------------------------
class _Encoder:
    """Turns a nested structure into a JSON skeleton plus a dict of tensors stored under generated keys."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.tensors: dict[str, torch.Tensor] = {}
        self._keys: dict[int, str] = {}  # the same tensor object twice is stored once and comes back as one object

    def _tensor(self, t: torch.Tensor, path: str) -> str:
        from .weights import _DTYPES

        if t.dtype not in _DTYPES or t.layout != torch.strided:
            raise TypeError(f"{self.what}{path} is a {t.dtype} {t.layout} tensor, which cannot be stored in "
                            "safetensors; convert it to a dense tensor of a standard dtype.")
        if id(t) not in self._keys:
            self._keys[id(t)] = key = f"t{len(self.tensors)}"
            self.tensors[key] = t
        return self._keys[id(t)]

    def encode(self, obj: Any, path: str = "") -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return str(obj) if isinstance(obj, str) else obj
        if isinstance(obj, torch.Tensor):
            node = {"tensor": self._tensor(obj, path)}
            return {**node, "param": obj.requires_grad} if isinstance(obj, torch.nn.Parameter) else node
        if isinstance(obj, (np.ndarray, np.generic)):
            kind = "ndarray" if isinstance(obj, np.ndarray) else "npscalar"
            array = np.asarray(obj)  # keeps 0-d (ascontiguousarray would make it 1-d)
            try:
                t = torch.from_numpy(array if array.flags.c_contiguous else array.copy(order="C"))
            except (TypeError, ValueError):
                raise TypeError(f"{self.what}{path} is a numpy {kind} of dtype {obj.dtype}, which cannot be stored "
                                f"safely; {_HINT}.") from None
            return {kind: self._tensor(t, path)}
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else {"float": repr(float(obj))}
        if isinstance(obj, bytes):
            return {"bytes": self._tensor(torch.frombuffer(bytearray(obj), dtype=torch.uint8), path)}
        if isinstance(obj, torch.dtype):
            return {"dtype": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.Size):
            return {"size": list(obj)}
        if isinstance(obj, torch.device):
            return {"device": str(obj)}
        # Containers by exact type: a subclass (namedtuple, MultiStepLR's Counter) must come back as itself.
        if type(obj) is tuple:
            return {"tuple": [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        if type(obj) is list:
            return [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if type(obj) in (set, frozenset):
            return {type(obj).__name__: [self.encode(v, f"{path} item {v!r}") for v in obj]}
        factory = getattr(obj, "default_factory", None)
        kind = _DICTS.get(type(obj)) if type(obj) is not defaultdict or factory in _FACTORIES.values() else None
        if kind:
            items = [[self.encode(k, f"{path} key {k!r}"), self.encode(v, f"{path}[{k!r}]")] for k, v in obj.items()]
            return {kind: items, "factory": factory.__name__} if factory else {kind: items}
        text = repr(obj)
        raise TypeError(f"{self.what}{path} is a {type(obj)} ({text[:60] + '...' if len(text) > 60 else text}), "
                        f"which cannot be stored safely; {_HINT}.")


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    tag = next(iter(node), None) if isinstance(node, dict) else None
    value = node.get(tag) if tag else None
    if tag == "tensor":
        t = tensors[value]
        return torch.nn.Parameter(t, requires_grad=node["param"]) if "param" in node else t
    if tag in ("ndarray", "npscalar"):
        array = tensors[value].numpy()
        return array if tag == "ndarray" else array[()]
    if tag == "bytes":
        return tensors[value].numpy().tobytes()
    if tag == "float":
        return float(value)
    if tag == "tuple":
        return tuple(_decode(v, tensors) for v in value)
    if tag in _KINDS_OF_DICT:
        pairs = {_decode(k, tensors): _decode(v, tensors) for k, v in value}
        if tag == "defaultdict":
            return defaultdict(_FACTORIES[node["factory"]], pairs)
        return pairs if tag == "dict" else _KINDS_OF_DICT[tag](pairs)
    if tag in ("set", "frozenset"):
        return (set if tag == "set" else frozenset)(_decode(v, tensors) for v in value)
    if tag == "dtype" and isinstance(getattr(torch, value, None), torch.dtype):
        return getattr(torch, value)
    if tag == "size":
        return torch.Size(value)
    if tag == "device":
        return torch.device(value)
    raise CheckpointError(f"Unknown node {str(node)[:80]!r} in a stoker tree; the file was altered or written by a "
                          "newer stoker.")


def save_tree(path: str, obj: Any, what: str = "state", fsync: bool = True) -> FileRecord:
    """Stores ``obj`` (nested dict/list/tuple/str/int/float/bool/None/tensor/ndarray) as one safetensors file.

    Raises ``TypeError`` naming the object's path (``what`` + ``['key'][0]``...) for anything else, before
    anything is written. Dict keys may be any of the scalar types (optimizer state uses ints).

    Example:
        >>> save_tree("opt.safetensors", optimizer.state_dict(), what="optimizer #0 state_dict()")
        >>> optimizer.load_state_dict(load_tree("opt.safetensors"))
    """
    encoder = _Encoder(what)
    skeleton = json.dumps(encoder.encode(obj), separators=(",", ":"), allow_nan=False)
    return write_safetensors(path, encoder.tensors, {"format": "pt", TREE_KEY: skeleton}, fsync=fsync)


def load_tree(path: str) -> Any:
    """Reads a file written by :func:`save_tree` (tensors are memory-mapped copy-on-write, on the CPU)."""
    tensors, metadata = read_safetensors(path)
    if TREE_KEY not in metadata:
        raise CheckpointError(f"{path} is a safetensors file without a stoker tree in its metadata; it was not "
                              "written by save_state().")
    try:
        return _decode(json.loads(metadata[TREE_KEY]), tensors)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path} holds a malformed stoker tree ({type(e).__name__}: {e}); the file was altered "
                              "or written by another tool.") from e


# -- manifest, verification, atomic commit --------------------------------------------------------------------------
def _crc_file(path: str) -> int:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return zlib.crc32(m)  # straight from the page cache, no copy


def _read_manifest(path: str) -> dict[str, Any]:
    manifest_path = os.path.join(path, MANIFEST_NAME)
    if not os.path.isfile(manifest_path):
        raise CheckpointError(
            f"{path} has no {MANIFEST_NAME}: it is not a complete stoker checkpoint (an interrupted save, or a "
            "folder written by another tool). Pass a folder written by save_state()."
        )
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("format") != _FORMAT or not isinstance(manifest.get("files"), dict):
            raise ValueError(f"format {manifest.get('format')!r}")
    except (ValueError, AttributeError) as e:
        raise CheckpointError(f"{manifest_path} is not a stoker manifest ({e}); the checkpoint was altered or "
                              "written by another tool.") from e
    return manifest


def verify_checkpoint(path: str | os.PathLike, files: list[str] | None = None) -> dict[str, Any]:
    """Checks a checkpoint folder against its manifest; returns the manifest.

    Raises :class:`CheckpointError` naming the file when a file is missing, truncated or altered (size and
    CRC-32), when the manifest is missing or foreign, or when the folder holds files the manifest does not list
    (nothing unlisted is ever read). ``files`` limits the checksum to those names.

    Example:
        >>> verify_checkpoint("runs/exp/checkpoints/checkpoint_3")["files"].keys()
        dict_keys(['model.safetensors', 'optimizer.safetensors', ...])
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path!r} is not a folder; pass a checkpoint folder written by save_state().")
    manifest = _read_manifest(path)
    listed = manifest["files"]
    extra = sorted(set(os.listdir(path)) - set(listed) - {MANIFEST_NAME})
    if extra:
        raise CheckpointError(f"{path} holds files its manifest does not list: {extra}. stoker refuses folders with "
                              "unknown files (nothing of them was read); move them out if you trust them.")
    for name in listed if files is None else files:
        file = os.path.join(path, name)
        if name not in listed or not os.path.isfile(file):
            where = "is missing" if name in listed else "is not listed in the manifest"
            raise CheckpointError(f"{file} {where}: the checkpoint is incomplete or was altered.")
        size, expected = os.path.getsize(file), listed[name]
        if size != expected["size"]:
            raise CheckpointError(f"{file} has {size} bytes but the manifest records {expected['size']}: the file "
                                  "was truncated or altered.")
        crc = f"{_crc_file(file):08x}"
        if crc != expected["crc32"]:
            raise CheckpointError(f"{file} does not match its checksum (CRC-32 {crc}, manifest {expected['crc32']}): "
                                  "the file was altered or corrupted.")
    return manifest


# What torch.distributed.checkpoint's ``.metadata`` pickle may name: its own dataclasses and torch value types.
_DCP_GLOBALS = {("torch.distributed.checkpoint.metadata", n) for n in (
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
    "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch.serialization", "_get_layout"),
    ("torch", "Size"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict")}


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        is_dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if (module, name) in _DCP_GLOBALS or is_dtype:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which is not checkpoint metadata")


def check_dcp_metadata(path: str) -> None:
    """Refuses a ``torch.distributed.checkpoint`` folder whose ``.metadata`` pickle names anything but DCP's own
    metadata classes and torch value types (torch would run whatever it names when it unpickles the file)."""
    file = os.path.join(path, ".metadata")
    try:
        with open(file, "rb") as f:
            _DataOnlyUnpickler(f).load()
    except Exception as e:  # any failure to read it as plain metadata is a refusal
        raise CheckpointError(f"{file} is not plain torch.distributed.checkpoint metadata ({e}); stoker does not "
                              "load it. Re-save the checkpoint with save_state().") from e


def _aside(target: str, kind: str) -> str:
    parent, name = os.path.split(os.path.abspath(target))
    return os.path.join(parent, f".{name}.stoker-{kind}")


def _is_complete(path: str) -> bool:
    try:
        _read_manifest(path)
        return True
    except CheckpointError:
        return False


def _recover(target: str) -> None:
    """Cleans what an interrupted save left beside ``target``: temporary and half-deleted folders go; an old
    checkpoint moved aside (rename fallback) goes back when the new one never arrived."""
    old = _aside(target, "old")
    if os.path.isdir(old) and not os.path.exists(target) and _is_complete(old):
        os.rename(old, target)
    for kind in ("tmp", "old", "del"):
        shutil.rmtree(_aside(target, kind), ignore_errors=True)


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two folders (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _remove_checkpoint(path: str) -> None:
    """Deletes a checkpoint so that no half-deleted folder is ever left under its name."""
    doomed = _aside(path, "del")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def commit_checkpoint(tmp: str, target: str, records: dict[str, FileRecord]) -> None:
    """Writes the manifest into the finished folder ``tmp``, makes it durable and renames it to ``target``.

    ``records`` has size and CRC of the files this process wrote; other files (other processes') are hashed
    here. An existing ``target`` is swapped out atomically and then deleted, so the name always holds a complete
    checkpoint.
    """
    files = {}
    for name in sorted(os.listdir(tmp)):
        record = records.get(name) or FileRecord(os.path.getsize(os.path.join(tmp, name)),
                                                  _crc_file(os.path.join(tmp, name)))
        files[name] = {"size": record.size, "crc32": f"{record.crc32:08x}"}
    manifest = json.dumps({"format": _FORMAT, "version": 1, "files": files}, indent=1) + "\n"
    write_buffers(os.path.join(tmp, MANIFEST_NAME), [manifest.encode()])
    fsync_dir(tmp)
    if not os.path.exists(target):
        os.rename(tmp, target)
    elif _exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)  # ``tmp`` now holds the replaced checkpoint
    else:  # no atomic swap here: move the old one aside (load_state puts it back if we die in between)
        os.rename(target, _aside(target, "old"))
        os.rename(tmp, target)
        shutil.rmtree(_aside(target, "old"), ignore_errors=True)
    fsync_dir(os.path.dirname(target))


# -- automatic naming ----------------------------------------------------------------------------------------------
def list_checkpoints(project_dir: str | os.PathLike) -> list[str]:
    """Complete ``checkpoint_{n}`` folders under ``{project_dir}/checkpoints``, oldest (lowest n) first.

    Folders without a stoker manifest (foreign, or an interrupted save) and hidden temporary folders are ignored.

    Example:
        >>> list_checkpoints("runs/exp")
        ['runs/exp/checkpoints/checkpoint_3', 'runs/exp/checkpoints/checkpoint_4']
    """
    root = os.path.join(os.fspath(project_dir), "checkpoints")
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _CHECKPOINT_RE.fullmatch(name)
        if match and _is_complete(os.path.join(root, name)):
            found.append((int(match.group(1)), os.path.join(root, name)))
    return [path for _, path in sorted(found)]


def newest_checkpoint(project_dir: str | os.PathLike) -> str | None:
    """The complete automatic checkpoint with the highest number, or None."""
    found = list_checkpoints(project_dir)
    return found[-1] if found else None


def rotate_checkpoints(project_dir: str | os.PathLike, total_limit: int) -> list[str]:
    """Deletes the oldest complete automatic checkpoints so that at most ``total_limit`` remain; returns them."""
    doomed = list_checkpoints(project_dir)[:-total_limit]
    for path in doomed:
        _remove_checkpoint(path)
    return doomed


def _sweep(root: str) -> None:
    for name in os.listdir(root) if os.path.isdir(root) else []:
        match = re.fullmatch(r"\.(checkpoint_\d+)\.stoker-(tmp|old|del)", name)
        if match:
            _recover(os.path.join(root, match.group(1)))


# -- save_state / load_state ---------------------------------------------------------------------------------------
def _name(stem: str, i: int, rank: int = 0) -> str:
    """Accelerate's names as safetensors (``optimizer.safetensors``, ``optimizer_1.safetensors``); files a process
    writes for itself get ``_process{rank}`` (rank 0 keeps the plain name)."""
    stem += f"_process{rank}" if rank else ""
    return f"{stem}.safetensors" if i == 0 else f"{stem}_{i}.safetensors"


def _parts(accelerator: Accelerator, rank: int) -> tuple[list, list]:
    """``(file, object, label)`` of what the main process saves for all, and what each process saves for itself
    (loader positions and user objects may differ between processes)."""
    optimizers = [] if accelerator.strategy.shards_parameters else accelerator._optimizers  # FSDP: through DCP
    shared = [(_name("optimizer", i), o, f"optimizer #{i}") for i, o in enumerate(optimizers)]
    shared += [(_name("scheduler", i), s, f"scheduler #{i}") for i, s in enumerate(accelerator._schedulers)]
    shared.append(("scaler.safetensors", accelerator.precision, "grad scaler"))
    own = [(_name("dataloader", i, rank), d, f"dataloader #{i}") for i, d in enumerate(accelerator._dataloaders)]
    own += [(_name("custom_checkpoint", i, rank), o, f"register_for_checkpointing object #{i}")
            for i, o in enumerate(accelerator._custom_objects)]
    return shared, own


def _target(accelerator: Accelerator, output_dir: str | None) -> str:
    if output_dir is not None:
        return os.path.abspath(output_dir)
    config = accelerator.project_configuration
    if not config.automatic_checkpoint_naming or config.project_dir is None:
        raise ValueError("save_state() without output_dir needs ProjectConfiguration(project_dir=..., "
                         "automatic_checkpoint_naming=True); otherwise pass a folder: save_state('ckpt').")
    target = os.path.abspath(os.path.join(config.project_dir, "checkpoints", f"checkpoint_{config.iteration}"))
    if os.path.exists(target):
        raise ValueError(
            f"{target} already exists (ProjectConfiguration.iteration={config.iteration}). Call load_state() first "
            "so that numbering continues after the newest checkpoint, or set ProjectConfiguration(iteration=...)."
        )
    return target


def save_state(accelerator: Accelerator, output_dir: str | None = None, safe_serialization: bool = True,
               **_: Any) -> str:
    """Writes everything needed to resume into ``output_dir`` (or the next automatic checkpoint); returns it.

    Models (safetensors, tied weights once), optimizers, schedulers, the grad scaler and counters from the main
    process; from every process its RNG states, loader positions, ``register_for_checkpointing`` objects and the
    gradients of an unfinished accumulation window. FSDP models and optimizers go through
    ``torch.distributed.checkpoint``. The folder appears complete or not at all; with ``total_limit`` the oldest
    automatic checkpoints are deleted after it is complete. ``safe_serialization`` is accepted for Accelerate
    compatibility: stoker always writes safetensors and JSON.

    Example:
        >>> accelerator.save_state()  # ProjectConfiguration(automatic_checkpoint_naming=True)
        'runs/exp/checkpoints/checkpoint_0'
    """
    config, auto = accelerator.project_configuration, output_dir is None
    target = _target(accelerator, output_dir)
    tmp = _aside(target, "tmp")
    sharded = accelerator.strategy.shards_parameters
    # Collective under FSDP, and mere references elsewhere: every process asks for them.
    model_states = [] if sharded else [accelerator.get_state_dict(m) for m in accelerator._models]
    if accelerator.is_main_process:
        if os.path.exists(target) and not _is_complete(target) and (not os.path.isdir(target) or os.listdir(target)):
            raise ValueError(f"save_state({output_dir!r}): the folder exists and is not a stoker checkpoint; "
                             "stoker replaces only its own checkpoints. Choose a new or empty folder.")
        _sweep(os.path.dirname(target)) if auto else _recover(target)
        os.makedirs(tmp)
    accelerator.wait_for_everyone()
    try:
        if sharded:  # every process writes its shards (__{rank}_0.distcp), the main one DCP's .metadata
            accelerator.strategy.save_sharded_state(tmp, accelerator._models, accelerator._optimizers)
        records = _write_state(accelerator, tmp, model_states, auto)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            commit_checkpoint(tmp, target, records)
            if auto and config.total_limit is not None:
                rotate_checkpoints(config.project_dir, config.total_limit)
    except BaseException:
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    accelerator.wait_for_everyone()
    if auto:
        config.iteration += 1
    return target


def _write_state(accelerator: Accelerator, tmp: str, model_states: list, auto: bool) -> dict[str, FileRecord]:
    rank, main = accelerator.process_index, accelerator.is_main_process
    shared, own = _parts(accelerator, rank)
    jobs = [(f"random_states_{rank}.safetensors", capture_rng_state(), f"RNG state of process {rank}")]
    jobs += [(name, obj.state_dict(), f"{label} state_dict()") for name, obj, label in own + (shared if main else [])]
    encoded = []
    for name, obj, what in jobs:  # everything is encoded first: an unsafe user object fails before any write
        encoder = _Encoder(what)
        skeleton = json.dumps(encoder.encode(obj), separators=(",", ":"), allow_nan=False)
        encoded.append((name, encoder.tensors, {"format": "pt", TREE_KEY: skeleton}))
    counters = dict(accelerator._counters_state_dict())
    for i, state in enumerate(model_states if main else []):
        stored, aliases = _dedupe(state)
        encoded.append((_name("model", i), stored, {"format": "pt", TIED_KEY: json.dumps(aliases)}))
    if counters.get("micro_step", 0) > 0:  # an open accumulation window: its gradients, per process (no sync yet)
        for i, model in enumerate([] if accelerator.strategy.shards_parameters else accelerator._models):
            grads = {n: p.grad for n, p in accelerator.unwrap_model(model).named_parameters() if p.grad is not None}
            encoded.append((_name("gradients", i, rank), grads, {"format": "pt"}))
    records = {name: write_safetensors(os.path.join(tmp, name), tensors, metadata, fsync=False)
               for name, tensors, metadata in encoded}
    if main:
        if auto:
            counters["iteration"] = accelerator.project_configuration.iteration + 1  # the state after this save
        state = {"counters": counters, "num_processes": accelerator.num_processes,
                 "counts": {k: len(getattr(accelerator, f"_{k}")) for k in _KINDS}}
        records[STATE_NAME] = write_buffers(os.path.join(tmp, STATE_NAME), [json.dumps(state, indent=1).encode()],
                                            fsync=False)
    # Durability last and in parallel: the disk flushes every file at once instead of one after another.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(fsync_file, [os.path.join(tmp, n) for n in records]))
    return records


_KINDS = ("models", "optimizers", "schedulers", "dataloaders", "custom_objects")


def _source(accelerator: Accelerator, input_dir: str | None) -> str:
    if input_dir is not None:
        path = os.path.abspath(input_dir)
        if accelerator.is_main_process and not os.path.exists(path):
            _recover(path)  # an interrupted replacement may have left the old checkpoint aside
        return path
    config = accelerator.project_configuration
    if not config.automatic_checkpoint_naming or config.project_dir is None:
        raise ValueError("load_state() without input_dir needs ProjectConfiguration(project_dir=..., "
                         "automatic_checkpoint_naming=True); otherwise pass the folder: load_state('ckpt').")
    newest = newest_checkpoint(config.project_dir)
    if newest is None:
        raise FileNotFoundError(f"load_state(): no complete checkpoint under "
                                f"{os.path.join(config.project_dir, 'checkpoints')}; save_state() writes them.")
    return newest


def load_state(accelerator: Accelerator, input_dir: str | None = None, strict: bool = True, **_: Any) -> None:
    """Restores what :func:`save_state` wrote, after checking every file it reads against the manifest.

    Without ``input_dir`` (automatic naming) it takes the newest complete checkpoint. The next automatic save
    after loading ``checkpoint_{n}`` is ``checkpoint_{n+1}``. Loader positions are restored only with
    ``DataLoaderConfiguration(use_stateful_dataloader=True)``, as in Accelerate. A process that has no files of
    its own in the checkpoint (saved by fewer processes) takes the main process's.

    Example:
        >>> accelerator.load_state()  # the newest complete checkpoint_{n}
    """
    path = _source(accelerator, input_dir)
    accelerator.wait_for_everyone()
    files = verify_checkpoint(path, files=[STATE_NAME])["files"]
    with open(os.path.join(path, STATE_NAME), encoding="utf-8") as f:
        state = json.load(f)
    stateful = accelerator.dataloader_config.use_stateful_dataloader
    for kind in _KINDS:
        saved, have = state["counts"][kind], len(getattr(accelerator, f"_{kind}"))
        if saved != have and (kind != "dataloaders" or stateful):
            raise ValueError(f"{path} holds {saved} {kind} but {have} were prepared/registered; prepare the same "
                             "objects in the same order as when saving.")
    rank = accelerator.process_index
    shared, own = _parts(accelerator, rank)
    if any(name not in files for name, _, _ in own):
        own = _parts(accelerator, 0)[1]
    parts = shared + [p for p in own if stateful or not p[0].startswith("dataloader")]
    sharded = accelerator.strategy.shards_parameters
    models = [(_name("model", i), _name("gradients", i, rank)) for i in range(len(accelerator._models))]
    models = [] if sharded else models
    names = [n for n, _, _ in parts] + [n for pair in models for n in pair if n in files]
    names += [n for n in files if sharded and (n.endswith(".distcp") or n == ".metadata")]
    rng_name = f"random_states_{rank}.safetensors"
    verify_checkpoint(path, files=names + ([rng_name] if rng_name in files else []))
    if sharded:
        check_dcp_metadata(path)  # DCP unpickles its .metadata: only after proving it holds nothing but data
        accelerator.strategy.load_sharded_state(path, accelerator._models, accelerator._optimizers)
    for model, (weights, grads) in zip(accelerator._models, models):
        module = accelerator.unwrap_model(model)
        load_checkpoint_in_model(module, os.path.join(path, weights), strict=strict)
        saved = read_safetensors(os.path.join(path, grads))[0] if grads in files else {}
        for name, param in module.named_parameters():
            if name in saved:
                param.grad = saved[name].to(param.device, copy=True)
    for name, obj, _ in parts:
        obj.load_state_dict(load_tree(os.path.join(path, name)))
    accelerator._load_counters_state_dict(state["counters"])
    iteration = int(state["counters"].get("iteration", 0))
    match = _CHECKPOINT_RE.fullmatch(os.path.basename(path))
    if match:  # whatever the counter says, never reuse the number of the checkpoint just loaded
        iteration = max(iteration, int(match.group(1)) + 1)
    accelerator.project_configuration.iteration = iteration
    if rng_name in files:
        restore_rng_state(load_tree(os.path.join(path, rng_name)))
    else:
        warnings.warn(f"{path} has no {rng_name} (saved by {state['num_processes']} processes); this process keeps "
                      "its current RNG state.", stacklevel=3)
    accelerator.wait_for_everyone()
