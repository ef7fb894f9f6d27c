"""Checkpoint folders that are complete or absent: manifest, verification, atomic commit, naming, rotation.

Owns: the manifest (size and CRC-32 of every file), :func:`verify_checkpoint`, the refusal of foreign DCP
metadata pickles, the commit (a finished temporary folder beside the target, fsync, rename into place), the
``.{name}.stoker-{tmp,old,del}`` folders beside a target and their crash recovery, and ``checkpoint_{n}`` naming
and rotation. Does not own what goes into a checkpoint (``checkpoint.py``) or the file format (``tree.py``,
``safetensors_io.py``).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import pickle
import re
import shutil
import zlib
from typing import TYPE_CHECKING, Any

import torch

from .safetensors_io import FileRecord, fsync_path, write_buffers

if TYPE_CHECKING:
    from .background import CheckpointIO

MANIFEST_NAME = "stoker_manifest.json"
_FORMAT = "stoker-checkpoint"
_CHECKPOINT_RE = re.compile(r"checkpoint_(\d+)")


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete, altered, or not a stoker checkpoint."""


# -- manifest, verification, atomic commit --------------------------------------------------------------------------
def _crc_file(path: str) -> int:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return zlib.crc32(m)  # straight from the page cache, no copy


def _read_json(file: str, what: str) -> Any:
    """The JSON in ``file``; a file that is not JSON (or nests absurdly deep) is a :class:`CheckpointError`."""
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; RecursionError: deep nesting
        detail = "it nests too deeply" if isinstance(e, RecursionError) else str(e)
        raise CheckpointError(f"{file} is not a valid {what} (not JSON: {detail}); the checkpoint was altered or "
                              "written by another tool.") from e


def is_plain_name(name: Any) -> bool:
    """True for a file name that stays in its folder: no separators, not ``.``/``..``, not absolute."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and os.sep not in name
            and not os.path.isabs(name) and not (os.altsep and os.altsep in name))


def contained(folder: str, name: Any, what: str) -> str:
    """``folder/name``, refusing a name that is absolute or climbs out (``..``), and a file that is a symbolic
    link leading out of ``folder``: loading never reads outside the checkpoint folder.

    Raises:
        CheckpointError: naming ``what`` (where the name came from) and the offending name or link.
    """
    if not isinstance(name, str) or not name or os.path.isabs(name):
        raise CheckpointError(f"{what} names {name!r}: an absolute path or not a file name. A checkpoint only "
                              f"refers to files inside its folder {folder}; stoker reads nothing else.")
    norm = os.path.normpath(name)
    if norm == os.pardir or norm.startswith(os.pardir + os.sep):
        raise CheckpointError(f"{what} names {name!r}, which leads out of the folder {folder}; stoker reads only "
                              "files inside the checkpoint folder.")
    path = os.path.join(folder, name)
    root, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise CheckpointError(f"{path} is a link to {real}, outside the checkpoint folder {folder}; stoker reads "
                              "only files inside it. Copy the file into the folder if you trust it.")
    return path


def _read_manifest(path: str) -> dict[str, Any]:
    manifest_path = os.path.join(path, MANIFEST_NAME)
    if not os.path.isfile(manifest_path):
        raise CheckpointError(
            f"{path} has no {MANIFEST_NAME}: it is not a complete stoker checkpoint (an interrupted save, or a "
            "folder written by another tool). Pass a folder written by save_state()."
        )
    contained(path, MANIFEST_NAME, "the checkpoint")
    manifest = _read_json(manifest_path, "stoker manifest")
    problem = None
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        problem = f"format {manifest.get('format') if isinstance(manifest, dict) else manifest!r:.80}"
    elif not isinstance(manifest.get("files"), dict):
        problem = "key 'files' is not an object"
    else:
        for name, entry in manifest["files"].items():
            size = entry.get("size") if isinstance(entry, dict) else None
            crc = entry.get("crc32") if isinstance(entry, dict) else None
            if not is_plain_name(name):
                problem = f"file name {name!r} is not a plain file name"
            elif isinstance(size, bool) or not isinstance(size, int) or size < 0:
                problem = f"key 'files.{name}.size' is {size!r}, expected a byte count"
            elif not (isinstance(crc, str) and re.fullmatch(r"[0-9a-f]{8}", crc)):
                problem = f"key 'files.{name}.crc32' is {crc!r}, expected 8 hex digits"
            if problem:
                break
    if problem:
        raise CheckpointError(f"{manifest_path} is not a stoker manifest ({problem}); the checkpoint was altered or "
                              "written by another tool.")
    return manifest


def verify_checkpoint(path: str | os.PathLike, files: list[str] | None = None) -> dict[str, Any]:
    """Checks a checkpoint folder against its manifest; returns the manifest.

    Raises :class:`CheckpointError` naming the file when a file is missing, truncated or altered (size and
    CRC-32), is a link leading out of the folder, when the manifest is missing, foreign or malformed, or when the
    folder holds files the manifest does not list (nothing unlisted is ever read). ``files`` limits the checksum
    to those names.

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
    missing = sorted(name for name in listed if not os.path.lexists(os.path.join(path, name)))
    if extra and missing:  # a name in the manifest differs from the file's: the manifest is what changed
        raise CheckpointError(f"{os.path.join(path, MANIFEST_NAME)} lists {missing}, which are not in the folder, and "
                              f"not {extra}, which are: the manifest was altered (or files were renamed). Restore "
                              "the folder from a copy, or resume from another checkpoint.")
    if extra:
        raise CheckpointError(f"{path} holds files its manifest does not list: {extra}. stoker refuses folders with "
                              "unknown files (nothing of them was read); move them out if you trust them.")
    for name in listed if files is None else files:
        file = contained(path, name, f"{os.path.join(path, MANIFEST_NAME)}")
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


def aside_path(target: str, kind: str) -> str:
    """The hidden sibling ``.{name}.stoker-{kind}`` of ``target`` (``kind``: ``tmp``, ``old`` or ``del``): where a
    folder is written, moved aside or deleted, so that an interrupted save's leftovers are recognised and cleaned."""
    parent, name = os.path.split(os.path.abspath(target))
    return os.path.join(parent, f".{name}.stoker-{kind}")


def fresh_aside_folder(target: str, io: CheckpointIO | None) -> str:
    """Creates the empty temporary folder beside ``target`` (where it is written before :func:`put_in_place`),
    discarding one that a crash left there; returns it."""
    tmp = aside_path(target, "tmp")
    if os.path.lexists(tmp):
        _discard(tmp, io)
    os.makedirs(tmp)
    return tmp


def _is_complete(path: str) -> bool:
    try:
        _read_manifest(path)
        return True
    except CheckpointError:
        return False


def _discard(path: str, io: CheckpointIO | None) -> None:
    """Removes ``path`` from its name at once: renamed aside and deleted in the background with ``io``, deleted
    here without."""
    if io is not None:
        io.discard(path)
    elif os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def _recover(target: str, io: CheckpointIO | None = None) -> None:
    """Cleans what an interrupted save left beside ``target``: temporary and half-deleted folders go; an old
    checkpoint moved aside (rename fallback) goes back when the new one never arrived."""
    old = aside_path(target, "old")
    if os.path.isdir(old) and not os.path.exists(target) and _is_complete(old):
        os.rename(old, target)
    for kind in ("tmp", "old", "del"):
        _discard(aside_path(target, kind), io)


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two folders (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def remove_checkpoint(path: str, io: CheckpointIO | None = None) -> None:
    """Deletes the folder ``path`` so that no half-deleted folder is ever left under its name: with ``io`` (the
    Accelerator's checkpoint I/O) it is renamed aside at once and deleted in the background; without, it is renamed
    to ``.{name}.stoker-del`` and deleted here. A missing ``path`` is nothing to do."""
    if not os.path.lexists(path):
        return
    if io is not None:
        io.discard(path)
        return
    doomed = aside_path(path, "del")
    shutil.rmtree(doomed, ignore_errors=True)
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def commit_checkpoint(tmp: str, target: str, records: dict[str, FileRecord], io: CheckpointIO | None = None) -> None:
    """Writes the manifest into the finished folder ``tmp``, makes it durable and renames it to ``target``.

    ``records`` has size and CRC of the files this process wrote; other files (other processes') are hashed
    here. Every file, the manifest and the folder are fsynced before the rename, all at once on ``io``'s pool
    (the file system folds their journal commits into one; files already synced cost nothing). An existing
    ``target`` is swapped out atomically and then deleted (in the background with ``io``), so the name always
    holds a complete checkpoint.
    """
    files = {}
    for name in sorted(os.listdir(tmp)):
        record = records.get(name) or FileRecord(os.path.getsize(os.path.join(tmp, name)),
                                                  _crc_file(os.path.join(tmp, name)))
        files[name] = {"size": record.size, "crc32": f"{record.crc32:08x}"}
    manifest = json.dumps({"format": _FORMAT, "version": 1, "files": files}, indent=1) + "\n"
    manifest_path = os.path.join(tmp, MANIFEST_NAME)
    write_buffers(manifest_path, [manifest.encode()], fsync=False)
    # The manifest may be synced together with the files: it counts only once the folder has its final name, and
    # a crash before that leaves a hidden temporary folder.
    durable = [os.path.join(tmp, name) for name in files] + [manifest_path, tmp]
    if io is not None:
        io.fsync(durable)
    else:
        for path in durable:
            fsync_path(path)
    put_in_place(tmp, target, io)
    fsync_path(os.path.dirname(target))


def put_in_place(tmp: str, target: str, io: CheckpointIO | None = None) -> None:
    """Renames the complete folder ``tmp`` to ``target``; an existing ``target`` is swapped out in one step and
    then deleted (in the background with ``io``), so ``target`` never names a half-written or half-deleted
    folder. Where folders cannot be swapped atomically the old one is moved to ``.{name}.stoker-old`` first
    (``load_state`` and the next save put it back if the new one never arrived)."""
    if not os.path.exists(target):
        os.rename(tmp, target)
    elif _exchange(tmp, target):
        _discard(tmp, io)  # ``tmp`` now holds the replaced folder
    else:
        old = aside_path(target, "old")
        _discard(old, io)
        os.rename(target, old)
        os.rename(tmp, target)
        _discard(old, io)


def copy_checkpoint(src: str, dst: str, io: CheckpointIO | None = None) -> None:
    """Makes ``dst`` a copy of the folder ``src`` in one step (written beside it, then put in place), hard-linking
    files where possible: files of a finished checkpoint are never modified in place, so sharing them is safe. A
    missing ``src`` is nothing to do; an old ``dst`` is replaced as :func:`put_in_place` does."""
    if not os.path.isdir(src):
        return
    tmp = fresh_aside_folder(dst, io)
    for entry in os.scandir(src):
        target = os.path.join(tmp, entry.name)
        if entry.is_dir():
            shutil.copytree(entry.path, target)
            continue
        try:
            os.link(entry.path, target)
        except OSError:
            shutil.copy2(entry.path, target)
    put_in_place(tmp, dst, io)


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


def rotate_checkpoints(project_dir: str | os.PathLike, total_limit: int, io: CheckpointIO | None = None) -> list[str]:
    """Deletes the oldest complete automatic checkpoints so that at most ``total_limit`` remain; returns them.

    With ``io`` they leave their names at once and are deleted in the background.
    """
    doomed = list_checkpoints(project_dir)[:-total_limit]
    for path in doomed:
        remove_checkpoint(path, io)
    return doomed


def _sweep(root: str, io: CheckpointIO | None = None) -> None:
    for name in os.listdir(root) if os.path.isdir(root) else []:
        match = re.fullmatch(r"\.(checkpoint_\d+)\.stoker-(tmp|old|del)", name)
        if match:
            _recover(os.path.join(root, match.group(1)), io)
