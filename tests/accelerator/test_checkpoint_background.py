"""Checkpoint work off the training thread: background deletion of replaced folders, crash leftovers, async saves."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest
import torch

from stoker.accelerator.checkpointing import background, checkpoint
from stoker.accelerator.checkpointing.atomic import (MANIFEST_NAME, list_checkpoints, newest_checkpoint,
                                              verify_checkpoint)
from stoker.accelerator.checkpointing.state_file import STATE_NAME
from stoker.trainer.checkpointing import find_last_checkpoint
from tests.accelerator.test_checkpoint_state import make, run, visible
from tests.helpers.weights import assert_same_weights, state_of


def hidden(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith("."))


def manifest(path):
    with open(os.path.join(path, MANIFEST_NAME)) as f:
        return json.load(f)["files"]


def content(path):
    """What two saves of the same state share: every file's record, and the state file's contents except the time
    of the save (``saved_at``, which makes each save's ``stoker_state.json`` its own)."""
    files = manifest(path)
    files.pop(STATE_NAME)
    with open(os.path.join(path, STATE_NAME)) as f:
        state = json.load(f)
    assert isinstance(state.pop("saved_at"), float)
    return files, state


@pytest.fixture
def held_deletions(monkeypatch):
    """Background deletions wait until the test sets the returned event (they are pending meanwhile)."""
    release = threading.Event()
    real_remove = background._remove

    def slow_remove(path):
        release.wait(10)
        real_remove(path)

    monkeypatch.setattr(background, "_remove", slow_remove)
    yield release
    release.set()


# -- background deletion ------------------------------------------------------------------------------------------
def test_replaced_checkpoint_leaves_its_name_at_once_and_is_deleted_in_the_background(tmp_path, held_deletions):
    parts = make()
    parts[0].save_state(tmp_path / "ckpt")
    old = manifest(tmp_path / "ckpt")
    run(parts, 2)
    expected = state_of(parts[1])
    parts[0].save_state(tmp_path / "ckpt")
    # While the old one is still being deleted: the name holds the new, complete checkpoint ...
    verify_checkpoint(tmp_path / "ckpt")
    assert manifest(tmp_path / "ckpt") != old
    assert visible(tmp_path) == ["ckpt"]
    [trash] = hidden(tmp_path)  # ... and the old one waits under a hidden name that nothing loads
    assert trash.startswith(".ckpt.stoker-del-") and manifest(tmp_path / trash) == old
    fresh = make()
    fresh[0].load_state(tmp_path / "ckpt")
    assert_same_weights(expected, state_of(fresh[1]))
    held_deletions.set()
    parts[0].end_training()  # waits for the deletion
    assert os.listdir(tmp_path) == ["ckpt"]


def test_rotation_deletes_after_the_new_checkpoint_is_complete(tmp_path, held_deletions):
    parts = make(project_dir=str(tmp_path), total_limit=2)
    for _ in range(4):
        run(parts, 1)
        parts[0].save_state()
    root = tmp_path / "checkpoints"
    assert visible(root) == ["checkpoint_2", "checkpoint_3"]
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == ["checkpoint_2", "checkpoint_3"]
    assert len(hidden(root)) == 2 and all(".stoker-del-" in n for n in hidden(root))
    held_deletions.set()
    parts[0].end_training()
    assert sorted(os.listdir(root)) == ["checkpoint_2", "checkpoint_3"]


def test_two_accelerators_have_their_own_background_io(tmp_path):
    a, b = make()[0], make()[0]
    a.save_state(tmp_path / "a")
    a.save_state(tmp_path / "a")
    b.save_state(tmp_path / "b")
    assert a.checkpoint_io is not b.checkpoint_io
    assert a.checkpoint_io is a.checkpoint_io
    a.end_training()
    b.end_training()
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


# -- what a crash leaves behind ---------------------------------------------------------------------------------
def test_crash_leftovers_are_never_loaded_and_are_cleaned_at_the_next_save(tmp_path):
    parts = make(project_dir=str(tmp_path))
    run(parts, 1)
    parts[0].save_state()  # checkpoint_0
    expected = state_of(parts[1])
    root = tmp_path / "checkpoints"
    # A process killed while deleting, while saving, or with the previous stoker's naming: complete copies of a
    # newer state hide among them, which nothing may take for a checkpoint.
    run(parts, 1)
    parts[0].save_state(root / "newer")
    for name in (".checkpoint_7.stoker-del-0123abcd", ".checkpoint_8.stoker-tmp", ".checkpoint_9.stoker-del",
                 ".newer.stoker-del-89ab"):
        shutil.copytree(root / "newer", root / name)
    shutil.rmtree(root / "newer")
    assert [os.path.basename(p) for p in list_checkpoints(tmp_path)] == ["checkpoint_0"]
    assert newest_checkpoint(tmp_path) == str(root / "checkpoint_0")
    assert find_last_checkpoint([str(root)]) == str(root / "checkpoint_0")  # the Trainer's ckpt_path="last"
    fresh = make(project_dir=str(tmp_path))
    fresh[0].load_state()
    assert_same_weights(expected, state_of(fresh[1]))
    assert fresh[0].save_state() == str(root / "checkpoint_1")  # cleans every leftover (in the background)
    fresh[0].end_training()
    assert sorted(os.listdir(root)) == ["checkpoint_0", "checkpoint_1"]


def test_trash_beside_an_explicit_folder_is_cleaned_at_the_next_save_there(tmp_path):
    parts = make()
    parts[0].save_state(tmp_path / "ckpt")
    shutil.copytree(tmp_path / "ckpt", tmp_path / ".other.stoker-del-00ff")
    (tmp_path / ".ckpt.stoker-tmp").mkdir()
    parts[0].save_state(tmp_path / "ckpt")
    parts[0].end_training()
    assert os.listdir(tmp_path) == ["ckpt"]


# -- asynchronous saves ---------------------------------------------------------------------------------------------
def test_async_save_writes_the_same_files_as_a_synchronous_one(tmp_path):
    parts = make(project_dir=str(tmp_path / "p"))
    run(parts, 3)
    parts[0].save_state(tmp_path / "sync")
    returned = parts[0].save_state(tmp_path / "async", async_save=True)
    assert returned == str(tmp_path / "async")
    parts[0].end_training()
    assert content(tmp_path / "async") == content(tmp_path / "sync")


def test_async_save_keeps_the_state_of_the_moment_it_was_called(tmp_path, monkeypatch):
    trained = threading.Event()
    real_write_files = checkpoint._write_files

    def write_files_later(tmp, files):
        trained.wait(10)  # the background write starts only after training changed everything
        return real_write_files(tmp, files)

    monkeypatch.setattr(checkpoint, "_write_files", write_files_later)
    parts = make()
    run(parts, 2)
    expected = state_of(parts[1])
    windows = parts[5].windows
    parts[0].save_state(tmp_path / "ckpt", async_save=True)
    run(parts, 3)  # training goes on and changes weights, optimizer state and progress in place
    with torch.no_grad():
        for p in parts[1].parameters():
            p.add_(100.0)
    trained.set()
    parts[0].load_state(tmp_path / "ckpt")  # waits for the save to be committed, then loads it
    assert_same_weights(expected, state_of(parts[1]))
    assert parts[5].windows == windows


@pytest.mark.parametrize("mode", ["async_save", "background_commit"])
def test_next_save_waits_for_the_background_one_and_numbering_continues(tmp_path, mode):
    """Both background modes: each save waits for the one before, numbering and rotation (total_limit) hold."""
    parts = make(project_dir=str(tmp_path), total_limit=2)
    names = []
    for _ in range(4):
        run(parts, 1)
        names.append(os.path.basename(parts[0].save_state(**{mode: True})))
    assert names == ["checkpoint_0", "checkpoint_1", "checkpoint_2", "checkpoint_3"]
    assert parts[0].save_iteration == 4
    parts[0].end_training()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_2", "checkpoint_3"]
    fresh = make(project_dir=str(tmp_path))
    fresh[0].load_state()
    assert fresh[5].windows == parts[5].windows and fresh[0].save_iteration == 4


def test_a_failed_async_save_is_raised_later_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    parts = make()
    run(parts, 1)
    parts[0].save_state(tmp_path / "ckpt")
    expected = state_of(parts[1])
    good = manifest(tmp_path / "ckpt")

    failing = True
    real_write_files = checkpoint._write_files

    def full_disk(tmp, files):
        if not failing:
            return real_write_files(tmp, files)
        open(os.path.join(tmp, files[0][0]), "wb").close()  # a partial write, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write_files", full_disk)
    run(parts, 2)
    parts[0].save_state(tmp_path / "ckpt", async_save=True)  # returns: the failure happens in the background
    with pytest.raises(OSError, match="No space left"):
        parts[0].end_training()
    assert os.listdir(tmp_path) == ["ckpt"] and manifest(tmp_path / "ckpt") == good  # no temporary folder left
    fresh = make()
    fresh[0].load_state(tmp_path / "ckpt")
    assert_same_weights(expected, state_of(fresh[1]))
    parts[0].end_training()  # the error was raised once; nothing is pending now
    parts[0].save_state(tmp_path / "ckpt", async_save=True)  # fails in the background again
    with pytest.raises(OSError, match="No space left"):  # the next save raises it, before writing anything
        parts[0].save_state(tmp_path / "ckpt")
    assert manifest(tmp_path / "ckpt") == good
    failing = False
    parts[0].save_state(tmp_path / "ckpt")
    assert manifest(tmp_path / "ckpt") != good


def test_a_forked_child_saves_with_its_own_background_io(tmp_path):
    import multiprocessing

    parts = make()
    parts[0].save_state(tmp_path / "ckpt")
    parts[0].save_state(tmp_path / "ckpt")  # the parent's worker threads exist now
    child = multiprocessing.get_context("fork").Process(target=_save_twice, args=(parts[0], str(tmp_path / "c")))
    child.start()
    child.join(30)
    if child.exitcode is None:  # hung on the parent's worker threads, which do not exist in a forked child
        child.kill()
        child.join()
    assert child.exitcode == 0
    verify_checkpoint(tmp_path / "c")
    parts[0].end_training()


def _save_twice(accelerator, path):
    torch.set_num_threads(1)
    accelerator.save_state(path)
    accelerator.save_state(path)
    accelerator.end_training()


# -- background commits (written now, made durable and renamed on the saver thread) ------------------------------------
@pytest.fixture
def held_fsyncs(monkeypatch):
    """Commits on the saver thread (fsyncs, rename) wait until the test sets the returned event."""
    release = threading.Event()
    real_commit = checkpoint._commit

    def slow_commit(*args):
        if threading.current_thread() is not threading.main_thread():
            release.wait(10)
        real_commit(*args)

    monkeypatch.setattr(checkpoint, "_commit", slow_commit)
    yield release
    release.set()


def test_background_commit_writes_the_same_files_as_a_synchronous_one(tmp_path):
    parts = make()
    run(parts, 3)
    parts[0].save_state(tmp_path / "sync")
    assert parts[0].save_state(tmp_path / "later", background_commit=True) == str(tmp_path / "later")
    parts[0].end_training()
    verify_checkpoint(tmp_path / "later")
    assert content(tmp_path / "later") == content(tmp_path / "sync")


def test_background_commit_appears_only_when_durable_with_the_state_of_its_call(tmp_path, held_fsyncs):
    parts = make()
    run(parts, 1)
    parts[0].save_state(tmp_path / "ckpt")
    old = manifest(tmp_path / "ckpt")
    run(parts, 2)
    expected, windows = state_of(parts[1]), parts[5].windows
    parts[0].save_state(tmp_path / "ckpt", background_commit=True)
    # Its files are written (hidden, beside the target); until they are on disk the name keeps the old checkpoint.
    assert visible(tmp_path) == ["ckpt"] and manifest(tmp_path / "ckpt") == old
    assert ".ckpt.stoker-tmp" in hidden(tmp_path)
    run(parts, 3)  # training goes on and changes the state in place: what was written is the state of the call
    with torch.no_grad():
        for p in parts[1].parameters():
            p.add_(100.0)
    held_fsyncs.set()
    parts[0].load_state(tmp_path / "ckpt")  # waits for the commit, then loads it
    assert manifest(tmp_path / "ckpt") != old
    assert_same_weights(expected, state_of(parts[1]))
    assert parts[5].windows == windows
    parts[0].end_training()
    assert hidden(tmp_path) == []


def test_a_failed_background_commit_is_raised_later_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    parts = make()
    run(parts, 1)
    parts[0].save_state(tmp_path / "ckpt")
    expected, good = state_of(parts[1]), manifest(tmp_path / "ckpt")

    def failing_fsync(path):
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(background, "_fsync", failing_fsync)
    run(parts, 2)
    parts[0].save_state(tmp_path / "ckpt", background_commit=True)  # returns: the commit fails in the background
    with pytest.raises(OSError, match=r"could not write the checkpoint .*Input/output error.*previous checkpoint"):
        parts[0].end_training()
    assert os.listdir(tmp_path) == ["ckpt"] and manifest(tmp_path / "ckpt") == good  # no temporary folder left
    fresh = make()
    fresh[0].load_state(tmp_path / "ckpt")
    assert_same_weights(expected, state_of(fresh[1]))


def test_in_background_chooses_the_mode_of_the_saves_inside_it_only(tmp_path, held_fsyncs):
    parts = make()
    run(parts, 1)
    io = parts[0].checkpoint_io
    with io.in_background():
        parts[0].save_state(tmp_path / "later")
    assert not os.path.exists(tmp_path / "later")  # committed once its fsyncs finish
    held_fsyncs.set()
    assert io.mode is None
    parts[0].save_state(tmp_path / "now")  # outside the block: synchronous (and after the pending commit)
    verify_checkpoint(tmp_path / "now")
    verify_checkpoint(tmp_path / "later")
