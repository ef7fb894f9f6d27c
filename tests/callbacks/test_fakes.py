"""The stand-in trainer of the callback unit tests carries only what the real Trainer publishes."""

import pytest

from tests.callbacks.fakes import RECORDS, FakeTrainer, published_names


def test_every_name_of_the_fake_is_published_by_the_trainer(tmp_path):
    fake = FakeTrainer(str(tmp_path))
    names = {n for n in dir(fake) if not n.startswith("_")} - RECORDS
    assert names <= published_names(), sorted(names - published_names())
    assert {"fitting", "window_closed", "epoch_finished", "validation_count", "checkpoint_callback"} <= names


def test_a_name_the_trainer_does_not_publish_is_refused(tmp_path):
    with pytest.raises(AttributeError, match=r"FakeTrainer\._validated: the real Trainer publishes no '_validated'"):
        FakeTrainer(str(tmp_path), _validated=True)
    fake = FakeTrainer(str(tmp_path))
    with pytest.raises(AttributeError, match="publishes no 'epoch_progress'"):
        fake.epoch_progress = 1
    fake.global_step = 3  # a published name: the test moves the run along
    assert fake.global_step == 3


def test_what_callbacks_read_off_the_trainer_is_published_by_it():
    """``TrainerView`` (the type of every hook's ``trainer``) names only what a real Trainer publishes."""
    from stoker.callbacks.base import TrainerView

    names = set(TrainerView.__annotations__) | {n for n in vars(TrainerView) if not n.startswith("_")}
    assert names <= published_names(), sorted(names - published_names())
    assert {"accelerator", "global_step", "window_closed", "save_checkpoint"} <= names
