"""The TensorBoard logger's file through TensorBoard's own ``SummaryWriter``: read back with TensorBoard's readers,
flushed on request and at interpreter exit (once, by the process that wrote it), Lightning's writer options."""

import glob
import os

import pytest

from stoker.loggers import TensorBoardLogger
from tests.helpers.trackers_readback import tensorboard_events, tensorboard_scalars


def _event_files(log_dir):
    return sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*")))


def _records(path):
    from tensorboard.backend.event_processing.event_file_loader import (
        LegacyEventFileLoader,
    )

    return list(LegacyEventFileLoader(path).Load())  # the events as written (no migration)


def test_flush_writes_the_pending_values_before_finalize(tmp_path):
    logger = TensorBoardLogger(tmp_path)  # max_queue 10, flush_secs 120: nothing would be written on its own
    for step in range(3):
        logger.log_metrics({"x": float(step)}, step=step)
    logger.flush()
    assert tensorboard_scalars(logger.log_dir)["x"] == [(s, float(s)) for s in range(3)]
    logger.finalize("success")


def test_experiment_is_the_writer_of_the_run_and_its_values_read_back(tmp_path):
    """``experiment`` is the SummaryWriter the scalars and hyperparameters go through: what the user adds with it and
    what the logger writes land in one run, in order."""
    from torch.utils.tensorboard import SummaryWriter

    logger = TensorBoardLogger(tmp_path, flush_secs=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    writer = logger.experiment
    assert isinstance(writer, SummaryWriter) and logger.experiment is writer
    writer.add_scalar("other", 5.0, global_step=1)
    logger.log_metrics({"loss": 0.5}, step=1)
    logger.finalize("success")
    scalars = tensorboard_scalars(logger.log_dir)
    assert scalars["loss"] == [(0, 1.0), (1, 0.5)] and scalars["other"] == [(1, 5.0)]
    assert "_hparams_/session_start_info" in tensorboard_events(logger.log_dir).PluginTagToContent("hparams")


def test_purge_step_is_written_as_tensorboard_expects(tmp_path):
    from tensorboard.compat.proto.event_pb2 import SessionLog

    logger = TensorBoardLogger(tmp_path, purge_step=7)
    logger.log_metrics({"x": 1.0}, step=7)
    logger.finalize("success")
    [path] = _event_files(logger.log_dir)
    starts = [e.step for e in _records(path) if e.HasField("session_log") and e.session_log.status == SessionLog.START]
    assert starts == [7]


def test_unknown_writer_options_fail_at_construction(tmp_path):
    with pytest.raises(TypeError, match=r"unknown options \['flush_sec'\]"):
        TensorBoardLogger(tmp_path, flush_sec=5)


def test_values_pending_at_interpreter_exit_are_written(tmp_path):
    """A script that never calls finalize (Accelerate scripts often skip end_training) keeps every value."""
    import subprocess
    import sys

    code = ("import sys\nfrom stoker.loggers import TensorBoardLogger\nlogger = TensorBoardLogger(sys.argv[1])\n"
            "for step in range(5):\n    logger.log_metrics({'x': float(step)}, step=step)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [log_dir] = glob.glob(str(tmp_path / "stoker_logs" / "version_*"))
    assert tensorboard_scalars(log_dir)["x"] == [(s, float(s)) for s in range(5)]


def test_a_forked_child_does_not_repeat_the_parents_pending_values(tmp_path):
    """A child forked while values are pending exits normally (its atexit handlers run); the file holds each value
    once."""
    import subprocess
    import sys

    code = (
        "import os, sys\nfrom stoker.loggers import TensorBoardLogger\nlogger = TensorBoardLogger(sys.argv[1])\n"
        "logger.log_metrics({'x': 0.0}, step=0)\nlogger.log_metrics({'x': 1.0}, step=1)  # pending\n"
        "pid = os.fork()\nif pid == 0:\n    sys.exit(0)\n"
        "_, status = os.waitpid(pid, 0)\nassert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status\n"
        "logger.finalize('success')\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [log_dir] = glob.glob(str(tmp_path / "stoker_logs" / "version_*"))
    assert tensorboard_scalars(log_dir)["x"] == [(0, 0.0), (1, 1.0)]
