"""Model weights on disk: Hugging Face safetensors files, shards + index, and ``.bin`` exports.

Owns the weight export behind ``Accelerator.save_model`` (:func:`save_model_weights`) and the import
:func:`load_checkpoint_in_model`. The byte-level safetensors writer/reader lives in ``safetensors_io.py``; the
resumable training state is ``checkpoint.py``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from .atomic import contained

from .safetensors_io import fsync_path, read_safetensors, write_buffers, write_safetensors
from .torch_file import read_torch_file

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_NAME = "pytorch_model.bin"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
TIED_KEY = "stoker_tied"  # safetensors metadata / index metadata: {alias: name of the tensor actually stored}
_UNITS = {"TIB": 2**40, "GIB": 2**30, "MIB": 2**20, "KIB": 2**10, "TB": 10**12, "GB": 10**9, "MB": 10**6,
          "KB": 10**3, "B": 1}


class LoadResult(NamedTuple):
    """What :func:`load_checkpoint_in_model` returns: model keys the checkpoint lacked, and checkpoint keys the
    model lacks (both in the checkpoint's naming, without ``_orig_mod.``)."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class MismatchedKeysError(RuntimeError, ValueError):
    """``strict=True`` loading found missing or unexpected keys (a RuntimeError like torch's, and a ValueError)."""


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or a string such as ``"10GB"`` (10**9), ``"500MB"``, ``"2KB"``, ``"1GiB"`` (2**30).

    As in Hugging Face's ``convert_file_size_to_int``, a lower-case ``b`` after a decimal prefix means bits
    (``"8Mb"`` is 10**6 bytes).

    Example:
        >>> parse_size("2KB"), parse_size("1MiB"), parse_size(123)
        (2000, 1048576, 123)
    """
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise ValueError(f"max_shard_size={size!r} must be a positive number of bytes, e.g. 10**9 or '1GB'.")
        return size
    if not isinstance(size, str):
        raise TypeError(f"max_shard_size={size!r} must be an int (bytes) or a string such as '10GB' or '500MB'.")
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]*)\s*", size)
    unit = match.group(2).upper() if match else ""
    if not match or (unit or "B") not in _UNITS:
        raise ValueError(
            f"max_shard_size={size!r} is not a size. Use bytes or a number with one of the units "
            f"{', '.join(sorted(_UNITS, key=_UNITS.get))}, e.g. '10GB', '500MB', '2KB' or '1GiB'."
        )
    value = round(float(match.group(1)) * _UNITS[unit or "B"])
    if unit and "I" not in unit and match.group(2).endswith("b"):
        value //= 8
    if value <= 0:
        raise ValueError(f"max_shard_size={size!r} must be at least one byte.")
    return value



# -- export ---------------------------------------------------------------------------------------------------------
def strip_compile_prefix(name: str) -> str:
    """``"enc._orig_mod.w"`` -> ``"enc.w"``: names as the uncompiled module has them."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def _dedupe(state_dict: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Splits tensors into those to store and aliases (same memory, same view) of an earlier one."""
    stored: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for raw_name, tensor in state_dict.items():
        name = strip_compile_prefix(raw_name)
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state_dict[{raw_name!r}] is a {type(tensor).__name__}; only tensors can be saved.")
        if name in stored or name in aliases:
            raise ValueError(f"state_dict has {name!r} twice once '_orig_mod.' prefixes are removed; rename one.")
        if tensor.layout != torch.strided:
            raise TypeError(f"state_dict[{raw_name!r}] has layout {tensor.layout}; only dense tensors can be saved. "
                            "Call .to_dense() on it first.")
        if tensor.device.type == "meta":
            raise ValueError(f"state_dict[{raw_name!r}] is on the meta device and has no data to save; load or "
                             "materialise the weights first.")
        ptr = tensor.untyped_storage().data_ptr()
        key = (tensor.device, ptr, tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() and ptr and key in seen:  # empty tensors all share address 0: never aliases
            aliases[name] = seen[key]
        else:
            seen.setdefault(key, name)
            stored[name] = tensor
    return stored, aliases


def _shards(tensors: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > limit:  # a tensor larger than the limit gets a shard of its own
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _write_bin(path: str, shard: dict[str, torch.Tensor], aliases: dict[str, str]) -> None:
    plain = {}
    for name, t in shard.items():
        t = t.detach().cpu()
        if not t.is_contiguous() or t.untyped_storage().nbytes() != t.numel() * t.element_size():
            t = t.clone(memory_format=torch.contiguous_format)  # torch.save would write the whole storage
        plain[name] = t
    plain.update({alias: plain[name] for alias, name in aliases.items()})  # same object: stored once, re-tied
    with open(path, "wb") as f:
        torch.save(plain, f)
        f.flush()
        os.fsync(f.fileno())


def save_model_weights(state_dict: Mapping[str, torch.Tensor], save_directory: str | os.PathLike,
                       max_shard_size: int | str = "10GB", safe_serialization: bool = True) -> list[str]:
    """Exports weights in Hugging Face's layout; returns the paths written.

    One ``model.safetensors``, or ``model-00001-of-0000N.safetensors`` shards plus ``model.safetensors.index.json``
    when the weights exceed ``max_shard_size`` (``pytorch_model*.bin`` with ``safe_serialization=False``).
    Tensors sharing memory (tied weights) are stored once; the alias is recorded under ``stoker_tied`` in the
    file's and the index's metadata and re-tied by :func:`load_checkpoint_in_model`. ``torch.compile``'s
    ``_orig_mod.`` prefixes are removed. Files are written under temporary names and renamed into place, the
    index last; stale files of an older export are removed afterwards.

    Example:
        >>> save_model_weights(model.state_dict(), "export", max_shard_size="500MB")
        ['export/model.safetensors']
    """
    limit = parse_size(max_shard_size)
    directory = os.fspath(save_directory)
    stored, aliases = _dedupe(state_dict)
    shards = _shards(stored, limit)
    prefix, ext = ("model", "safetensors") if safe_serialization else ("pytorch_model", "bin")
    n = len(shards)
    names = [f"{prefix}.{ext}"] if n == 1 else [f"{prefix}-{i + 1:05d}-of-{n:05d}.{ext}" for i in range(n)]
    os.makedirs(directory, exist_ok=True)
    staged: dict[str, str] = {}
    weight_map: dict[str, str] = {}
    try:
        for name, shard in zip(names, shards):
            own = {a: c for a, c in aliases.items() if c in shard}
            staged[name] = tmp = os.path.join(directory, f".{name}.stoker-tmp-{os.getpid()}")
            if safe_serialization:
                write_safetensors(tmp, shard, {"format": "pt", **({TIED_KEY: json.dumps(own)} if own else {})})
            else:
                _write_bin(tmp, shard, own)
                weight_map.update(dict.fromkeys(own, name))
            weight_map.update(dict.fromkeys(shard, name))
        if n > 1:
            total = sum(t.numel() * t.element_size() for t in stored.values())
            meta: dict[str, Any] = {"total_size": total, **({TIED_KEY: aliases} if aliases else {})}
            index = json.dumps({"metadata": meta, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"
            index_name = f"{prefix}.{ext}.index.json"
            staged[index_name] = tmp = os.path.join(directory, f".{index_name}.stoker-tmp-{os.getpid()}")
            write_buffers(tmp, [index.encode()])
        _commit_export(directory, staged, prefix, ext)
    finally:
        for tmp in staged.values():
            if os.path.exists(tmp):
                os.remove(tmp)
    return [os.path.join(directory, name) for name in staged]


def _commit_export(directory: str, staged: dict[str, str], prefix: str, ext: str) -> None:
    """Renames staged files into place so that a reader never takes a mix of two exports for one.

    Readers prefer the single file over an index, so: a new single file replaces the old view in one rename; new
    shards become visible only through the index, renamed last. Only when new shards reuse old shard names is
    the old index removed first: a crash then leaves a folder without index (visibly incomplete), not a mix.
    """
    single, index = f"{prefix}.{ext}", f"{prefix}.{ext}.index.json"
    pattern = re.compile(rf"{re.escape(prefix)}-\d{{5}}-of-\d{{5}}\.{re.escape(ext)}")
    old = {f for f in os.listdir(directory) if f in (single, index) or pattern.fullmatch(f)}
    if index in old and (old & set(staged)) - {single, index}:
        os.remove(os.path.join(directory, index))
    for name in sorted(staged, key=lambda f: f == index):
        os.replace(staged[name], os.path.join(directory, name))
    fsync_path(directory)
    for name in sorted(old - set(staged), key=lambda f: (f != single, f != index)):
        os.remove(os.path.join(directory, name))
    fsync_path(directory)


# -- import ---------------------------------------------------------------------------------------------------------
def weight_files(checkpoint: str) -> tuple[list[str], dict[str, str]]:
    """The weight files of ``checkpoint`` (a file, an index or a folder) and the index's tied aliases."""
    if os.path.isdir(checkpoint):
        found = [n for n in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
                 if os.path.isfile(os.path.join(checkpoint, n))]
        if not found:
            found = sorted(n for n in os.listdir(checkpoint) if n.endswith(".index.json"))
            if len(found) != 1:
                raise ValueError(
                    f"{checkpoint} holds {'several' if found else 'no'} weights: expected {SAFE_WEIGHTS_NAME}, "
                    f"{SAFE_WEIGHTS_INDEX_NAME}, {WEIGHTS_NAME} or {WEIGHTS_INDEX_NAME} (as written by save_model)"
                    + (f", found indexes {found}; pass the one to load." if found else ".")
                )
        checkpoint = os.path.join(checkpoint, found[0])
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f"load_checkpoint_in_model: no file or folder at {checkpoint!r}.")
    if not checkpoint.endswith(".index.json"):
        return [checkpoint], {}
    with open(checkpoint, encoding="utf-8") as f:
        try:
            index = json.load(f)
            weight_map, meta = index["weight_map"], index.get("metadata") or {}
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{checkpoint} is not a Hugging Face index (a JSON object with 'weight_map'): {e}") from e
    if not isinstance(weight_map, dict):
        raise ValueError(f"{checkpoint}: 'weight_map' is a {type(weight_map).__name__}, expected an object mapping "
                         "tensor names to shard files.")
    folder = os.path.dirname(checkpoint)
    # Shards must lie inside the index's folder: an absolute name, ``../`` or a link out of it is refused.
    files = {n: contained(folder, n, f"{checkpoint} (weight_map entry for {key!r})") for key, n in weight_map.items()}
    return list(dict.fromkeys(files.values())), dict(meta.get(TIED_KEY) or {})


def read_weight_file(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    if path.endswith(".safetensors"):
        tensors, meta = read_safetensors(path)
        return tensors, json.loads(meta.get(TIED_KEY, "{}"))
    data = read_torch_file(path, "load_checkpoint_in_model")["state_dict"]  # also a training checkpoint's weights
    if not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"{path} does not hold a dict of tensors (its state_dict holds other values too).")
    return data, {}


def _placement(model: torch.nn.Module, device_map: Any) -> dict[str, torch.device]:
    """Device of every state-dict entry under ``device_map`` ({module name prefix: device})."""
    if isinstance(device_map, str) or not isinstance(device_map, Mapping):
        raise NotImplementedError(
            f"device_map={device_map!r} is not supported: stoker places weights by an explicit mapping of module "
            "names to devices, e.g. device_map={'': 'cuda:0'} (all on one device) or {'encoder': 'cuda:0', "
            "'decoder': 'cpu'}; automatic planning ('auto', 'balanced', 'sequential') is not implemented."
        )
    modules = dict(model.named_modules())
    devices = {}
    for key, value in device_map.items():
        if key not in modules:
            raise ValueError(f"device_map key {key!r} is not a module of the model; use '' for the whole model or "
                             f"names such as {list(modules)[1:4]}.")
        if value == "disk":
            raise NotImplementedError("device_map value 'disk' (offloading) is not supported; use a device.")
        devices[key] = torch.device(value)
    placement, uncovered = {}, []
    for name in model.state_dict(keep_vars=True):
        keys = [k for k in devices if k == "" or name == k or name.startswith(k + ".")]
        if keys:
            placement[name] = devices[max(keys, key=len)]
        else:
            uncovered.append(name)
    if uncovered:
        raise ValueError(f"device_map {device_map!r} places no device for {uncovered[:5]}; add their modules "
                         "(or '') to it.")
    return placement


def _move(model: torch.nn.Module, placement: dict[str, torch.device]) -> None:
    moved: dict[int, torch.Tensor] = {}
    for prefix, module in model.named_modules():
        for table in (module._parameters, module._buffers):
            for leaf, t in table.items():
                device = placement.get(f"{prefix}.{leaf}" if prefix else leaf)
                if t is None or device is None or t.is_meta or t.device == device:
                    continue
                if isinstance(t, torch.nn.Parameter):
                    t.data = t.data.to(device)  # in place, as Module.to does: optimizers and ties keep the object
                elif id(t) in moved:
                    table[leaf] = moved[id(t)]
                else:
                    table[leaf] = moved[id(t)] = t.to(device)


def _get_tensor(model: torch.nn.Module, name: str) -> torch.Tensor:
    prefix, _, leaf = name.rpartition(".")
    module = model.get_submodule(prefix)
    return module._parameters[leaf] if leaf in module._parameters else module._buffers[leaf]


def _set_tensor(model: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    prefix, _, leaf = name.rpartition(".")
    module = model.get_submodule(prefix)
    (module._parameters if leaf in module._parameters else module._buffers)[leaf] = value


def _provided_keys(files: list[str], tied: dict[str, str],
                   loaded: dict[str, tuple[dict[str, torch.Tensor], dict[str, str]]]) -> set[str]:
    """Every key the checkpoint's files provide (tied aliases included); ``.bin`` files read go into ``loaded``."""
    provided = set(tied)
    for path in files:
        if path.endswith(".safetensors"):
            names, meta = read_safetensors(path, data=False)
            provided |= set(names) | set(json.loads(meta.get(TIED_KEY, "{}")))
        else:  # a pickle-free .bin must be read to know its keys; keep it for the load below
            loaded[path] = read_weight_file(path)
            provided |= set(loaded[path][0])
    return {strip_compile_prefix(k) for k in provided}


def key_mismatch(model: torch.nn.Module, provided: set[str]) -> tuple[list[str], list[str], dict[int, list[str]]]:
    """(missing, unexpected, names of each tensor): tied names count as present when one of them is."""
    groups: dict[int, list[str]] = {}  # names of one tensor (tied weights) share a group
    for name, t in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(t), []).append(strip_compile_prefix(name))
    names = {n for g in groups.values() for n in g}
    missing = sorted(names - {n for g in groups.values() if provided & set(g) for n in g})
    return missing, sorted(provided - names), groups


def _torch_words(missing: list[str], unexpected: list[str]) -> str:
    """The key mismatch as ``torch.nn.Module.load_state_dict`` words it, for a script that matches its text."""
    quoted = [(kind, ", ".join(f'"{k}"' for k in keys)) for kind, keys in (("Missing", missing),
                                                                           ("Unexpected", unexpected)) if keys]
    return " ".join(f"{kind} key(s) in state_dict: {keys}." for kind, keys in quoted)


def _load_file(model: torch.nn.Module, read: tuple[dict[str, torch.Tensor], dict[str, str]], tied: dict[str, str],
               actual: dict[str, str], placement: dict[str, Any] | None) -> None:
    """Loads one file's tensors into ``model``; ``placement`` (meta parameters: assigned, not copied) or None."""
    tensors, file_tied = read
    tensors = {strip_compile_prefix(k): v for k, v in tensors.items()}
    for alias, name in {**tied, **file_tied}.items():
        if name in tensors:
            tensors.setdefault(alias, tensors[name])
    state = {actual[k]: v for k, v in tensors.items() if k in actual}
    if placement is not None:  # meta parameters have no memory to copy into: take the tensors, in the model's dtype
        target = model.state_dict(keep_vars=True)
        state = {k: v.to(placement.get(k, "cpu") if target[k].is_meta else target[k].device, target[k].dtype)
                 for k, v in state.items()}
    model.load_state_dict(state, strict=False, assign=placement is not None)


def load_checkpoint_in_model(model: torch.nn.Module, checkpoint: str | os.PathLike,
                             device_map: Mapping[str, Any] | None = None, strict: bool = False) -> LoadResult:
    """Loads weights written by ``save_model`` (or Hugging Face) into ``model``, one file at a time.

    Args:
        model: The module to fill; parameters on the meta device are replaced by the loaded tensors.
        checkpoint: A ``.safetensors`` file, a ``.bin`` file (read with ``torch.load(weights_only=True)``), an
            ``*.index.json`` of shards, or a folder holding one of those (a ``save_model`` or ``save_state`` folder).
        device_map: ``{"": device}`` puts everything on ``device``; ``{"encoder": "cuda:0", "head": "cpu"}`` places
            modules by name (longest prefix wins). Without it, tensors keep the model's devices.
        strict: Raise :class:`MismatchedKeysError` listing missing and unexpected keys, before changing the model.
            Aliases of tied weights (in the file or in the model) never count as missing.

    Returns:
        ``LoadResult(missing_keys, unexpected_keys)``.

    Example:
        >>> load_checkpoint_in_model(model, "export", device_map={"": "cpu"}, strict=True)
        LoadResult(missing_keys=[], unexpected_keys=[])
    """
    files, tied = weight_files(os.fspath(checkpoint))
    placement = _placement(model, device_map) if device_map is not None else {}
    loaded: dict[str, tuple[dict[str, torch.Tensor], dict[str, str]]] = {}
    missing, unexpected, groups = key_mismatch(model, _provided_keys(files, tied, loaded))
    if strict and (missing or unexpected):
        raise MismatchedKeysError(
            f"Error(s) loading {os.fspath(checkpoint)!r} into {type(model).__name__}: missing keys {missing}, "
            f"unexpected keys {unexpected}. The model was not changed; pass strict=False to load the matching keys. "
            f"(In torch's words: {_torch_words(missing, unexpected)})"
        )
    _move(model, placement)
    target = model.state_dict(keep_vars=True)
    actual = {strip_compile_prefix(k): k for k in target}
    assign = any(t.is_meta for t in target.values())
    for path in files:
        _load_file(model, loaded.pop(path, None) or read_weight_file(path), tied, actual, placement if assign else None)
    if assign:  # assign=True wraps each name separately: make tied names one object again
        for names in groups.values():
            first = _get_tensor(model, actual[names[0]])
            for other in names[1:]:
                _set_tensor(model, actual[other], first)
    return LoadResult(missing, unexpected)
