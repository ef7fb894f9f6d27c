"""Timer's hooks take the module under Lightning's keyword, `pl_module`, so a script that drives them by keyword
(as Lightning's examples do) measures the same times."""

from __future__ import annotations

from unittest import mock

from stoker.callbacks import Timer
from tests.callbacks.fakes import FakeTrainer


def test_the_stage_hooks_accept_pl_module_by_keyword(tmp_path) -> None:
    clock = mock.Mock(return_value=100.0)
    with mock.patch("stoker.callbacks.timer.time.monotonic", clock):
        timer = Timer(duration={"seconds": 10})
        trainer = FakeTrainer(str(tmp_path), callbacks=[timer])
        timer.on_train_start(trainer=trainer, pl_module=trainer.module)
        assert timer.start_time() == 100.0
        clock.return_value = 103.0
        assert timer.time_elapsed() == 3.0 and timer.time_remaining() == 7.0
        timer.on_validation_start(trainer=trainer, pl_module=trainer.module)
        clock.return_value = 104.5
        timer.on_validation_end(trainer=trainer, pl_module=trainer.module)
        timer.on_train_end(trainer=trainer, pl_module=trainer.module)
        clock.return_value = 200.0  # after the ends, the times stand still
    assert timer.time_elapsed("validate") == 1.5 and timer.time_elapsed("train") == 4.5
    assert not trainer.should_stop
