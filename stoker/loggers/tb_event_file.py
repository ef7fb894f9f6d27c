"""A TensorBoard event file written on the calling thread: the `TensorBoardLogger`'s scalars and hparams.

Owns the file format on the writing side: a TensorBoard event file is a sequence of TFRecord records (an 8-byte
little-endian length, its masked CRC-32C, the serialized ``Event`` protobuf, the data's masked CRC-32C), the first
one naming the format (``file_version="brain.Event:2"``), named ``events.out.tfevents.{seconds}.{host}.{pid}.{n}``.
TensorBoard's own readers (``EventAccumulator``, ``EventFileLoader``) read it back.

Why not ``SummaryWriter``: it hands every event to a writer thread, which computes the CRCs in Python. Each
hand-over wakes that thread, and the training thread then waits for the interpreter lock while it runs: about
0.35 ms per ``log_metrics`` call on a 2-core machine (benchmarks/README.md, 5 December 2026), several times what
building and framing the event costs here. Records are buffered and written to the file (no fsync, as
``SummaryWriter``) when ``max_queue`` of them are pending, when ``flush_secs`` have passed since the last write,
at :meth:`EventFile.flush` / :meth:`EventFile.close`, and at interpreter exit (a script that never calls
``finalize``/``end_training`` keeps every value; ``SummaryWriter`` loses what it had not flushed; a forked child
leaves the file to its parent). Scalars (:meth:`EventFile.add_scalars`) are kept as plain numbers until then and
encoded together: built one at a time between training steps, each event's protobuf and CRC cost several times
more than in a batch. Does not own the folder, the choice between this file and a ``SummaryWriter``
(``tensorboard.py``), nor what a summary holds.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import struct
import time
import weakref
from typing import Any

__all__ = ["EventFile", "crc32c", "masked_crc32c"]


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli polynomial, reflected
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, as TFRecord framing uses it."""
    crc, table = 0xFFFFFFFF, _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: the CRC rotated right by 15 bits plus a constant (so that CRCs of CRCs differ)."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord record around ``data``."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


class EventFile:
    """One new event file in ``log_dir`` (created now, never replacing a file), written on the calling thread.

    Example:
        >>> from tensorboard.compat.proto.summary_pb2 import Summary  # doctest: +SKIP
        >>> f = EventFile("runs/exp/version_0")  # doctest: +SKIP
        >>> f.add_summary(Summary(value=[Summary.Value(tag="loss", simple_value=0.5)]), step=10)  # doctest: +SKIP
        >>> f.close()  # doctest: +SKIP
    """

    _count = 0  # files opened by this process: the name's last field, as SummaryWriter numbers its own

    def __init__(self, log_dir: str, max_queue: int = 10, flush_secs: float = 120, filename_suffix: str = "",
                 purge_step: int | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        self._event = Event
        self.max_queue, self.flush_secs = max(1, int(max_queue)), float(flush_secs)
        os.makedirs(log_dir, exist_ok=True)
        self._file = self._create(log_dir, filename_suffix)
        self.path = self._file.name
        self._pending: list[Any] = []  # framed records, or (wall_time, step, {tag: number}) to encode at flush
        self._last_write = float("-inf")  # the first record is written at once, as SummaryWriter does
        self._at_exit = functools.partial(_flush_if_alive, weakref.ref(self), os.getpid())
        atexit.register(self._at_exit)
        self.add_event(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:  # SummaryWriter(purge_step=...): TensorBoard drops the earlier run's later steps
            self.add_event(Event(wall_time=time.time(), step=purge_step,
                                 session_log=SessionLog(status=SessionLog.START)))

    @classmethod
    def _create(cls, log_dir: str, suffix: str) -> Any:
        while True:
            EventFile._count += 1
            name = "events.out.tfevents.%010d.%s.%s.%s%s" % (time.time(), socket.gethostname(), os.getpid(),
                                                               EventFile._count, suffix)
            try:
                return open(os.path.join(log_dir, name), "xb")  # exclusive: another writer's file is never touched
            except FileExistsError:
                continue

    def add_event(self, event: Any) -> None:
        """Frames ``event``; written with the pending records."""
        self._queue(frame(event.SerializeToString()))

    def add_scalars(self, values: dict[str, float | int], step: int) -> None:
        """One event holding a ``simple_value`` per tag (``values``: Python numbers) at ``step``; encoded when
        the pending records are written."""
        self._queue((time.time(), int(step), values))

    def _queue(self, item: Any) -> None:
        """Adds a record; writes what is pending when ``max_queue`` records or ``flush_secs`` say so."""
        if self._file is None:
            raise ValueError(f"{self.path} is closed; open a new EventFile to write more events.")
        self._pending.append(item)
        if len(self._pending) >= self.max_queue or time.monotonic() - self._last_write >= self.flush_secs:
            self.flush()

    def add_summary(self, summary: Any, step: int | None = None) -> None:
        """Writes ``summary`` (a ``Summary`` protobuf) at ``step`` (none: TensorBoard shows step 0)."""
        event = self._event(wall_time=time.time(), summary=summary)
        if step is not None:
            event.step = int(step)
        self.add_event(event)

    def flush(self) -> None:
        """Writes the pending records to the file (to the operating system; not fsynced)."""
        if self._file is None:
            return
        if self._pending:
            self._file.write(b"".join(self._encoded(item) for item in self._pending))
            self._pending = []
        self._file.flush()
        self._last_write = time.monotonic()

    def _encoded(self, item: Any) -> bytes:
        if type(item) is bytes:
            return item
        from tensorboard.compat.proto.summary_pb2 import Summary

        wall_time, step, values = item
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])
        return frame(self._event(wall_time=wall_time, step=step, summary=summary).SerializeToString())

    def close(self) -> None:
        """Writes what is pending and closes the file; later calls do nothing."""
        if self._file is not None:
            atexit.unregister(self._at_exit)
            self.flush()
            self._file.close()
            self._file = None


def _flush_if_alive(ref: weakref.ref, pid: int) -> None:
    """At interpreter exit: writes what an event file still holds, if the file is still open and this is the
    process that opened it (a forked child holds a copy of the pending records: writing them would repeat them)."""
    events = ref()
    if events is not None and os.getpid() == pid:
        events.flush()
