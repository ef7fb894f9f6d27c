"""ThroughputMonitor over many epochs with a validation in each: the training clock only ever moves forward, by the
steps' own time, however often validation pauses it."""

from __future__ import annotations

from stoker import ThroughputMonitor
from tests.callbacks.modules import loaders, trainer
from tests.callbacks.test_throughput import Timed, clock  # noqa: F401 (clock is a fixture)
from tests.helpers.trackers_readback import ListLogger


def test_training_time_grows_by_the_steps_alone_across_many_validated_epochs(tmp_path, clock):  # noqa: F811
    logger = ListLogger()
    monitor = ThroughputMonitor(flops_per_batch=10.0)
    t = trainer(tmp_path, max_epochs=25, callbacks=[monitor], logger=logger, log_every_n_steps=1,
                limit_train_batches=2, limit_val_batches=1)
    t.fit(Timed(), *loaders())
    times = [row["train/time"] for _, row in logger.rows if "train/time" in row]
    assert len(times) == 50  # one value per optimizer step
    assert times == [0.5 * k for k in range(1, 51)]  # each step's 0.5 s, never a validation's 10 s
    validations = [row["validate/time"] for _, row in logger.rows if "validate/time" in row]
    assert len(validations) == 25 and validations == sorted(validations)
