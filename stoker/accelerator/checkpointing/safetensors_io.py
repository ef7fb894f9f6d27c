"""The byte-level safetensors writer and reader every stoker file goes through, and fsync helpers.

Owns: writing tensors straight from their memory into a safetensors file while checksumming the bytes (so a
manifest costs no second read), reading one back without unpickling, and making files and folders durable.
Does not own: what the files mean (weights: ``weights.py``; training state: ``tree.py``/``checkpoint.py``) or
the atomic folder commit (``atomic.py``).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import struct
import zlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import torch

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL", torch.complex64: "C64"}
for _name, _code in [("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"), ("uint16", "U16"),
                     ("uint32", "U32"), ("uint64", "U64")]:
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code
del _name, _code
_CHUNK = 64 * 2**20  # write/checksum granularity: big enough for full disk speed, small enough to overlap
_THREAD_MIN = 2**20  # smaller pieces are checksummed inline, without a helper thread


class FileRecord(NamedTuple):
    """What a manifest keeps about one written file."""

    size: int
    crc32: int


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    t = t.contiguous()  # a no-op (no copy) for the usual contiguous parameter
    # .numpy() shares memory and keeps ``t`` alive through the array's base.
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _write_all(f: Any, data: memoryview) -> None:
    while data:
        written = f.write(data)  # raw files may write less than asked (e.g. > 2 GiB at once)
        data = data[written:]


def _sync_file_range() -> Any:
    """Linux's ``sync_file_range`` (start writing a range to disk now, without waiting), or None."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_START_WRITEBACK = _sync_file_range()


def write_buffers(path: str, buffers: Iterable[Any], fsync: bool = True) -> FileRecord:
    """Writes ``buffers`` one after the other to ``path``, returning size and CRC-32 of what was written.

    Small pieces are checksummed inline (a CRC-32 of 1 MiB takes ~0.3 ms; starting a thread and handing chunks
    to it costs more for the few-kilobyte files of a small model's state). From the first piece of
    ``_THREAD_MIN`` bytes on, a helper thread computes the CRC of each chunk while the next one is written
    (``zlib.crc32`` and file writes both release the GIL) and asks the kernel to start writing finished chunks
    to disk, so the final fsync finds little left to do: durability and the checksum cost little more than the
    copy into the page cache.
    """
    state = {"crc": 0}

    def update(chunk: memoryview) -> None:
        state["crc"] = zlib.crc32(chunk, state["crc"])

    def writeback(fd: int, start: int, length: int) -> None:
        if _START_WRITEBACK is not None:
            _START_WRITEBACK(fd, start, length, 2)  # SYNC_FILE_RANGE_WRITE: initiate, do not wait

    size, pool = 0, None
    with open(path, "wb", buffering=0) as f:
        try:
            for buf in buffers:
                view = memoryview(buf).cast("B")
                for start in range(0, len(view), _CHUNK):
                    chunk = view[start:start + _CHUNK]
                    if pool is None and len(chunk) >= _THREAD_MIN:
                        pool = ThreadPoolExecutor(1)  # one worker: CRCs stay in order, after the inline ones
                    if pool is None:
                        update(chunk)
                    else:
                        pool.submit(update, chunk)
                    _write_all(f, chunk)
                    if pool is not None and len(chunk) == _CHUNK:
                        pool.submit(writeback, f.fileno(), size + start, len(chunk))
                size += len(view)
        finally:
            if pool is not None:  # before the file closes: pending writebacks use its descriptor
                pool.shutdown(wait=True)
        if fsync:
            os.fsync(f.fileno())
    return FileRecord(size, state["crc"])


def write_safetensors(path: str, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None,
                      fsync: bool = True) -> FileRecord:
    """Writes a safetensors file (readable by the ``safetensors`` library) straight from the tensors' memory.

    Example:
        >>> record = write_safetensors("w.safetensors", {"w": torch.ones(2)}, {"format": "pt"})
        >>> safetensors.torch.load_file("w.safetensors")["w"]
        tensor([1., 1.])
    """
    entries = []
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"Tensor name {name!r} cannot be stored in safetensors; names are strings other than "
                             "'__metadata__'.")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name!r} is a {type(tensor).__name__}, not a torch.Tensor.")
        code = _DTYPES.get(tensor.dtype)
        if code is None:
            raise TypeError(f"Tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot store; supported: "
                            f"{', '.join(str(d) for d in _DTYPES)}.")
        if tensor.layout != torch.strided:
            raise TypeError(f"Tensor {name!r} has layout {tensor.layout}; only dense tensors can be saved. "
                            "Call .to_dense() on it first.")
        entries.append((name, code, tensor))
    entries.sort(key=lambda e: -e[2].element_size())  # widest first: each tensor's offset is aligned to its size
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, code, tensor in entries:
        nbytes = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": code, "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header so the data starts 8-byte aligned
    # Bytes are taken one tensor at a time, so GPU tensors are copied to host memory one by one, not all at once.
    data = (_tensor_bytes(tensor) for _, _, tensor in entries)
    return write_buffers(path, itertools.chain([struct.pack("<Q", len(raw)) + raw], data), fsync)


def read_safetensors(path: str, data: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Tensors (memory-mapped, copy-on-write, on the CPU) and metadata of a safetensors file; never unpickles
    anything.

    With ``data=False`` only the header is read and the dict maps names to shapes (tuples).
    """
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            tensors = {k: f.get_tensor(k) if data else tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            return tensors, dict(f.metadata() or {})
    except Exception as e:  # safetensors raises its own SafetensorError (not an OSError) for malformed headers
        raise ValueError(f"{path} is not a readable safetensors file ({e}); it may be truncated or altered.") from e


def fsync_path(path: str) -> None:
    """Waits until ``path`` (a file, or a folder's entries: renames and new names in it) is on disk. For a folder
    this is best effort (some platforms refuse to open one, some file systems to fsync one); for a file a failure
    raises."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if os.path.isdir(path):
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not os.path.isdir(path):
            raise
    finally:
        os.close(fd)
