"""ModelCheckpoint logic against a stand-in trainer: names, top-k, last, rotation, state. See
test_checkpoint_fit.py for the same behaviour inside real fits."""

import math
import os

import pytest
import torch

from stoker.callbacks import ModelCheckpoint
from stoker.callbacks.checkpoint_files import format_checkpoint_name, safe_name
from tests.callbacks.fakes import FakeTrainer, read_state


def _folders(path):
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def _epoch(trainer, cb, score=None, steps=2, name="val/loss"):
    """One fake epoch: ``steps`` optimizer steps, then (optionally) a validation metric, then epoch end."""
    trainer.global_step += steps
    if score is not None:
        trainer.callback_metrics[name] = torch.tensor(score)
        trainer.validation_count += 1
        cb.on_validation_end(trainer, trainer.module)
    cb.on_train_epoch_end(trainer, trainer.module)
    trainer.current_epoch += 1


def _start(tmp_path, **kw):
    kw.setdefault("save_last", True)  # these tests follow `last` too (Lightning's default, and stoker's, is off)
    cb = ModelCheckpoint(**kw)
    trainer = FakeTrainer(str(tmp_path), callbacks=[cb], num_val_batches=[2], fitting=True)
    cb.setup(trainer, trainer.module, "fit")
    cb.on_fit_start(trainer, trainer.module)
    return cb, trainer


# -- names ---------------------------------------------------------------------------------------------------------
def test_template_fields_specs_and_unsafe_characters():
    metrics = {"epoch": 3, "step": 120, "val/loss": torch.tensor(0.123456), "acc": 0.5}
    assert format_checkpoint_name("{epoch}-{step}-{val/loss:.3f}", metrics) == "epoch=3-step=120-val_loss=0.123"
    assert format_checkpoint_name("best-{acc:.2f}", metrics, auto_insert_metric_name=False) == "best-0.50"
    assert format_checkpoint_name("{missing:.2f}", metrics) == "missing=nan"


@pytest.mark.parametrize("raw, safe", [
    ('a:b*c?d"e<f>g|h\\i/j', "a_b_c_d_e_f_g_h_i_j"),
    (".hidden", "_hidden"),
    ("CON", "_CON"),
    ("name. ", "name"),
    ("", "_"),
])
def test_safe_name(raw, safe):
    assert safe_name(raw) == safe


def test_bad_template_and_arguments_fail_at_construction():
    with pytest.raises(ValueError, match=r"filename='\{epoch:q\}'"):
        ModelCheckpoint(filename="{epoch:q}")
    with pytest.raises(ValueError, match="mode='best'"):
        ModelCheckpoint(mode="best")
    with pytest.raises(ValueError, match="save_top_k=-2"):
        ModelCheckpoint(save_top_k=-2)
    with pytest.raises(ValueError, match="every_n_epochs=-1"):
        ModelCheckpoint(every_n_epochs=-1)


# -- top-k and last ----------------------------------------------------------------------------------------------------
def test_top_k_min_keeps_best_and_last_is_always_newest(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/loss", save_top_k=2, filename="{epoch}-{val/loss:.2f}")
    for score in (3.0, 1.0, 2.0, 0.5, 5.0):
        _epoch(trainer, cb, score)
    ckpts = tmp_path / "checkpoints"
    assert _folders(ckpts) == ["epoch=1-val_loss=1.00.ckpt", "epoch=3-val_loss=0.50.ckpt", "last.ckpt"]
    assert cb.best_model_path == str(ckpts / "epoch=3-val_loss=0.50.ckpt")
    assert float(cb.best_model_score) == 0.5
    assert cb.kth_best_model_path == str(ckpts / "epoch=1-val_loss=1.00.ckpt")
    # The last epoch did not improve, yet `last` holds its state (step 10), not step 8.
    assert read_state(str(ckpts / "last.ckpt"))["global_step"] == 10
    assert cb.last_model_path == str(ckpts / "last.ckpt")


def test_top_k_max_mode_and_nan_is_never_best(tmp_path):
    cb, trainer = _start(tmp_path, monitor="acc", mode="max", save_top_k=1)
    _epoch(trainer, cb, math.nan, name="acc")
    _epoch(trainer, cb, 0.7, name="acc")
    _epoch(trainer, cb, 0.6, name="acc")
    assert float(cb.best_model_score) == pytest.approx(0.7)
    assert _folders(tmp_path / "checkpoints") == ["epoch=1-step=4.ckpt", "last.ckpt"]


def test_without_monitor_the_newest_is_kept(tmp_path):
    cb, trainer = _start(tmp_path, save_top_k=1)
    for _ in range(4):
        _epoch(trainer, cb)
    assert _folders(tmp_path / "checkpoints") == ["epoch=3-step=8.ckpt", "last.ckpt"]
    assert cb.best_model_path.endswith("epoch=3-step=8.ckpt")


def test_save_top_k_zero_writes_only_last_and_minus_one_keeps_all(tmp_path):
    cb, trainer = _start(tmp_path / "a", monitor="val/loss", save_top_k=0)
    for score in (1.0, 2.0):
        _epoch(trainer, cb, score)
    assert _folders(tmp_path / "a" / "checkpoints") == ["last.ckpt"]
    assert cb.best_model_path == ""
    cb, trainer = _start(tmp_path / "b", monitor="val/loss", save_top_k=-1, save_last=False)
    for score in (1.0, 2.0, 0.5):
        _epoch(trainer, cb, score)
    assert _folders(tmp_path / "b" / "checkpoints") == [
        "epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt"]


def test_every_n_train_steps_saves_once_per_optimizer_step_not_per_micro_batch(tmp_path):
    cb, trainer = _start(tmp_path, every_n_train_steps=2, every_n_epochs=0, save_top_k=-1, save_last=False)
    for batch_idx in range(12):  # accumulation 2: the optimizer steps on every second batch
        trainer.global_step = (batch_idx + 1) // 2
        cb.on_train_batch_end(trainer, trainer.module, None, None, batch_idx)
    assert trainer.saves == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt"]


def test_existing_foreign_folder_gets_a_version_suffix(tmp_path):
    (tmp_path / "checkpoints" / "epoch=0-step=2.ckpt").mkdir(parents=True)
    cb, trainer = _start(tmp_path, save_top_k=-1)
    _epoch(trainer, cb)
    assert cb.best_model_path.endswith("epoch=0-step=2-v1.ckpt")


def test_constant_filename_replaces_the_evicted_checkpoint_in_place(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/loss", filename="best", save_last=False)
    for score in (2.0, 1.0, 3.0):
        _epoch(trainer, cb, score)
    assert _folders(tmp_path / "checkpoints") == ["best.ckpt"]
    assert read_state(cb.best_model_path)["global_step"] == 4


def test_missing_monitor_errors_name_the_available_metrics(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/los")
    trainer.num_val_batches = []
    trainer.callback_metrics = {"val/loss": 1.0, "train/loss": 2.0}
    with pytest.raises(RuntimeError, match=r"'val/los'.*\['train/loss', 'val/loss'\]"):
        _epoch(trainer, cb)


def test_missing_monitor_before_first_validation_warns_and_still_saves_last(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/loss", every_n_train_steps=1, every_n_epochs=0)
    trainer.global_step = 1
    with pytest.warns(RuntimeWarning, match="Saving only `last`"):
        cb.on_train_batch_end(trainer, trainer.module, None, None, 0)
    assert _folders(tmp_path / "checkpoints") == ["last.ckpt"]


def test_export_weights_writes_safetensors_beside_and_removes_them_with_their_checkpoint(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/loss", export_weights=True)
    _epoch(trainer, cb, 2.0)
    _epoch(trainer, cb, 1.0)
    weights = tmp_path / "checkpoints" / "weights"
    assert _folders(weights) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    assert (weights / "last.ckpt" / "model.safetensors").is_file()


def test_last_is_a_hard_linked_copy_of_the_top_k_checkpoint(tmp_path):
    cb, trainer = _start(tmp_path)
    _epoch(trainer, cb)
    top = tmp_path / "checkpoints" / "epoch=0-step=2.ckpt" / "state.json"
    last = tmp_path / "checkpoints" / "last.ckpt" / "state.json"
    assert top.read_text() == last.read_text()
    assert os.stat(top).st_ino == os.stat(last).st_ino


def test_state_round_trip_continues_top_k_and_drops_vanished_entries(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/loss", save_top_k=2)
    for score in (3.0, 1.0, 2.0):
        _epoch(trainer, cb, score)
    state = read_state(cb.last_model_path)["callbacks"][cb.state_key]
    assert state["best_k_models"] == {"epoch=1-step=4.ckpt": 1.0, "epoch=2-step=6.ckpt": 2.0}

    resumed, trainer2 = _start(tmp_path, monitor="val/loss", save_top_k=2)
    resumed.load_state_dict(state)
    trainer2.global_step, trainer2.current_epoch = 6, 3
    assert resumed.best_model_path == cb.best_model_path
    _epoch(trainer2, resumed, 1.5)  # better than 2.0: replaces epoch 2, keeps epoch 1
    assert _folders(tmp_path / "checkpoints") == ["epoch=1-step=4.ckpt", "epoch=3-step=8.ckpt", "last.ckpt"]

    lost = ModelCheckpoint(monitor="val/loss", save_top_k=2, dirpath=tmp_path / "checkpoints")
    os.rename(tmp_path / "checkpoints" / "epoch=1-step=4.ckpt", tmp_path / "elsewhere")
    lost.load_state_dict(read_state(resumed.last_model_path)["callbacks"][cb.state_key])
    assert list(lost.best_k_models) == [str(tmp_path / "checkpoints" / "epoch=3-step=8.ckpt")]


def test_state_loaded_before_setup_is_applied_at_setup(tmp_path):
    cb, trainer = _start(tmp_path, monitor="val/loss")
    _epoch(trainer, cb, 1.0)
    fresh = ModelCheckpoint(monitor="val/loss")
    fresh.load_state_dict(cb.state_dict())
    assert fresh.best_model_path == ""
    fresh.setup(FakeTrainer(str(tmp_path)), None, "fit")
    assert fresh.best_model_path == cb.best_model_path


def test_train_end_saves_last_when_newest_state_is_unsaved(tmp_path):
    cb, trainer = _start(tmp_path, every_n_epochs=2)
    _epoch(trainer, cb)  # epoch 0: not a save epoch
    cb.on_train_end(trainer, trainer.module)
    assert trainer.saves == ["last.ckpt"]
    cb.on_train_end(trainer, trainer.module)
    assert trainer.saves == ["last.ckpt"]  # nothing new: not written twice


def test_evicted_checkpoint_is_deleted_only_after_the_new_one_and_last_are_complete(tmp_path, monkeypatch):
    import stoker.accelerator.accelerator as module  # where a save removes evicted folders

    seen = []
    real_remove = module.remove_checkpoint

    def remove(path, io=None):
        if os.path.isdir(path):
            seen.append((os.path.basename(path), os.path.isdir(cb.best_model_path),
                         read_state(cb.last_model_path)["global_step"]))
        real_remove(path, io)

    monkeypatch.setattr(module, "remove_checkpoint", remove)
    cb, trainer = _start(tmp_path, monitor="val/loss")
    _epoch(trainer, cb, 2.0)
    _epoch(trainer, cb, 1.0)
    assert seen == [("epoch=0-step=2.ckpt", True, 4)]
