"""A process killed inside a ModelCheckpoint save that evicts (issue 31, D5): the next start on the folder finishes
the eviction or drops it, so the folder holds the old top-k or the new one, never a folder no one removes; folders
the callback does not own, and checkpoints the restored state keeps, are never touched."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from stoker import Callback, ModelCheckpoint
from stoker.accelerator import verify_checkpoint
from tests.callbacks.modules import loaders, trainer
from tests.helpers.forkserver import run_python
from tests.helpers.models import Regressor

REPO = str(Path(__file__).resolve().parents[2])
Y0, Y1, Y2, Y3 = (f"epoch={e}-step={4 * (e + 1)}.ckpt" for e in range(4))
SCORES = [4.0, 3.0, 2.0, 1.0]


def _checkpoint(dirpath: Path) -> ModelCheckpoint:
    return ModelCheckpoint(dirpath=str(dirpath), monitor="val/score", save_top_k=2, save_last=True)


# Fits 3 epochs with save_top_k=2 (each score better than the last: the newest two are kept) and SIGKILLs itself at
# one point of the save of epoch 2, which evicts epoch 0: after the eviction is recorded ("intent"), between the
# commit and the eviction ("evict"), after the evicted folder left its name but before the record went ("record").
KILLED_RUN = r"""
import os, signal, sys
import stoker.callbacks.checkpoint_writer as writer
from stoker import ModelCheckpoint
from stoker.accelerator import Accelerator
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor

root, dirpath, point = sys.argv[1:4]

def kill(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if point == "intent":
    record = writer._write_record
    writer._write_record = lambda *a: (record(*a), kill())
elif point == "evict":
    Accelerator.remove_checkpoint = kill
else:
    writer._drop_record = kill
callback = ModelCheckpoint(dirpath=dirpath, monitor="val/score", save_top_k=2, save_last=True)
trainer(root, max_epochs=3, callbacks=[callback]).fit(Regressor(val_scores=[4.0, 3.0, 2.0, 1.0]), *loaders())
"""


def _killed_run(tmp_path: Path, point: str) -> Path:
    dirpath = tmp_path / "ckpts"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    done = run_python(["-c", KILLED_RUN, str(tmp_path), str(dirpath), point], env=env, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    return dirpath


def _visible(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def _records(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if ".stoker-evict" in name]


class _Listing(Callback):
    """What the folder holds when training starts: after ModelCheckpoint's on_fit_start, before any new save."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.seen = folder, None

    def on_train_start(self, trainer, module):
        self.seen = _visible(self.folder)

    def on_fit_end(self, trainer, module):  # a fit with nothing left to train has no on_train_start (Lightning's)
        if self.seen is None:
            self.seen = _visible(self.folder)


def _resume(tmp_path: Path, dirpath: Path, max_epochs: int, ckpt_path: str = "last") -> _Listing:
    listing = _Listing(dirpath)
    trainer(tmp_path, max_epochs=max_epochs, callbacks=[_checkpoint(dirpath), listing]).fit(
        Regressor(val_scores=SCORES), *loaders(), ckpt_path=ckpt_path)
    return listing


def _loadable(tmp_path: Path, dirpath: Path, names: list[str]) -> None:
    for name in names:
        verify_checkpoint(str(dirpath / name))  # every file against its manifest
        trainer(tmp_path / "load", logger=False).validate(Regressor(), loaders()[1], ckpt_path=str(dirpath / name))


def test_a_kill_between_commit_and_eviction_leaves_a_folder_the_next_start_removes(tmp_path):
    dirpath = _killed_run(tmp_path, "evict")
    assert _visible(dirpath) == [Y0, Y1, Y2, "last.ckpt"]  # three top-k folders with save_top_k=2
    listing = _resume(tmp_path, dirpath, max_epochs=4)
    assert listing.seen == [Y1, Y2, "last.ckpt"]  # swept at the start, before the first new save
    assert _visible(dirpath) == [Y2, Y3, "last.ckpt"] and _records(dirpath) == []
    _loadable(tmp_path, dirpath, [Y2, Y3, "last.ckpt"])


@pytest.mark.parametrize("point, at_start", [("intent", [Y0, Y1, "last.ckpt"]),
                                             ("record", [Y1, Y2, "last.ckpt"])])
def test_a_kill_anywhere_in_an_evicting_save_leaves_the_old_or_the_new_set(tmp_path, point, at_start):
    dirpath = _killed_run(tmp_path, point)
    listing = _resume(tmp_path, dirpath, max_epochs=4)
    assert listing.seen == at_start and _records(dirpath) == []
    assert _visible(dirpath) == [Y2, Y3, "last.ckpt"]
    _loadable(tmp_path, dirpath, [Y2, Y3, "last.ckpt"])


def test_a_new_fit_on_the_folder_sweeps_the_leftover_too(tmp_path):
    dirpath = _killed_run(tmp_path, "evict")
    listing = _Listing(dirpath)
    with pytest.warns(UserWarning, match="already holds checkpoints of an earlier run"):
        trainer(tmp_path, max_epochs=1, callbacks=[_checkpoint(dirpath), listing]).fit(Regressor(val_scores=SCORES),
                                                                                       *loaders())
    assert listing.seen == [Y1, Y2, "last.ckpt"] and _records(dirpath) == []


def test_folders_the_user_put_there_and_checkpoints_the_restored_state_keeps_are_not_touched(tmp_path):
    dirpath = _killed_run(tmp_path, "evict")
    (dirpath / "notes").mkdir()
    (dirpath / "notes" / "readme.txt").write_text("mine")
    shutil.copytree(dirpath / Y0, dirpath / "kept-by-hand.ckpt")  # a checkpoint the user copied
    (dirpath / ".my-hidden-file").write_text("mine")
    # Resuming from epoch 1, whose top-k still holds epoch 0: that checkpoint is wanted, and stays.
    listing = _resume(tmp_path, dirpath, max_epochs=2, ckpt_path=str(dirpath / Y1))
    assert listing.seen == _visible(dirpath) == [Y0, Y1, Y2, "kept-by-hand.ckpt", "last.ckpt", "notes"]
    assert (dirpath / "notes" / "readme.txt").read_text() == "mine"
    assert (dirpath / ".my-hidden-file").read_text() == "mine" and _records(dirpath) == []
    _loadable(tmp_path, dirpath, ["kept-by-hand.ckpt", Y0, Y1])


def test_a_record_finishes_only_a_committed_save_of_its_own_callback(tmp_path):
    from types import SimpleNamespace

    from stoker.accelerator import Accelerator
    from stoker.callbacks import checkpoint_writer as writer

    folder = tmp_path / "ckpts"
    for name in ("old.ckpt", "new.ckpt", "other.ckpt"):
        (folder / name).mkdir(parents=True)
    run = SimpleNamespace(is_global_zero=True, accelerator=Accelerator(cpu=True))
    # The new name already held a folder (enable_version_counter=False replaces it): the record remembers which.
    writer._write_record(str(folder / "new.ckpt"), [str(folder / "old.ckpt")], "mine")
    writer._write_record(str(folder / "other.ckpt"), [str(folder / "old.ckpt")], "someone else's")
    assert writer.finish_evictions(run, str(folder), "mine", []) == []  # still the recorded folder: no commit
    assert _visible(folder) == ["new.ckpt", "old.ckpt", "other.ckpt"]
    assert _records(folder) == [".other.ckpt.stoker-evict"]  # another callback's record is left to it

    writer._write_record(str(folder / "new.ckpt"), [str(folder / "old.ckpt")], "mine")
    os.rename(folder / "new.ckpt", folder / "replaced")  # the commit: a new folder under the name
    (folder / "new.ckpt").mkdir()
    shutil.rmtree(folder / "replaced")
    assert writer.finish_evictions(run, str(folder), "mine", [str(folder / "other.ckpt")]) == [str(folder / "old.ckpt")]
    run.accelerator.wait_for_checkpoints()
    assert _visible(folder) == ["new.ckpt", "other.ckpt"] and _records(folder) == [".other.ckpt.stoker-evict"]
