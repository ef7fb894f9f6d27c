"""The Accelerator's checkpoint-folder methods: copy, remove, a weights folder that appears whole, work after a
background save, trash sweeping (what ModelCheckpoint's writer uses instead of the engine's internals)."""

from __future__ import annotations

import os

import torch

from stoker import Accelerator
from stoker.accelerator import verify_checkpoint
from stoker.accelerator.checkpointing.background import trash_path
from tests.helpers.models import make_mlp


def _prepared() -> tuple[Accelerator, torch.nn.Module]:
    accelerator = Accelerator(cpu=True)
    model = make_mlp()
    model, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return accelerator, model


def test_copy_then_remove_a_checkpoint(tmp_path):
    accelerator, _ = _prepared()
    first, second = tmp_path / "a", tmp_path / "b"
    accelerator.save_state(first)
    accelerator.copy_checkpoint(first, second)
    assert sorted(os.listdir(first)) == sorted(os.listdir(second))
    verify_checkpoint(second)  # complete, every checksum right
    accelerator.remove_checkpoint(first)
    assert not first.exists()  # gone from its name at once; deleted in the background
    accelerator.wait_for_checkpoints()
    assert sorted(os.listdir(tmp_path)) == ["b"]


def test_a_weights_folder_appears_whole_and_is_replaced_whole(tmp_path):
    accelerator, model = _prepared()
    target = tmp_path / "weights"
    accelerator.save_model_folder(model, target, extra=lambda folder: open(os.path.join(folder, "note"), "w").close())
    assert sorted(os.listdir(target)) == ["model.safetensors", "note"]
    accelerator.save_model_folder(model, target)  # the old folder is swapped out, then deleted
    accelerator.wait_for_checkpoints()
    assert sorted(os.listdir(target)) == ["model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["weights"]


def test_work_after_a_background_save_runs_once_it_is_committed(tmp_path):
    accelerator, _ = _prepared()
    seen = []
    with accelerator.checkpoints_in_background(copy=True):
        accelerator.save_state(tmp_path / "ckpt")
    accelerator.after_checkpoint(lambda: seen.append(os.path.isdir(tmp_path / "ckpt")))
    accelerator.wait_for_checkpoints()
    assert seen == [True]


def test_trash_a_crash_left_is_swept(tmp_path):
    accelerator, _ = _prepared()
    os.makedirs(trash_path(str(tmp_path / "old")))  # what a crash mid-deletion leaves
    accelerator.sweep_checkpoint_trash(tmp_path)
    accelerator.wait_for_checkpoints()
    assert os.listdir(tmp_path) == []
