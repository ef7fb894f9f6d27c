"""Between stages the Trainer releases what the previous stage prepared; a first stage has nothing to release and
pays no garbage collection (a full ``gc.collect()`` costs a tenth of a second and more in a large process)."""

from __future__ import annotations

import pytest

import stoker.accelerator.accelerator as accelerator_module
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


def test_a_first_fit_frees_nothing_and_a_stage_on_another_module_frees_the_first(monkeypatch: pytest.MonkeyPatch) \
        -> None:
    collections: list[bool] = []
    monkeypatch.setattr(accelerator_module, "clear_device_cache",
                        lambda garbage_collection=False: collections.append(garbage_collection))
    trainer = quiet_trainer(max_steps=2)
    assert not trainer.accelerator.holds_prepared
    first = Regressor()
    trainer.fit(first, make_loader(make_regression_data(n=16)))
    assert collections == [] and trainer.accelerator.holds_prepared
    trainer.validate(first, make_loader(make_regression_data(n=16)))  # the same module: kept prepared
    assert collections == []
    trainer.validate(Regressor(), make_loader(make_regression_data(n=16)))
    assert collections == [True]  # the first module's prepared objects released, with a collection
    trainer.accelerator.free_memory()
    assert not trainer.accelerator.holds_prepared
