"""The checkpoint format: safe tree files, manifest verification, atomic commit, naming and rotation, RNG states."""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter, OrderedDict, defaultdict, namedtuple

import numpy as np
import pytest
import torch
from safetensors import safe_open

from stoker.accelerator.checkpointing.atomic import (MANIFEST_NAME, CheckpointError, commit_checkpoint, list_checkpoints,
                                              newest_checkpoint, rotate_checkpoints, verify_checkpoint)
from stoker.accelerator.checkpointing.tree import load_tree, save_tree
from stoker.accelerator.checkpointing.rng import capture_rng_state, restore_rng_state


def same(a, b) -> bool:
    """Equal values *and* types, recursively (nan equals nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        return a == b
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_tree_round_trip_keeps_structure_and_types(tmp_path):
    shared = torch.randn(3)
    tree = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 2)}, 1: {}},  # int keys: optimizer state
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1], "amsgrad": False, "foreach": None}],
        "floats": [float("nan"), float("inf"), -float("inf"), -0.0, 1e-310, 0.1],
        "big": 2**80, "neg": -7, "text": "héllo \"quoted\"", "empty": {}, "nested": [[], [()], ((1,),)],
        (1, "tuple-key"): "tuple key", 2.5: "float key", None: "none key", True: "bool key",
        "numpy": np.arange(6, dtype=np.uint32).reshape(2, 3), "np_scalar": np.float64(0.25),
        "np_int": np.int64(5), "bytes": b"\x00\xffabc", "dtype": torch.bfloat16, "size": torch.Size([2, 3]),
        "device": torch.device("cpu"), "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "bf16": torch.randn(2).bfloat16(), "bool": torch.tensor([True, False]), "zero_dim": torch.tensor(5),
        "param": torch.nn.Parameter(torch.ones(2)), "alias1": shared, "alias2": shared,
        "noncontig": torch.arange(12.0).reshape(3, 4).t(),
        "counter": Counter({1: 1, 3: 2}), "default": defaultdict(list, {"a": [1]}), "set": {1, "x"},
        "frozen": frozenset({(1, 2)}),
    }
    save_tree(str(tmp_path / "t.safetensors"), tree)
    back = load_tree(str(tmp_path / "t.safetensors"))
    assert same(tree, back)
    assert isinstance(back["ordered"], OrderedDict) and isinstance(back["param"], torch.nn.Parameter)
    assert back["counter"][7] == 0 and back["default"]["new"] == []  # subclasses behave as before saving
    assert back["alias1"] is back["alias2"]  # one tensor stored once comes back as one object
    assert math.copysign(1, back["floats"][3]) == -1
    with safe_open(tmp_path / "t.safetensors", "pt") as f:  # a plain safetensors file with a JSON skeleton
        json.loads(f.metadata()["stoker_tree"])


def test_optimizer_state_round_trip_restores_training(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    save_tree(str(tmp_path / "opt.safetensors"), opt.state_dict())
    other = torch.optim.AdamW(model.parameters(), lr=0.5)
    other.load_state_dict(load_tree(str(tmp_path / "opt.safetensors")))
    assert same(opt.state_dict(), other.state_dict())


class MyThing:
    pass


@pytest.mark.parametrize("bad,path", [
    ({"foo": MyThing()}, "['foo']"),
    ({"a": [1, {"b": lambda: 0}]}, "['a'][1]['b']"),
    ({"s": {1, object()}}, "['s'] item <object"),
    ({"n": namedtuple("Point", "x y")(1, 2)}, "['n']"),
    ({"d": defaultdict(lambda: 0)}, "['d']"),
    ({"c": torch.zeros(2, dtype=torch.complex128)}, "['c']"),
    ({"o": np.array([object()])}, "['o']"),
    ({MyThing: 1}, " key <class"),
])
def test_unsafe_objects_rejected_with_their_path(tmp_path, bad, path):
    target = tmp_path / "x.safetensors"
    with pytest.raises(TypeError) as info:
        save_tree(str(target), bad, what="register_for_checkpointing object #0 state_dict()")
    message = str(info.value)
    assert message.startswith("register_for_checkpointing object #0 state_dict()" + path)
    assert "cannot be stored" in message and not target.exists()
    if "MyThing" in repr(bad):
        assert "MyThing" in message and "return tensors, numbers, strings, lists or dicts" in message


def make_checkpoint(root, name="ckpt", files=None) -> str:
    files = files or {"a.safetensors": b"A" * 1000, "b.json": b'{"x": 1}', "empty.bin": b""}
    tmp = os.path.join(root, f".{name}.stoker-tmp")
    os.makedirs(tmp)
    for n, data in files.items():
        with open(os.path.join(tmp, n), "wb") as f:
            f.write(data)
    target = os.path.join(root, name)
    commit_checkpoint(tmp, target, {})
    return target


def test_manifest_lists_every_file_with_size_and_crc(tmp_path):
    path = make_checkpoint(tmp_path)
    assert not (tmp_path / ".ckpt.stoker-tmp").exists()
    manifest = verify_checkpoint(path)
    assert sorted(manifest["files"]) == ["a.safetensors", "b.json", "empty.bin"]
    assert manifest["files"]["a.safetensors"]["size"] == 1000
    assert sorted(os.listdir(path)) == ["a.safetensors", "b.json", "empty.bin", MANIFEST_NAME]


def test_truncated_file_named_in_error(tmp_path):
    path = make_checkpoint(tmp_path)
    with open(os.path.join(path, "a.safetensors"), "r+b") as f:
        f.truncate(500)
    with pytest.raises(CheckpointError, match=r"a\.safetensors has 500 bytes but the manifest records 1000"):
        verify_checkpoint(path)


def test_flipped_byte_named_in_error(tmp_path):
    path = make_checkpoint(tmp_path)
    with open(os.path.join(path, "a.safetensors"), "r+b") as f:
        f.seek(321)
        f.write(b"B")
    with pytest.raises(CheckpointError, match=r"a\.safetensors does not match its checksum"):
        verify_checkpoint(path)
    verify_checkpoint(path, files=["b.json"])  # only what is asked for is hashed


def test_missing_file_manifest_and_foreign_folders(tmp_path):
    path = make_checkpoint(tmp_path)
    os.remove(os.path.join(path, "b.json"))
    with pytest.raises(CheckpointError, match=r"b\.json is missing"):
        verify_checkpoint(path)
    os.remove(os.path.join(path, MANIFEST_NAME))
    with pytest.raises(CheckpointError, match=f"has no {MANIFEST_NAME}"):
        verify_checkpoint(path)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / MANIFEST_NAME).write_text('{"format": "something-else", "files": {}}')
    with pytest.raises(CheckpointError, match="not a stoker manifest"):
        verify_checkpoint(tmp_path / "foreign")
    with pytest.raises(CheckpointError, match="not a folder"):
        verify_checkpoint(tmp_path / "nowhere")


def test_unlisted_file_refused(tmp_path):
    path = make_checkpoint(tmp_path)
    with open(os.path.join(path, "random_states_0.pkl"), "wb") as f:
        f.write(b"\x80\x04.")
    with pytest.raises(CheckpointError, match=r"does not list: \['random_states_0.pkl'\]"):
        verify_checkpoint(path)


def test_commit_replaces_existing_checkpoint_whole(tmp_path):
    make_checkpoint(tmp_path, files={"old.bin": b"old", "shared.bin": b"1"})
    path = make_checkpoint(tmp_path, files={"new.bin": b"new", "shared.bin": b"2"})
    assert sorted(os.listdir(path)) == sorted([MANIFEST_NAME, "new.bin", "shared.bin"])
    assert (tmp_path / "ckpt" / "shared.bin").read_bytes() == b"2"
    verify_checkpoint(path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # nothing left aside


def test_naming_ignores_foreign_temporary_and_incomplete_folders(tmp_path):
    root = tmp_path / "checkpoints"
    root.mkdir()
    for n in (0, 2, 10):
        make_checkpoint(root, f"checkpoint_{n}")
    (root / "checkpoint_11").mkdir()  # incomplete or foreign: no manifest
    (root / "checkpoint_11" / "model.safetensors").write_bytes(b"x")
    (root / ".checkpoint_12.stoker-tmp").mkdir()  # an interrupted save
    (root / "checkpoint_final").mkdir()
    (root / "notes.txt").write_text("hi")
    found = list_checkpoints(tmp_path)
    assert [os.path.basename(p) for p in found] == ["checkpoint_0", "checkpoint_2", "checkpoint_10"]  # by number
    assert newest_checkpoint(tmp_path) == str(root / "checkpoint_10")
    assert newest_checkpoint(tmp_path / "elsewhere") is None
    removed = rotate_checkpoints(tmp_path, total_limit=2)
    assert [os.path.basename(p) for p in removed] == ["checkpoint_0"]
    assert sorted(os.listdir(root)) == [".checkpoint_12.stoker-tmp", "checkpoint_10", "checkpoint_11",
                                        "checkpoint_2", "checkpoint_final", "notes.txt"]


def test_rng_state_round_trip_through_a_file(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in Python's state
    np.random.randn()
    save_tree(str(tmp_path / "rng.safetensors"), capture_rng_state())
    expected = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(),
                torch.rand(3).tolist())
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    restore_rng_state(load_tree(str(tmp_path / "rng.safetensors")))
    got = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(),
           torch.rand(3).tolist())
    assert got == expected


def test_restore_rng_rejects_garbage():
    with pytest.raises(ValueError, match="capture_rng_state"):
        restore_rng_state({"python": 1})


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling this creates the marker file


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_dcp_metadata_checked_before_torch_unpickles_it(tmp_path):
    """FSDP checkpoints go through torch.distributed.checkpoint, whose .metadata is a pickle: stoker reads it with
    an allow-list first, so a tampered one is refused without running anything."""
    import pickle

    import torch.distributed.checkpoint as dcp

    from stoker.accelerator.checkpointing.atomic import check_dcp_metadata

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    state = {"model_0": model.state_dict(), "optimizer_0": opt.state_dict(),
             "extra": {"bf16": torch.ones(1).bfloat16()}}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path / "real")))
    check_dcp_metadata(str(tmp_path / "real"))  # genuine metadata passes
    marker = tmp_path / "pwned"
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / ".metadata").write_bytes(pickle.dumps(_Payload(str(marker))))
    with pytest.raises(CheckpointError, match=r"\.metadata is not plain .*names io\.open"):
        check_dcp_metadata(str(tmp_path / "evil"))
    assert not marker.exists()


def _every_scheduler(optimizer):
    lr = torch.optim.lr_scheduler
    return [lr.StepLR(optimizer, 2), lr.LambdaLR(optimizer, lambda s: 0.9**s), lr.MultiStepLR(optimizer, [1, 3]),
            lr.ConstantLR(optimizer), lr.LinearLR(optimizer), lr.ExponentialLR(optimizer, 0.9),
            lr.PolynomialLR(optimizer), lr.CosineAnnealingLR(optimizer, 10),
            lr.CosineAnnealingWarmRestarts(optimizer, 3),
            lr.CyclicLR(optimizer, 0.01, 0.1), lr.OneCycleLR(optimizer, 0.1, total_steps=100),
            lr.SequentialLR(optimizer, [lr.LinearLR(optimizer), lr.ExponentialLR(optimizer, 0.9)], milestones=[2])]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_torch_optimizer_and_scheduler_state_round_trips(tmp_path):
    model = torch.nn.Linear(3, 2)
    optim = torch.optim
    optimizers = [optim.SGD(model.parameters(), lr=0.1, momentum=0.9), optim.AdamW(model.parameters(), amsgrad=True),
                  optim.RMSprop(model.parameters()), optim.Adagrad(model.parameters()), optim.NAdam(model.parameters()),
                  optim.RAdam(model.parameters()), optim.Adadelta(model.parameters()), optim.LBFGS(model.parameters())]
    for opt in optimizers:
        def closure():
            opt.zero_grad()
            loss = model(torch.randn(4, 3)).pow(2).sum()
            loss.backward()
            return loss
        opt.step(closure)
        save_tree(str(tmp_path / "o.safetensors"), opt.state_dict())
        assert same(opt.state_dict(), load_tree(str(tmp_path / "o.safetensors"))), type(opt).__name__
    sgd = optim.SGD(model.parameters(), lr=0.1)
    for sched in _every_scheduler(sgd):
        for _ in range(3):
            sched.step()
        save_tree(str(tmp_path / "s.safetensors"), sched.state_dict())
        other = type(sched).__new__(type(sched))
        other.__dict__.update(load_tree(str(tmp_path / "s.safetensors")))
        assert same(sched.state_dict(), other.__dict__), type(sched).__name__
    plateau = optim.lr_scheduler.ReduceLROnPlateau(sgd)
    plateau.step(1.0)
    save_tree(str(tmp_path / "p.safetensors"), plateau.state_dict())
    assert same(plateau.state_dict(), load_tree(str(tmp_path / "p.safetensors")))
    milestones = _every_scheduler(sgd)[2]
    save_tree(str(tmp_path / "m.safetensors"), milestones.state_dict())
    milestones.load_state_dict(load_tree(str(tmp_path / "m.safetensors")))
    for _ in range(5):  # MultiStepLR indexes its Counter with steps that are not milestones
        milestones.step()


def test_malformed_tree_is_a_clear_error(tmp_path):
    from stoker.accelerator.checkpointing.weights import write_safetensors

    for skeleton in ['{"tensor": "t9"}', '{"defaultdict": [], "factory": "os.system"}', '{"nope": 1}', "[1,"]:
        write_safetensors(str(tmp_path / "x.safetensors"), {}, {"stoker_tree": skeleton})
        with pytest.raises(CheckpointError, match=r"x\.safetensors"):
            load_tree(str(tmp_path / "x.safetensors"))


def test_cuda_rng_states_of_every_device_are_captured_and_restored(monkeypatch):
    """No GPU here: torch.cuda is replaced by a fake with two devices to check what is saved and put back."""
    restored = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [torch.full((4,), 7, dtype=torch.uint8),
                                                                  torch.full((4,), 9, dtype=torch.uint8)])
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device: restored.__setitem__(device, s.tolist()))
    state = capture_rng_state()
    assert [s.tolist() for s in state["cuda"]] == [[7] * 4, [9] * 4]
    restore_rng_state(state)
    assert restored == {0: [7] * 4, 1: [9] * 4}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.warns(UserWarning, match="2 devices but 1 are visible"):
        restore_rng_state(state)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        restore_rng_state(state)
