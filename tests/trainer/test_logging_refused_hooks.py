"""``self.log`` in a hook where nothing records the value (Lightning's table: the run's set-up and end, a stage's end
hook, checkpoint I/O, predict) is a ``ValueError`` in Lightning's words, from the module as from a callback."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from stoker import Callback
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


def loader() -> Any:
    return make_loader(make_regression_data(n=16), batch_size=8)


def logs_in(hook: str) -> Regressor:
    """A Regressor whose ``hook`` logs a value, then does what it did."""
    original = getattr(Regressor, hook)

    def logging(self: Regressor, *args: Any, **kwargs: Any) -> Any:
        self.log("value", 1.0)
        return original(self, *args, **kwargs)

    return type(f"LogsIn_{hook}", (Regressor,), {hook: logging})()


@pytest.mark.parametrize("hook", ["setup", "on_fit_start", "on_validation_end", "on_train_end", "on_fit_end",
                                  "on_save_checkpoint", "teardown"])
def test_logging_where_nothing_records_it_is_refused(tmp_path: Any, hook: str) -> None:
    with pytest.raises(ValueError, match=rf"^You can't `self.log\(\)` inside `{hook}`.*self.log\('value'\) in {hook}"):
        quiet_trainer(max_epochs=1, default_root_dir=str(tmp_path), enable_checkpointing=True,
                      num_sanity_val_steps=0).fit(logs_in(hook), loader(), loader())


def test_a_callback_logging_in_predict_is_refused_and_epoch_end_hooks_still_log() -> None:
    class Logs(Callback):
        def on_validation_epoch_end(self, trainer, module):
            module.log("allowed", torch.tensor(2.0))

        def on_predict_start(self, trainer, module):
            module.log("refused", 1.0)

    trainer = quiet_trainer(max_epochs=1, callbacks=[Logs()], num_sanity_val_steps=0)
    trainer.fit(Regressor(), loader(), loader())
    assert float(trainer.callback_metrics["allowed"]) == 2.0
    with pytest.raises(ValueError, match="You can't `self.log\\(\\)` inside `on_predict_start`"):
        trainer.predict(Regressor(), loader())
