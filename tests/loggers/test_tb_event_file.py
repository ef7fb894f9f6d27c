"""The TensorBoard logger's own event file: framing checked against TensorBoard's code, read back with its readers,
written without a thread, and handed over to a ``SummaryWriter`` when ``experiment`` is used."""

import glob
import os
import random
import threading

import pytest

from stoker.loggers import TensorBoardLogger
from stoker.loggers.tb_event_file import EventFile, crc32c, masked_crc32c
from tests.helpers.trackers_readback import tensorboard_events, tensorboard_scalars


def _event_files(log_dir):
    return sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*")))


def _records(path):
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    return list(LegacyEventFileLoader(path).Load())  # the events as written (no migration)


def test_crc32c_matches_the_standard_check_value_and_tensorboards_own_masking():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_masked

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    rng = random.Random(0)
    for n in (0, 1, 7, 8, 40, 257):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert masked_crc32c(data) == tensorboard_masked(data), n


def test_event_file_records_are_what_tensorboards_record_writer_frames(tmp_path):
    """Byte for byte: the records of our file equal TensorBoard's RecordWriter framing of the same events."""
    import io

    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    f = EventFile(str(tmp_path))
    f.add_summary(Summary(value=[Summary.Value(tag="loss", simple_value=0.5)]), step=3)
    f.close()
    events = _records(f.path)
    assert events[0].file_version == "brain.Event:2"
    assert (events[1].step, events[1].summary.value[0].tag, events[1].summary.value[0].simple_value) == (3, "loss", 0.5)
    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for event in events:
        writer.write(event.SerializeToString())
    with open(f.path, "rb") as raw:
        assert raw.read() == buffer.getvalue()


def test_records_reach_the_file_at_max_queue_and_at_flush(tmp_path):
    from tensorboard.compat.proto.summary_pb2 import Summary

    f = EventFile(str(tmp_path), max_queue=3)
    first = os.path.getsize(f.path)  # the format record is written at once
    assert first > 0

    def add(step):
        f.add_summary(Summary(value=[Summary.Value(tag="x", simple_value=step)]), step=step)

    add(1)
    add(2)
    assert os.path.getsize(f.path) == first  # two pending
    add(3)
    after_three = os.path.getsize(f.path)
    assert after_three > first  # the third reached max_queue
    add(4)
    assert os.path.getsize(f.path) == after_three
    f.flush()
    assert [e.step for e in _records(f.path) if e.HasField("summary")] == [1, 2, 3, 4]
    f.close()
    f.close()
    with pytest.raises(ValueError, match="is closed"):
        add(5)


def test_records_reach_the_file_after_flush_secs(tmp_path):
    from tensorboard.compat.proto.summary_pb2 import Summary

    f = EventFile(str(tmp_path), flush_secs=0)
    f.add_summary(Summary(value=[Summary.Value(tag="x", simple_value=1.0)]), step=1)
    assert [e.step for e in _records(f.path) if e.HasField("summary")] == [1]
    f.close()


def test_event_file_never_replaces_an_existing_file(tmp_path, monkeypatch):
    import stoker.loggers.tb_event_file as module

    monkeypatch.setattr(module.time, "time", lambda: 1_700_000_000.0)
    monkeypatch.setattr(EventFile, "_count", 0)
    taken = tmp_path / f"events.out.tfevents.1700000000.{module.socket.gethostname()}.{os.getpid()}.1"
    taken.write_bytes(b"someone else's")
    f = EventFile(str(tmp_path))
    f.close()
    assert taken.read_bytes() == b"someone else's" and f.path.endswith(".2")


def test_logging_scalars_starts_no_thread(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"warm": 0.0}, step=0)  # imports done, file open
    before = set(threading.enumerate())
    for step in range(1, 30):
        logger.log_metrics({"loss": 1.0 / step}, step=step)
    assert set(threading.enumerate()) == before
    logger.finalize("success")
    assert [s for s, _ in tensorboard_scalars(logger.log_dir)["loss"]] == list(range(1, 30))


def test_experiment_takes_over_after_the_own_file_is_closed(tmp_path):
    """Once ``experiment`` is used, scalars go through the SummaryWriter too: its file is opened after the logger's
    own file was written and closed, so TensorBoard reads the run in order."""
    logger = TensorBoardLogger(tmp_path, flush_secs=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    writer = logger.experiment
    writer.add_scalar("other", 5.0, global_step=1)
    logger.log_metrics({"loss": 0.5}, step=1)
    logger.finalize("success")
    first, second = _event_files(logger.log_dir)
    assert [e.step for e in _records(first) if e.HasField("summary") and e.summary.value[0].tag == "loss"] == [0]
    assert os.path.basename(first).split(".")[3] < os.path.basename(second).split(".")[3]
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
