"""When the Trainer asks for its loaders (``stoker/trainer/loader_requests.py``), how often, what it checks then, the
few-workers warning (``workers.py``), and overfitting's validation on the train batches."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, SequentialSampler, random_split

from stoker import Callback, Trainer, seed_everything
from stoker.trainer import workers
from stoker.trainer.stages import TRAIN
from tests.helpers.models import Regressor, make_loader, make_regression_data


def quiet(root: Any, **kw: Any) -> Trainer:
    return Trainer(default_root_dir=str(root), logger=False, enable_progress_bar=False, enable_model_summary=False,
                   seed=0, **kw)


class Journal(Callback):
    """Writes the hooks it sees into the module's journal, so loader requests show up between them."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal

    def on_fit_start(self, trainer, module):
        self.journal.append("on_fit_start")

    def on_sanity_check_start(self, trainer, module):
        self.journal.append("on_sanity_check_start")

    def on_train_start(self, trainer, module):
        self.journal.append("on_train_start")

    def on_validation_start(self, trainer, module):
        self.journal.append("on_validation_start")

    def on_test_start(self, trainer, module):
        self.journal.append("on_test_start")


class Asking(Regressor):
    """Its loader hooks write into ``journal`` (with the epoch when asked) and build fresh loaders."""

    def __init__(self, journal: list[str]) -> None:
        super().__init__()
        self.journal = journal

    def _note(self, name: str) -> None:
        sanity = "/sanity" if self.trainer.sanity_checking else ""
        self.journal.append(f"{name}@{self.trainer.current_epoch}{sanity}")

    def train_dataloader(self):
        self._note("train")
        return make_loader(make_regression_data(16), batch_size=8)

    def val_dataloader(self):
        self._note("val")
        return make_loader(make_regression_data(8, seed=1), batch_size=8)

    def test_dataloader(self):
        self._note("test")
        return make_loader(make_regression_data(8, seed=2), batch_size=8)


def test_fit_asks_for_val_at_the_first_validation_and_train_after_the_sanity_check(tmp_path):
    journal: list[str] = []
    t = quiet(tmp_path, max_epochs=2, num_sanity_val_steps=1, callbacks=[Journal(journal)])
    t.fit(Asking(journal))
    assert journal[:6] == ["on_fit_start", "on_sanity_check_start", "val@0/sanity", "on_validation_start", "train@0",
                           "on_train_start"]
    assert journal.count("train@0") == 1 and len([j for j in journal if j.startswith(("val", "train"))]) == 2


def test_without_a_sanity_check_val_is_asked_right_after_train_when_the_first_epoch_validates(tmp_path):
    journal: list[str] = []
    t = quiet(tmp_path, max_epochs=2, num_sanity_val_steps=0, callbacks=[Journal(journal)])
    t.fit(Asking(journal))
    assert journal[:4] == ["on_fit_start", "train@0", "val@0", "on_train_start"]
    assert journal.count("val@0") == 1 and "val@1" not in journal


def test_val_is_asked_at_the_first_validation_when_the_first_epoch_does_not_validate(tmp_path):
    journal: list[str] = []
    counts: list[list[float]] = []

    class Counts(Callback):
        def on_train_epoch_end(self, trainer, module):
            counts.append(list(trainer.num_val_batches))

    t = quiet(tmp_path, max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=0,
              callbacks=[Journal(journal), Counts()])
    t.fit(Asking(journal))
    assert journal[:4] == ["on_fit_start", "train@0", "on_train_start", "val@1"]
    assert counts == [[float("inf")], [1]]  # not known until asked for
    t = quiet(tmp_path, max_epochs=1, limit_val_batches=0)
    t.fit(Asking(journal))
    assert t.num_val_batches == []  # no validation: nothing to count


def test_test_loaders_are_asked_for_when_the_stage_runs_once(tmp_path):
    journal: list[str] = []
    module = Asking(journal)
    t = quiet(tmp_path, max_epochs=1, callbacks=[Journal(journal)])
    t.fit(module)
    journal.clear()
    t.test(module)
    assert journal == ["test@1", "on_test_start"]


@pytest.mark.parametrize("sanity, every, n, train_epochs, val_epochs", [
    (0, 1, 2, [0, 2, 4], [0, 2, 4]),
    (1, 1, 1, [0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5]),  # the sanity check's request counts for epoch 0
    (1, 2, 1, [0, 1, 2, 3, 4, 5], [1, 3, 5]),  # epoch 0 does not validate: the sanity check's does not count
    (0, 3, 2, [0, 2, 4], [2, 5]),  # val asked at validations two or more epochs after the last request
    (0, 2, 4, [0, 4], [1, 5]),
])
def test_reload_dataloaders_every_n_epochs_asks_again_at_lightnings_epochs(tmp_path, sanity, every, n,
                                                                           train_epochs, val_epochs):
    journal: list[str] = []
    t = quiet(tmp_path, max_epochs=6, num_sanity_val_steps=sanity, check_val_every_n_epoch=every,
              reload_dataloaders_every_n_epochs=n)
    t.fit(Asking(journal))
    assert [int(j[6:]) for j in journal if j.startswith("train@")] == train_epochs
    assert [int(j[4:]) for j in journal if j.startswith("val@") and "sanity" not in j] == val_epochs


def test_loaders_passed_to_fit_are_kept_when_reloading(tmp_path):
    train, val = make_loader(make_regression_data(16)), make_loader(make_regression_data(8, seed=1))
    t = quiet(tmp_path, max_epochs=3, reload_dataloaders_every_n_epochs=1)
    t.fit(Regressor(), train, val)
    assert t.val_dataloaders is val and t.global_step == 6


def test_train_dataloader_is_the_loader_the_fit_was_given(tmp_path):
    """Lightning's ``trainer.train_dataloader``: what the fit was given (a list stays a list; overfitting's rebuilt
    in-order loaders); the prepared loader, with the run's position, is ``fit_run.train_loader``."""
    data = make_regression_data(32)
    t = quiet(tmp_path, max_epochs=1, limit_train_batches=2)
    assert t.train_dataloader is None
    loader = make_loader(data)
    t.fit(Regressor(), loader)
    assert t.train_dataloader is loader and len(t.train_dataloader) == 4 and t.num_training_batches == 2
    assert t.fit_run.train_loader.state_dict()["epoch"] == 1

    class Pair(Regressor):
        def training_step(self, batch, batch_idx):
            return super().training_step(batch[0], batch_idx)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):  # validates on each train loader
            return super().validation_step(batch, batch_idx)

    shuffled = [make_loader(data, shuffle=True), make_loader(data, shuffle=True)]
    t = quiet(tmp_path / "pair", max_epochs=1, overfit_batches=1)
    with pytest.warns(UserWarning, match="replaced by a SequentialSampler"):
        t.fit(Pair(), shuffled)
    given = t.train_dataloader
    assert isinstance(given, list) and len(given) == 2
    assert all(isinstance(dl.sampler, SequentialSampler) and dl.dataset is data for dl in given)


def test_an_iterable_dataset_with_a_length_warns_at_each_stage(tmp_path):
    data = make_regression_data(16)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(data.tensors[0], data.tensors[1]))

    class Sized(Stream):
        def __len__(self):
            return 16

    class Predicting(Regressor):
        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self(batch[0])

    module, t = Predicting(), quiet(tmp_path, max_epochs=1)
    sized = DataLoader(Sized(), batch_size=8)
    for run in (lambda: t.fit(module, sized, sized), lambda: t.validate(module, sized),
                lambda: t.test(module, sized), lambda: t.predict(module, sized)):
        with pytest.warns(UserWarning, match=r"IterableDataset` has `__len__` defined\. The \w+_dataloader's length"):
            run()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*__len__")
        t.fit(module, DataLoader(Stream(), batch_size=8))  # no length: nothing to warn about


def test_a_bad_loader_from_a_hook_is_an_error_when_it_is_asked_for(tmp_path):
    class BadVal(Regressor):
        def train_dataloader(self):
            return make_loader(make_regression_data(16))

        def val_dataloader(self):
            return torch.zeros(4, 8)  # a tensor, not batches

    t = quiet(tmp_path, max_epochs=1)
    with pytest.raises(TypeError, match="Loader #0 is a Tensor"):
        t.fit(BadVal())
    assert t.global_step == 0  # asked with the train loader, before training (the first epoch validates)
    t = quiet(tmp_path, max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=0)
    with pytest.raises(TypeError, match="Loader #0 is a Tensor"):
        t.fit(BadVal())
    assert t.global_step == 4  # epoch 0 trained: the val hook was asked at the first validation, in epoch 1

    class EmptyTrain(Regressor):
        def train_dataloader(self):
            return make_loader(make_regression_data(0))

    with pytest.raises(ValueError, match=r"The train loader has no batches \(it is empty\)"):
        quiet(tmp_path, max_epochs=1).fit(EmptyTrain())
    with pytest.raises(ValueError, match="exactly one train loader"):
        quiet(tmp_path, max_epochs=1).fit(Regressor())  # no hook and none passed: said before any work


def test_estimated_stepping_batches_asks_for_the_train_loader_early(tmp_path):
    journal: list[str] = []

    class Estimating(Asking):
        def configure_optimizers(self):
            self.journal.append(f"steps={self.trainer.estimated_stepping_batches}")
            return super().configure_optimizers()

    t = quiet(tmp_path, max_epochs=3)
    t.fit(Estimating(journal))
    assert journal[:2] == ["train@0", "steps=6"] and journal.count("train@0") == 1


def test_estimated_stepping_batches_read_in_setup_warns_that_it_is_not_known_yet(tmp_path):
    seen: list[float] = []

    class Early(Asking):
        def setup(self, stage):
            seen.append(self.trainer.estimated_stepping_batches)

    with pytest.warns(UserWarning, match="before fit has prepared its train loader.*configure_optimizers"):
        quiet(tmp_path, max_epochs=3).fit(Early([]))
    assert seen == [float("inf")]


def test_resuming_from_checkpoints_saved_before_and_after_the_first_validation(tmp_path):
    def run(max_steps: int, ckpt: Any = None) -> Regressor:
        module = Regressor()
        t = quiet(tmp_path, max_steps=max_steps, enable_checkpointing=False)
        data = make_loader(make_regression_data(48), batch_size=8, shuffle=True)
        t.fit(module, data, make_loader(make_regression_data(16, seed=1)), ckpt_path=ckpt)
        if ckpt is None:
            t.save_checkpoint(tmp_path / f"at{max_steps}")
        return module

    whole = run(10)
    for stop in (3, 8):  # mid-epoch 0 (no validation yet), mid-epoch 1 (after one)
        run(stop)
        resumed = run(10, ckpt=tmp_path / f"at{stop}")
        for got, want in zip(resumed.parameters(), whole.parameters()):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


class Rows(Dataset):
    """Not a TensorDataset: loading it counts as work a worker could do."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((8,), float(i)), torch.zeros(2)


def test_few_workers_warning_once_per_loader_and_stage(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "available_cpus", lambda: 8)
    train, val = DataLoader(Rows(), batch_size=4), DataLoader(Rows(), batch_size=4)
    t = quiet(tmp_path, max_epochs=2, num_sanity_val_steps=0)
    with pytest.warns(UserWarning) as seen:
        t.fit(Regressor(), train, val)
        t.fit(Regressor(), train, val)
        t.test(Regressor(), val)
    messages = [str(w.message) for w in seen if "does not have many workers" in str(w.message)]
    assert [m.split(":")[0] for m in messages] == ["The 'train_dataloader' does not have many workers",
                                                    "The 'val_dataloader' does not have many workers",
                                                    "The 'test_dataloader' does not have many workers"]
    assert "num_workers=3" in messages[0]


@pytest.mark.parametrize("cpus, loader", [
    (8, lambda: DataLoader(Rows(), batch_size=4, num_workers=3)),  # enough workers
    (2, lambda: DataLoader(Rows(), batch_size=4, num_workers=1)),  # one spare CPU, one worker
    (8, lambda: make_loader(make_regression_data(16))),  # in-memory tensors: workers would only copy
    (8, lambda: DataLoader(random_split(make_regression_data(16), [8, 8])[0], batch_size=4)),  # a part of them
    (8, lambda: DataLoader(torch.zeros(16, 8), batch_size=4)),  # a tensor
    (1, lambda: DataLoader(Rows(), batch_size=4)),  # no CPU to spare
    (8, lambda: [torch.zeros(4, 8)]),  # not a DataLoader: its workers are not ours to count
])
def test_no_few_workers_warning(tmp_path, monkeypatch, recwarn, cpus, loader):
    monkeypatch.setattr(workers, "available_cpus", lambda: cpus)
    workers.warn_few_workers(quiet(tmp_path), loader(), TRAIN)
    assert not [w for w in recwarn if "does not have many workers" in str(w.message)]


def test_few_workers_rule_counts_the_processes_sharing_the_machine(monkeypatch):
    monkeypatch.setattr(workers, "available_cpus", lambda: 8)
    assert [workers.suggested_workers(n) for n in (1, 2, 3, 4, 8)] == [3, 3, 1, 1, 0]


@pytest.mark.parametrize("context, persistent, expected", [("spawn", False, True), ("spawn", True, False),
                                                            ("fork", False, False)])
def test_spawned_workers_without_persistent_workers_get_lightnings_advice(tmp_path, recwarn, context, persistent,
                                                                         expected):
    loader = DataLoader(Rows(), batch_size=4, num_workers=2, multiprocessing_context=context,
                        persistent_workers=persistent)
    workers.warn_few_workers(quiet(tmp_path), loader, TRAIN)
    workers.warn_few_workers(quiet(tmp_path), loader, TRAIN)  # once per loader and stage
    advice = [str(w.message) for w in recwarn if "Consider setting `persistent_workers=True`" in str(w.message)]
    assert advice == (["Consider setting `persistent_workers=True` in 'train_dataloader' to speed up the dataloader "
                       "worker initialization: its workers are started with the 'spawn' method, so each epoch starts "
                       "them as new interpreters that import torch again."] if expected else [])


def test_overfit_batches_validates_on_the_train_batches(tmp_path):
    seen: dict[str, list[torch.Tensor]] = {"train": [], "val": []}

    class Both(Asking):
        def training_step(self, batch, batch_idx):
            seen["train"].append(batch[0])
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch, batch_idx):
            seen["val"].append(batch[0])
            return super().validation_step(batch, batch_idx)

    journal: list[str] = []
    quiet(tmp_path, max_epochs=2, overfit_batches=1, num_sanity_val_steps=0).fit(Both(journal))
    assert len(seen["val"]) == 2 and all(torch.equal(v, seen["train"][0]) for v in seen["train"] + seen["val"])
    assert not [j for j in journal if j.startswith("val")]  # the val loaders are not asked for


def test_overfit_batches_reads_each_of_several_train_loaders_in_order(tmp_path):
    firsts: list[torch.Tensor] = []

    class Pair(Regressor):
        def training_step(self, batch, batch_idx):
            firsts.append(batch[1][0][:, 0])
            return super().training_step(batch[0], batch_idx)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):  # validates on each train loader
            return super().validation_step(batch, batch_idx)

    data = make_regression_data(32)
    loaders = [make_loader(data, shuffle=True), make_loader(data, shuffle=True)]
    with pytest.warns(UserWarning, match="replaced by a SequentialSampler"):
        quiet(tmp_path, max_epochs=2, overfit_batches=2).fit(Pair(), loaders)
    assert all(torch.equal(f, data[0:8][0][:, 0]) for f in firsts[::2])


def test_seed_everything_records_the_worker_choice(monkeypatch):
    for name in ("STOKER_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.setenv(name, "0")  # recorded first, so the teardown restores the true previous state
    seed_everything(3, workers=True)
    assert os.environ["PL_SEED_WORKERS"] == "1"
    seed_everything(3)
    assert os.environ["PL_SEED_WORKERS"] == "0"


def test_a_whole_float_batch_limit_is_a_count(tmp_path):
    t = quiet(tmp_path, max_epochs=1, limit_train_batches=1e50, limit_val_batches=1.0)
    assert t.limit_train_batches == int(1e50) and t.limit_val_batches is None
    t.fit(Regressor(), make_loader(make_regression_data(16)), make_loader(make_regression_data(8)))
    assert t.num_training_batches == 2 and t.num_val_batches == [1]
    with pytest.raises(ValueError, match=r"limit_train_batches=1.5\) must be None"):
        quiet(tmp_path, limit_train_batches=1.5)


class _OwnLoaders(Regressor):
    """Brings its own test loader and counts the requests."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def test_dataloader(self) -> DataLoader:
        self.asked += 1
        return make_loader(make_regression_data(16), 8)


def test_the_loader_hooks_are_methods_of_the_module_that_the_trainer_calls_only_when_overridden(tmp_path):
    from stoker import TrainingModule

    with pytest.raises(NotImplementedError, match="defines no val_dataloader"):
        TrainingModule().val_dataloader()
    module = _OwnLoaders()
    assert quiet(tmp_path, limit_test_batches=0).test(module) == []  # a stage of zero batches asks for none
    assert module.asked == 0
    assert len(quiet(tmp_path).test(module)) == 1 and module.asked == 1
    fitted = quiet(tmp_path, max_epochs=1)  # no val_dataloader of its own: no validation, no error
    fitted.fit(module, make_loader(make_regression_data(16), 8))
    assert fitted.fit_loop.validation_count == 0
