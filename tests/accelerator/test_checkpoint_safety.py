"""Loading never leaves the checkpoint folder, malformed state and manifests are named precisely, and a failed
write (disk full) names the checkpoint and the one that is still intact."""

from __future__ import annotations

import errno
import json
import os
import zlib
from pathlib import Path

import pytest
import torch
from torch import nn

from stoker import Accelerator, ProjectConfiguration, load_checkpoint_in_model
from stoker.accelerator.checkpointing import safetensors_io
from stoker.accelerator.checkpointing.atomic import MANIFEST_NAME, CheckpointError
from stoker.accelerator.checkpointing.state_file import STATE_NAME
from stoker.accelerator.checkpointing.weights import save_model_weights


def _accelerator(project_dir: Path | None = None) -> tuple[Accelerator, nn.Module]:
    config = ProjectConfiguration(project_dir=str(project_dir) if project_dir else None,
                                  automatic_checkpoint_naming=project_dir is not None)
    accelerator = Accelerator(cpu=True, project_config=config)
    model = accelerator.prepare(nn.Linear(3, 2))
    return accelerator, model


def _rewrite(folder: Path, name: str, data: bytes) -> None:
    """Replaces ``name`` in a checkpoint and records it in the manifest, as a careful tamperer would."""
    (folder / name).write_bytes(data)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["files"][name] = {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Accelerator, Path]:
    accelerator, _ = _accelerator()
    return accelerator, Path(accelerator.save_state(str(tmp_path / "ckpt")))


# -- links and names that lead out of the folder ------------------------------------------------------------------
def test_load_state_refuses_a_file_that_is_a_link_out_of_the_folder(saved: tuple, tmp_path: Path) -> None:
    accelerator, ckpt = saved
    outside = tmp_path / "outside.safetensors"
    os.replace(ckpt / "model.safetensors", outside)  # same bytes: size and CRC still match the manifest
    os.symlink(outside, ckpt / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors is a link to .*outside\.safetensors, outside"):
        accelerator.load_state(str(ckpt))


def test_a_link_inside_the_folder_is_still_accepted(saved: tuple) -> None:
    accelerator, ckpt = saved
    os.replace(ckpt / "model.safetensors", ckpt / ".model-data")
    os.symlink(".model-data", ckpt / "model.safetensors")
    manifest = json.loads((ckpt / MANIFEST_NAME).read_text())
    manifest["files"][".model-data"] = manifest["files"]["model.safetensors"]
    (ckpt / MANIFEST_NAME).write_text(json.dumps(manifest))
    accelerator.load_state(str(ckpt))


@pytest.mark.parametrize("entry", ["/etc/passwd", "../outside.safetensors", "sub/../../outside.safetensors"])
def test_an_index_weight_map_entry_outside_the_folder_is_refused(tmp_path: Path, entry: str) -> None:
    model = nn.Linear(3, 2)
    folder = tmp_path / "export"
    save_model_weights(model.state_dict(), folder, max_shard_size="20B")  # shards + index
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = index["weight_map"]["weight"]
    os.replace(folder / shard, tmp_path / "outside.safetensors")
    index["weight_map"]["weight"] = entry
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"weight_map entry for 'weight'.*(absolute|leads out of the folder)"):
        load_checkpoint_in_model(model, str(folder))


def test_an_index_shard_that_links_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    folder = tmp_path / "export"
    save_model_weights(model.state_dict(), folder, max_shard_size="20B")
    shard = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]["weight"]
    os.replace(folder / shard, tmp_path / "elsewhere.safetensors")
    os.symlink(tmp_path / "elsewhere.safetensors", folder / shard)
    with pytest.raises(CheckpointError, match="is a link to .*elsewhere.safetensors, outside"):
        load_checkpoint_in_model(model, str(folder))


# -- malformed stoker_state.json ----------------------------------------------------------------------------------
_GOOD = {"counters": {"step": 0, "micro_step": 0, "iteration": 0}, "num_processes": 1,
         "counts": {"models": 1, "optimizers": 0, "schedulers": 0, "dataloaders": 0, "custom_objects": 0}}


def _variant(path: tuple, value: object) -> dict:
    state = json.loads(json.dumps(_GOOD))
    *parents, last = path
    target = state
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return state


@pytest.mark.parametrize("path,value,message", [
    (("counters",), KeyError, r"key 'counters' is missing, expected an object"),
    (("counters", "step"), KeyError, r"key 'counters.step' is missing, expected a non-negative integer"),
    (("counters", "step"), "7", r"key 'counters.step' is '7', expected a non-negative integer"),
    (("counters", "iteration"), -3, r"key 'counters.iteration' is -3, expected a non-negative integer"),
    (("counters", "micro_step"), True, r"key 'counters.micro_step' is True"),
    (("num_processes",), 0, r"key 'num_processes' is 0, expected an integer >= 1"),
    (("counts", "models"), None, r"key 'counts.models' is None"),
    (("counts",), [1, 2], r"key 'counts' is \[1, 2\], expected an object"),
])
def test_a_malformed_state_names_the_file_and_the_key(saved: tuple, path: tuple, value: object,
                                                      message: str) -> None:
    accelerator, ckpt = saved
    _rewrite(ckpt, STATE_NAME, json.dumps(_variant(path, value)).encode())
    with pytest.raises(CheckpointError, match=rf"stoker_state\.json: {message}"):
        accelerator.load_state(str(ckpt))


@pytest.mark.parametrize("data,message", [
    (b"{not json", r"stoker_state\.json is not a valid stoker state \(not JSON: "),
    (b"[" * 100_000 + b"]" * 100_000, r"stoker_state\.json is not a valid stoker state \(not JSON: it nests too deep"),
    (b"[1, 2]", r"stoker_state\.json: key '\(top level\)' is \[1, 2\], expected an object"),
])
def test_a_state_that_is_not_json_or_nests_absurdly_is_a_checkpoint_error(saved: tuple, data: bytes,
                                                                          message: str) -> None:
    accelerator, ckpt = saved
    _rewrite(ckpt, STATE_NAME, data)
    with pytest.raises(CheckpointError, match=message):
        accelerator.load_state(str(ckpt))


@pytest.mark.parametrize("manifest,message", [
    (b"{broken", r"stoker_manifest\.json is not a valid stoker manifest \(not JSON"),
    (b"[" * 100_000, r"stoker_manifest\.json is not a valid stoker manifest \(not JSON: it nests too deep"),
    (b'{"format": "stoker-checkpoint", "files": {"model.safetensors": {"size": 10}}}',
     r"stoker_manifest\.json is not a stoker manifest \(key 'files.model.safetensors.crc32' is None"),
    (b'{"format": "stoker-checkpoint", "files": {"../x": {"size": 1, "crc32": "00000000"}}}',
     r"stoker_manifest\.json is not a stoker manifest \(file name '\.\./x' is not a plain file name"),
    (b'{"format": "stoker-checkpoint", "files": {"a": {"size": -1, "crc32": "00000000"}}}',
     r"key 'files.a.size' is -1, expected a byte count"),
    (b'"stoker-checkpoint"', r"stoker_manifest\.json is not a stoker manifest \(format"),
])
def test_a_corrupted_manifest_is_reported_as_the_manifest(saved: tuple, manifest: bytes, message: str) -> None:
    accelerator, ckpt = saved
    (ckpt / MANIFEST_NAME).write_bytes(manifest)
    with pytest.raises(CheckpointError, match=message):
        accelerator.load_state(str(ckpt))


# -- write errors -------------------------------------------------------------------------------------------------
def _disk_full_after(monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """Makes the ``files + 1``-th file write fail as a full disk does."""
    real, calls = safetensors_io._write_all, []

    def write_all(f: object, data: memoryview) -> None:
        if len(calls) >= files:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        calls.append(1)
        real(f, data)

    monkeypatch.setattr(safetensors_io, "_write_all", write_all)


def test_disk_full_names_the_checkpoint_and_says_the_previous_one_is_intact(saved: tuple,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator, ckpt = saved
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    _disk_full_after(monkeypatch, files=1)
    with pytest.raises(OSError, match=rf"could not write the checkpoint {ckpt}: No space left on device.*Nothing "
                                      rf"was replaced: the previous checkpoint in {ckpt} is intact") as info:
        accelerator.save_state(str(ckpt))
    assert info.value.errno == errno.ENOSPC
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before
    assert sorted(os.listdir(ckpt.parent)) == ["ckpt"]  # no temporary folder left behind
    monkeypatch.undo()
    accelerator.load_state(str(ckpt))


def test_disk_full_with_automatic_naming_names_the_newest_intact_checkpoint(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator, _ = _accelerator(tmp_path)
    first = accelerator.save_state()
    _disk_full_after(monkeypatch, files=0)
    with pytest.raises(OSError, match=rf"checkpoint_1: No space left on device.*the newest complete checkpoint, "
                                      rf"{first}, is intact"):
        accelerator.save_state()
    with pytest.raises(OSError, match=r"checkpoint_1: No space left.*no earlier checkpoint was there"):
        _accelerator(tmp_path / "fresh")[0].save_state(str(tmp_path / "fresh" / "checkpoints" / "checkpoint_1"))


def test_disk_full_in_an_asynchronous_save_is_reported_the_same_way(saved: tuple,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator, ckpt = saved
    _disk_full_after(monkeypatch, files=0)
    accelerator.save_state(str(ckpt), async_save=True)
    with pytest.raises(OSError, match=rf"could not write the checkpoint {ckpt}.*previous checkpoint in {ckpt} is "
                                      "intact"):
        accelerator.end_training()
