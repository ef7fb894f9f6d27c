"""The safe tree format: nested Python state stored as one safetensors file, never as a pickle.

Owns: turning a nested structure (dicts, lists, tuples, sets, strings, numbers, None, tensors, numpy arrays,
torch dtypes...) into a JSON skeleton kept in the safetensors metadata plus the tensors it holds, and back.
Anything else is refused at save time with its path in the structure. Does not own where the files go
(``checkpoint.py``) or their integrity (``atomic.py``).
"""

from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict, defaultdict
from typing import Any

import numpy as np
import torch

from .atomic import CheckpointError
from .safetensors_io import _DTYPES, FileRecord, read_safetensors, write_safetensors

TREE_KEY = "stoker_tree"

_HINT = "return tensors, numbers, strings, lists or dicts (tuples, None, numpy arrays and torch dtypes also work)"


_DICTS = {dict: "dict", OrderedDict: "odict", Counter: "counter", defaultdict: "defaultdict"}
_KINDS_OF_DICT = {tag: kind for kind, tag in _DICTS.items()}
_FACTORIES = {f.__name__: f for f in (int, float, str, bool, list, dict, set, tuple)}


# -- the safe tree format -----------------------------------------------------------------------------------------
class _Encoder:
    """Turns a nested structure into a JSON skeleton plus a dict of tensors stored under generated keys."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.tensors: dict[str, torch.Tensor] = {}
        self._keys: dict[int, str] = {}  # the same tensor object twice is stored once and comes back as one object

    def _tensor(self, t: torch.Tensor, path: str) -> str:

        if t.dtype not in _DTYPES or t.layout != torch.strided:
            raise TypeError(f"{self.what}{path} is a {t.dtype} {t.layout} tensor, which cannot be stored in "
                            "safetensors; convert it to a dense tensor of a standard dtype.")
        if id(t) not in self._keys:
            self._keys[id(t)] = key = f"t{len(self.tensors)}"
            self.tensors[key] = t
        return self._keys[id(t)]

    def encode(self, obj: Any, path: str = "") -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return str(obj) if isinstance(obj, str) else obj
        if isinstance(obj, torch.Tensor):
            node = {"tensor": self._tensor(obj, path)}
            return {**node, "param": obj.requires_grad} if isinstance(obj, torch.nn.Parameter) else node
        if isinstance(obj, (np.ndarray, np.generic)):
            kind = "ndarray" if isinstance(obj, np.ndarray) else "npscalar"
            array = np.asarray(obj)  # keeps 0-d (ascontiguousarray would make it 1-d)
            try:
                t = torch.from_numpy(array if array.flags.c_contiguous else array.copy(order="C"))
            except (TypeError, ValueError):
                raise TypeError(f"{self.what}{path} is a numpy {kind} of dtype {obj.dtype}, which cannot be stored "
                                f"safely; {_HINT}.") from None
            return {kind: self._tensor(t, path)}
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else {"float": repr(float(obj))}
        if isinstance(obj, bytes):
            return {"bytes": self._tensor(torch.frombuffer(bytearray(obj), dtype=torch.uint8), path)}
        if isinstance(obj, torch.dtype):
            return {"dtype": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.Size):
            return {"size": list(obj)}
        if isinstance(obj, torch.device):
            return {"device": str(obj)}
        # Containers by exact type: a subclass (namedtuple, MultiStepLR's Counter) must come back as itself.
        if type(obj) is tuple or type(obj) is list:
            if all(type(v) is int for v in obj):  # plain ints as they are: Python's RNG state has 625 of them
                items = list(obj)
            else:
                items = [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]
            return {"tuple": items} if type(obj) is tuple else items
        if type(obj) in (set, frozenset):
            return {type(obj).__name__: [self.encode(v, f"{path} item {v!r}") for v in obj]}
        factory = getattr(obj, "default_factory", None)
        kind = _DICTS.get(type(obj)) if type(obj) is not defaultdict or factory in _FACTORIES.values() else None
        if kind:
            items = [[self.encode(k, f"{path} key {k!r}"), self.encode(v, f"{path}[{k!r}]")] for k, v in obj.items()]
            return {kind: items, "factory": factory.__name__} if factory else {kind: items}
        text = repr(obj)
        raise TypeError(f"{self.what}{path} is a {type(obj)} ({text[:60] + '...' if len(text) > 60 else text}), "
                        f"which cannot be stored safely; {_HINT}.")


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    tag = next(iter(node), None) if isinstance(node, dict) else None
    value = node.get(tag) if tag else None
    if tag == "tensor":
        t = tensors[value]
        return torch.nn.Parameter(t, requires_grad=node["param"]) if "param" in node else t
    if tag in ("ndarray", "npscalar"):
        array = tensors[value].numpy()
        return array if tag == "ndarray" else array[()]
    if tag == "bytes":
        return tensors[value].numpy().tobytes()
    if tag == "float":
        return float(value)
    if tag == "tuple":
        return tuple(_decode(v, tensors) for v in value)
    if tag in _KINDS_OF_DICT:
        pairs = {_decode(k, tensors): _decode(v, tensors) for k, v in value}
        if tag == "defaultdict":
            return defaultdict(_FACTORIES[node["factory"]], pairs)
        return pairs if tag == "dict" else _KINDS_OF_DICT[tag](pairs)
    if tag in ("set", "frozenset"):
        return (set if tag == "set" else frozenset)(_decode(v, tensors) for v in value)
    if tag == "dtype" and isinstance(getattr(torch, value, None), torch.dtype):
        return getattr(torch, value)
    if tag == "size":
        return torch.Size(value)
    if tag == "device":
        return torch.device(value)
    raise CheckpointError(f"Unknown node {str(node)[:80]!r} in a stoker tree; the file was altered or written by a "
                          "newer stoker.")


def save_tree(path: str, obj: Any, what: str = "state", fsync: bool = True) -> FileRecord:
    """Stores ``obj`` (nested dict/list/tuple/str/int/float/bool/None/tensor/ndarray) as one safetensors file.

    Raises ``TypeError`` naming the object's path (``what`` + ``['key'][0]``...) for anything else, before
    anything is written. Dict keys may be any of the scalar types (optimizer state uses ints).

    Example:
        >>> save_tree("opt.safetensors", optimizer.state_dict(), what="optimizer #0 state_dict()")
        >>> optimizer.load_state_dict(load_tree("opt.safetensors"))
    """
    return write_safetensors(path, *encode_tree(obj, what), fsync=fsync)


def load_tree(path: str) -> Any:
    """Reads a file written by :func:`save_tree` (tensors are memory-mapped copy-on-write, on the CPU)."""
    tensors, metadata = read_safetensors(path)
    if TREE_KEY not in metadata:
        raise CheckpointError(f"{path} is a safetensors file without a stoker tree in its metadata; it was not "
                              "written by save_state().")
    try:
        return _decode(json.loads(metadata[TREE_KEY]), tensors)
    except RecursionError as e:  # json.loads or _decode on a tree nested deeper than any state_dict is
        raise CheckpointError(f"{path} holds a malformed stoker tree (it nests too deeply to be a saved state); "
                              "the file was altered or written by another tool.") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path} holds a malformed stoker tree ({type(e).__name__}: {e}); the file was altered "
                              "or written by another tool.") from e


def encode_tree(obj: Any, what: str = "state") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of the safetensors file :func:`save_tree` would write for ``obj``.

    Raises ``TypeError`` like :func:`save_tree`; nothing is written, so a caller can encode everything first.
    """
    encoder = _Encoder(what)
    skeleton = json.dumps(encoder.encode(obj), separators=(",", ":"), allow_nan=False)
    return encoder.tensors, {"format": "pt", TREE_KEY: skeleton}
