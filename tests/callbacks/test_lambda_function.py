"""LambdaCallback: plain functions as hooks, called with the hook's arguments; bad names and values refused."""

from __future__ import annotations

import pytest

from stoker.callbacks import LambdaCallback
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def test_functions_are_called_as_hooks_with_the_hooks_arguments(tmp_path):
    seen: list[tuple] = []
    callback = LambdaCallback(
        on_fit_start=lambda t, m: seen.append(("fit_start", t.global_step, type(m).__name__)),
        on_train_batch_end=lambda t, m, outputs, batch, idx: seen.append(("batch_end", idx)),
        on_train_epoch_end=lambda t, m: seen.append(("epoch_end", t.current_epoch)),
        on_test_end=lambda t, m: seen.append(("test_end",)),
    )
    train, val = loaders(n=16)  # 2 batches
    run = trainer(tmp_path, max_epochs=2, callbacks=[callback], enable_checkpointing=False)
    run.fit(Regressor(), train, val)
    run.test(Regressor(), val)
    assert seen == [("fit_start", 0, "Regressor"), ("batch_end", 0), ("batch_end", 1), ("epoch_end", 0),
                    ("batch_end", 0), ("batch_end", 1), ("epoch_end", 1), ("test_end",)]


def test_a_name_that_is_not_a_hook_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="'on_train_epoch_ends' is not a hook.*'on_train_epoch_end'"):
        LambdaCallback(on_train_epoch_ends=lambda t, m: None)
    with pytest.raises(TypeError, match="expected a function"):
        LambdaCallback(on_fit_start=3)
