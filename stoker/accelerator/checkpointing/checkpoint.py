"""Resumable training state: ``save_state`` / ``load_state`` into folders that are either complete or absent.

Owns: what a checkpoint holds and under which file names (Accelerate's names, as safetensors), which process
writes what, and the order of a save (encode everything, write, commit, rotate) and of a load (verify, then
read). Loading never unpickles: every file is safetensors or JSON.
Does not own: the tree format (``tree.py``), the manifest, atomic commit and naming (``atomic.py``), safetensors
bytes (``safetensors_io.py``), weight export (``weights.py``), RNG (``rng.py``), loader positions (``data/``).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .atomic import (_CHECKPOINT_RE, _is_complete, _recover, _sweep, aside_path, commit_checkpoint, newest_checkpoint,
                     rotate_checkpoints, verify_checkpoint)
from .background import CheckpointIO, sweep_trash
from .preflight import check_optimizer, check_weights
from .process_count import check_loader_states, restore_rng, rng_file
from .contents import CheckpointContents
from .rng import capture_rng_state
from .safetensors_io import FileRecord, read_safetensors, write_buffers, write_safetensors
from .state_file import _KINDS, STATE_NAME, encode_state, part_name, read_state
from .tree import encode_tree, load_tree
from .weights import TIED_KEY, _dedupe, load_checkpoint_in_model

SCALER_NAME = "scaler.safetensors"


# -- save_state / load_state ---------------------------------------------------------------------------------------
def _parts(contents: CheckpointContents, rank: int) -> tuple[list, list]:
    """``(file, object, label)`` of what the main process saves for all, and what each process saves for itself
    (loader positions and user objects may differ between processes)."""
    optimizers = contents.strategy.checkpoint_files_hold([], contents.optimizers)[1]  # FSDP: none (its shards)
    shared = [(part_name("optimizer", i), o, f"optimizer #{i}") for i, o in enumerate(optimizers)]
    shared += [(part_name("scheduler", i), s, f"scheduler #{i}") for i, s in enumerate(contents.schedulers)]
    if contents.precision.has_state:  # fp16's grad scaler; the other precisions have nothing to save
        shared.append((SCALER_NAME, contents.precision, "grad scaler"))
    own = [(part_name("dataloader", i, rank), d, f"dataloader #{i}") for i, d in enumerate(contents.dataloaders)]
    own += [(part_name("custom_checkpoint", i, rank), o, f"register_for_checkpointing object #{i}")
            for i, o in enumerate(contents.custom_objects)]
    return shared, own


def _main_process_folder(contents: CheckpointContents, path: str, call: str) -> str:
    """The main process's folder (one small broadcast): a checkpoint is one folder that every process writes into
    and reads from, also when each process was given its own (e.g. its own ``tempfile.TemporaryDirectory()``)."""
    if contents.num_processes == 1:
        return path
    main = contents.strategy.broadcast_object(path)
    if main != path:
        warnings.warn(f"{call}: process {contents.process_index} was given {path!r} and the main process "
                      f"{main!r}; a checkpoint is one folder shared by all processes, so {main!r} is used.",
                      stacklevel=4)
    return main


def _target(contents: CheckpointContents, output_dir: str | None) -> str:
    if output_dir is not None:
        return os.path.abspath(output_dir)
    config = contents.project
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


def save_state(contents: CheckpointContents, output_dir: str | None = None, safe_serialization: bool = True, *,
               async_save: bool = False, background_commit: bool = False, **_: Any) -> str:
    """Writes everything needed to resume into ``output_dir`` (or the next automatic checkpoint); returns it.

    Models (safetensors, tied weights once), optimizers, schedulers, the grad scaler (fp16) and counters from the main
    process; from every process its RNG states, loader positions, ``register_for_checkpointing`` objects and the
    gradients of an unfinished accumulation window. FSDP models and optimizers go through
    ``torch.distributed.checkpoint``. The folder appears complete or not at all; with ``total_limit`` the oldest
    automatic checkpoints are deleted after it is complete, in the background like every replaced folder.
    ``safe_serialization`` is accepted for Accelerate compatibility: stoker always writes safetensors and JSON.

    In one process, not FSDP (else the save is synchronous): ``async_save=True`` copies the state to CPU memory and
    writes, fsyncs and commits it on a background thread; ``background_commit=True`` writes the files here and
    leaves only the commit (fsyncs, manifest, rename, rotation) to that thread, holding no copy. The next save,
    ``load_state`` and ``end_training()`` wait for either (and raise its error); until then the previous
    checkpoints are the loadable ones, also after a crash. (``CheckpointIO.in_background`` selects a mode.)

    Example:
        >>> accelerator.save_state()  # ProjectConfiguration(automatic_checkpoint_naming=True)
        'runs/exp/checkpoints/checkpoint_0'
    """
    io = contents.io
    io.wait_for_save()  # one save at a time, in order
    config, auto, strategy = contents.project, output_dir is None, contents.strategy
    _hold_numbered_folder(contents, output_dir)
    target = _main_process_folder(contents, _target(contents, output_dir), "save_state")
    tmp = aside_path(target, "tmp")
    mode = _save_mode(contents, async_save, background_commit)
    # Mere references (collective where gathered): every process asks for them. FSDP: none, it saves its shards.
    filed_models = strategy.checkpoint_files_hold(contents.models, [])[0]
    model_states = [contents.model_state(m) for m in filed_models]
    if contents.is_main_process:
        _make_room(contents, target, tmp, output_dir)
    strategy.barrier()
    rotate = (config.project_dir, config.total_limit) if auto and config.total_limit is not None else None
    try:
        # register_save_state_pre_hook: may save models its own way into the folder, removing their weights here.
        contents.hooks.run_save(contents.models, model_states, tmp)
        strategy.save_checkpoint_shards(tmp, contents.models, contents.optimizers)  # FSDP: DCP shards
        _write(contents, tmp, target, _encode_state(contents, filed_models, model_states, auto), mode, rotate)
    except BaseException as error:
        if contents.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, OSError):  # disk full, quota, permissions: say where, and what is still safe
            raise _write_failed(error, target) from error
        raise
    strategy.barrier()
    if auto:
        config.iteration += 1
    return target


def _check_counts(contents: CheckpointContents, state: dict[str, Any], path: str, extra_loaders: bool) -> None:
    for kind in _KINDS:
        saved, have = state["counts"][kind], contents.count(kind)
        if saved != have and not (kind == "dataloaders" and extra_loaders and saved > have) and \
                (kind != "dataloaders" or contents.stateful_loaders):
            raise ValueError(f"{path} holds {saved} {kind} but {have} were prepared/registered; prepare the same "
                             "objects in the same order as when saving.")


def _parts_to_load(contents: CheckpointContents, files: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The shared parts and this process's own (the main process's when the checkpoint has none for it: saved by
    fewer processes; loader positions are then converted, see ``process_count.py``)."""
    shared, own = _parts(contents, contents.process_index)
    if any(name not in files for name, _, _ in own):
        own = _parts(contents, 0)[1]
    if SCALER_NAME not in files:  # saved without a scaler (not fp16): an fp16 run loading it keeps its own
        shared = [part for part in shared if part[0] != SCALER_NAME]
    return shared + [p for p in own if contents.stateful_loaders or not p[0].startswith("dataloader")]


def _preflight(contents: CheckpointContents, path: str, models: list[tuple[Any, str, str]],
               parts: list[tuple[str, Any, Any]], strict: bool, state: dict[str, Any]) -> dict[str, Any]:
    """Reads the parts' states and checks them and the weights against the objects; returns the states."""
    for model, weights, _ in models:
        check_weights(contents.unwrap(model), os.path.join(path, weights), path, strict)
    trees = {name: load_tree(os.path.join(path, name)) for name, _, _ in parts}
    for name, obj, label in parts:
        if name.startswith("optimizer"):
            check_optimizer(obj, trees[name], path, label)
    check_loader_states(path, parts, trees, state, contents.num_processes)
    return trees


def _load_models(contents: CheckpointContents, path: str, models: list[tuple[Any, str, str]],
                 files: dict[str, Any], strict: bool) -> None:
    """Weights, and the gradients of an open accumulation window where they were saved."""
    for model, weights, grads in models:
        module = contents.unwrap(model)
        load_checkpoint_in_model(module, os.path.join(path, weights), strict=strict)
        saved = read_safetensors(os.path.join(path, grads))[0] if grads in files else {}
        for name, param in module.named_parameters():
            if name in saved:
                param.grad = saved[name].to(param.device, copy=True)


def _restore_counters(contents: CheckpointContents, path: str, counters: dict[str, Any],
                      window_file: str | None) -> None:
    contents.window.load_state_dict(counters)
    if window_file is not None:  # after the counters: they reopen the window this restores the item count of
        contents.window.load_open_window_state(read_safetensors(os.path.join(path, window_file))[0])
    iteration = int(counters.get("iteration", 0))
    match = _CHECKPOINT_RE.fullmatch(os.path.basename(path))
    if match:  # whatever the counter says, never reuse the number of the checkpoint just loaded
        iteration = max(iteration, int(match.group(1)) + 1)
    contents.project.iteration = iteration


def _save_mode(contents: CheckpointContents, async_save: bool, background_commit: bool) -> str | None:
    """``"copy"`` (async_save), ``"commit"`` (background_commit) or None (synchronous), as the run allows."""
    io = contents.io
    if contents.num_processes != 1 or not contents.strategy.saves_in_background:
        return None
    if async_save or io.mode == "copy":
        return "copy"
    return "commit" if background_commit or io.mode == "commit" else None


def _hold_numbered_folder(contents: CheckpointContents, output_dir: str | None) -> None:
    """Automatic naming (no ``output_dir``): the folder this run numbers, sweeps and rotates is held by it (main
    process), so that another live run on the same ``project_dir`` is refused before it touches anything there."""
    if output_dir is None and contents.is_main_process and contents.project.project_dir is not None:
        contents.io.locks.acquire(os.path.join(contents.project.project_dir, "checkpoints"))


def _make_room(contents: CheckpointContents, target: str, tmp: str, output_dir: str | None) -> None:
    """On the main process: refuse a foreign folder, clean up after a crash (and its missed rotation), make tmp."""
    if os.path.exists(target) and not _is_complete(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise ValueError(f"save_state({output_dir!r}): the folder exists and is not a stoker checkpoint; "
                         "stoker replaces only its own checkpoints. Choose a new or empty folder.")
    io = contents.io
    _sweep(os.path.dirname(target), io) if output_dir is None else _recover(target, io)
    if output_dir is None and contents.project.total_limit is not None:  # a kill between commit and rotation
        rotate_checkpoints(contents.project.project_dir, contents.project.total_limit, io)
    sweep_trash(os.path.dirname(target), io)
    os.makedirs(tmp)


def _write(contents: CheckpointContents, tmp: str, target: str, files: list[tuple[str, dict, dict]],
           mode: str | None, rotate: tuple | None) -> None:
    """Writes ``files`` into ``tmp`` and commits it to ``target``, now or (``mode``) on the saver thread."""
    io = contents.io
    if mode == "copy":
        files = [(name, _snapshot(tensors), metadata) for name, tensors, metadata in files]
        io.submit_save(lambda: _finish(tmp, target, lambda: _write_files(tmp, files), io, rotate))
        return
    records = _write_files(tmp, files)
    if mode == "commit":  # written now (the state may change once this returns); durable and renamed meanwhile
        io.submit_save(lambda: _finish(tmp, target, lambda: records, io, rotate))
        return
    if not contents.is_main_process:  # the main process syncs its files with the manifest, at once
        io.fsync(os.path.join(tmp, name) for name in records)
    contents.strategy.barrier()
    if contents.is_main_process:
        _commit(tmp, target, records, io, rotate)


def _encode_state(contents: CheckpointContents, filed_models: list, model_states: list,
                  auto: bool) -> list[tuple[str, dict, dict]]:
    """``(file name, tensors, metadata)`` of every file this process writes; an unsafe object fails here, before
    anything is written. Tensors are the live objects (no copies)."""
    rank, main = contents.process_index, contents.is_main_process
    shared, own = _parts(contents, rank)
    jobs = [(rng_file(rank), capture_rng_state(), f"RNG state of process {rank}")]
    jobs += [(name, obj.checkpoint_state_dict() if name.startswith("dataloader") else obj.state_dict(),
              f"{label} state_dict()") for name, obj, label in own + (shared if main else [])]
    files = [(name, *encode_tree(obj, what)) for name, obj, what in jobs]
    counters = dict(contents.counters())
    for i, state in enumerate(model_states if main else []):
        stored, aliases = _dedupe(state)
        files.append((part_name("model", i), stored, {"format": "pt", TIED_KEY: json.dumps(aliases)}))
    if counters.get("micro_step", 0) > 0:  # an open accumulation window: its gradients, per process (no sync yet)
        for i, model in enumerate(filed_models):
            grads = {n: p.grad for n, p in contents.unwrap(model).named_parameters() if p.grad is not None}
            files.append((part_name("gradients", i, rank), grads, {"format": "pt"}))
    window = contents.window.open_window_state()
    if window is not None:  # an open window of summed losses: this process's item count so far (and normaliser)
        files.append((part_name("window", 0, rank), window, {"format": "pt"}))
    if main:
        if auto:
            counters["iteration"] = contents.project.iteration + 1  # the state after this save
        state = encode_state(counters, contents.num_processes, {k: contents.count(k) for k in _KINDS})
        files.append((STATE_NAME, None, {"json": state}))
    return files


def _snapshot(tensors: dict[str, Any] | None) -> dict[str, Any] | None:
    """Own copies in CPU memory of ``tensors`` (training may change the originals once save_state returns)."""
    if tensors is None:
        return None
    return {k: t.detach().to("cpu", copy=True, memory_format=torch.contiguous_format) for k, t in tensors.items()}


def _write_files(tmp: str, files: list[tuple[str, dict | None, dict]]) -> dict[str, FileRecord]:
    """Writes the encoded files into ``tmp`` (not yet fsynced); returns their sizes and CRCs."""
    records = {}
    for name, tensors, metadata in files:
        path = os.path.join(tmp, name)
        if tensors is None:  # the JSON state
            records[name] = write_buffers(path, [metadata["json"].encode()], fsync=False)
        else:
            records[name] = write_safetensors(path, tensors, metadata, fsync=False)
    return records


def _commit(tmp: str, target: str, records: dict[str, FileRecord], io: CheckpointIO,
            rotate: tuple[str, int] | None) -> None:
    """Commits ``tmp`` (fsyncing its files with the manifest) and, with ``rotate`` = (project_dir, total_limit),
    rotates the automatic checkpoints."""
    commit_checkpoint(tmp, target, records, io=io)
    if rotate is not None:
        rotate_checkpoints(*rotate, io)


def _finish(tmp: str, target: str, write: Callable[[], dict[str, FileRecord]], io: CheckpointIO,
            rotate: tuple[str, int] | None) -> None:
    """The background half of an asynchronous save (``write`` writes the files) or of a background commit
    (``write`` returns the records of the files already written): commit, or remove ``tmp`` on failure."""
    try:
        _commit(tmp, target, write(), io, rotate)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, OSError):
            raise _write_failed(error, target) from error
        raise


def _write_failed(error: OSError, target: str) -> OSError:
    """``error`` (same errno, so same OSError subclass) restated: which checkpoint failed, and which one is intact.

    A failed save never touches the folders already committed (it writes beside them and renames last).
    """
    parent = os.path.dirname(target)
    automatic = _CHECKPOINT_RE.fullmatch(os.path.basename(target)) and os.path.basename(parent) == "checkpoints"
    newest = newest_checkpoint(os.path.dirname(parent)) if automatic else None
    if _is_complete(target):
        intact = f"the previous checkpoint in {target} is intact"
    elif newest is not None:
        intact = f"the newest complete checkpoint, {newest}, is intact"
    else:
        intact = "no earlier checkpoint was there, and no partial one was left"
    detail = error.strerror or str(error)
    where = f" (writing {error.filename})" if error.filename else ""
    return OSError(error.errno, f"save_state could not write the checkpoint {target}: {detail}{where}. Nothing was "
                                f"replaced: {intact}. Free disk space (or fix the cause) and save again.")


def _source(contents: CheckpointContents, input_dir: str | None) -> str:
    if input_dir is not None:
        path = os.path.abspath(input_dir)
        if contents.is_main_process and not os.path.exists(path):
            _recover(path)  # an interrupted replacement may have left the old checkpoint aside
        return path
    config = contents.project
    if not config.automatic_checkpoint_naming or config.project_dir is None:
        raise ValueError("load_state() without input_dir needs ProjectConfiguration(project_dir=..., "
                         "automatic_checkpoint_naming=True); otherwise pass the folder: load_state('ckpt').")
    newest = newest_checkpoint(config.project_dir)
    if newest is None:
        raise FileNotFoundError(f"load_state(): no complete checkpoint under "
                                f"{os.path.join(config.project_dir, 'checkpoints')}; save_state() writes them.")
    return newest


def load_state(contents: CheckpointContents, input_dir: str | None = None, strict: bool = True,
               extra_loaders: bool = False, **_: Any) -> None:
    """Restores what :func:`save_state` wrote, after checking every file it reads against the manifest.

    Without ``input_dir`` (automatic naming) it takes the newest complete checkpoint. The next automatic save
    after loading ``checkpoint_{n}`` is ``checkpoint_{n+1}``. Loader positions are restored only with
    ``DataLoaderConfiguration(use_stateful_dataloader=True)``, as in Accelerate. A process that has no files of
    its own in the checkpoint (saved by fewer processes) takes the main process's; loader positions continue the
    same global order on another process count, or are refused with ``ProcessCountError`` (see
    ``process_count.py``). The precision may differ from the saving run's: a checkpoint without a grad scaler
    (saved in full precision or bf16) leaves an fp16 run's scaler as it is, and an fp16 checkpoint's scaler is
    ignored by the other precisions. ``extra_loaders=True``: more loader positions than loaders is fine (the
    prepared ones take the first; the Trainer's older checkpoints hold its val loaders' too).

    Example:
        >>> accelerator.load_state()  # the newest complete checkpoint_{n}
    """
    contents.io.wait_for_save()  # an asynchronous save in flight is committed first
    strategy = contents.strategy
    path = _source(contents, _main_process_folder(contents, input_dir, "load_state") if input_dir else None)
    strategy.barrier()
    files = verify_checkpoint(path, files=[STATE_NAME])["files"]
    state = read_state(path)
    _check_counts(contents, state, path, extra_loaders)
    rank = contents.process_index
    parts = _parts_to_load(contents, files)
    kept = list(contents.models)
    contents.hooks.run_load(kept, path)  # register_load_state_pre_hook: removes what it loaded itself
    position = {id(m): i for i, m in enumerate(contents.models)}  # gradients are saved by this position
    filed = {id(m) for m in strategy.checkpoint_files_hold(kept, [])[0]}  # FSDP: none, its shards hold them
    models = [(m, part_name("model", i), part_name("gradients", position[id(m)], rank)) for i, m in enumerate(kept)
              if id(m) in filed]
    names = [n for n, _, _ in parts] + [n for _, *pair in models for n in pair if n in files]
    names += strategy.checkpoint_shard_files(list(files))
    window_name = part_name("window", 0, rank)
    names += [window_name] if window_name in files else []
    rng_name = rng_file(rank) if rng_file(rank) in files else rng_file(0)
    verify_checkpoint(path, files=names + ([rng_name] if rng_name in files else []))
    trees = _preflight(contents, path, models, parts, strict, state)  # all checked before anything changes
    strategy.load_checkpoint_shards(path, contents.models, contents.optimizers)  # FSDP: verified, then read
    _load_models(contents, path, models, files, strict)
    for name, obj, _ in parts:
        obj.load_state_dict(trees[name])
    _restore_counters(contents, path, state["counters"], window_name if window_name in files else None)
    if not restore_rng(path, files, rank):  # its own, or derived from the main process's and the rank
        warnings.warn(f"{path} has no {rng_file(rank)} (saved by {state['num_processes']} processes); this process "
                      "keeps its current RNG state.", stacklevel=3)
    strategy.barrier()
