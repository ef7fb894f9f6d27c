"""fit_validates: the callbacks' rule for "this fit validates", read without importing the Trainer's modules."""

from types import SimpleNamespace

import torch

from stoker import TrainingModule
from stoker.callbacks._fit_progress import fit_validates
from stoker.trainer.overrides import defines_hook


def defines(module, name):  # what the Trainer's module_defines asks
    return defines_hook(module, name, TrainingModule)


class NoValidation(TrainingModule):
    def training_step(self, batch, batch_idx):
        return batch.sum()


class WithValidation(NoValidation):
    def validation_step(self, batch, batch_idx):
        pass


class Inherits(WithValidation):  # validation_step from a user's base class counts
    pass


class Plain(torch.nn.Module):  # not a TrainingModule at all (a stand-in trainer's module)
    def validation_step(self, batch, batch_idx):
        pass


def _trainer(module, num_val_batches=(2,)):
    return SimpleNamespace(module=module, num_val_batches=list(num_val_batches),
                           module_defines=lambda name: module is not None and defines(module, name))


def test_only_a_class_of_the_users_defining_validation_step_counts():
    assert not fit_validates(_trainer(NoValidation()))  # TrainingModule's empty default does not count
    assert fit_validates(_trainer(WithValidation()))
    assert fit_validates(_trainer(Inherits()))
    assert fit_validates(_trainer(Plain()))
    assert not defines(NoValidation(), "validation_step") and defines(Inherits(), "validation_step")


def test_no_validation_batches_means_no_validation():
    assert not fit_validates(_trainer(WithValidation(), num_val_batches=()))
    assert not fit_validates(_trainer(WithValidation(), num_val_batches=(0, 0)))
    assert fit_validates(_trainer(None))  # no module yet: the batches decide
