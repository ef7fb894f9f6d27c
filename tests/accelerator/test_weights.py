"""Weight export and import: save_model_weights / Accelerator.save_model and load_checkpoint_in_model."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

from stoker import Accelerator, load_checkpoint_in_model
from stoker.accelerator.checkpointing.weights import (MismatchedKeysError, parse_size, read_safetensors, save_model_weights,
                                        write_safetensors)
from tests.helpers.weights import assert_same_weights


class Tied(nn.Module):
    """An embedding tied to the output layer, a buffer and a plain layer."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.emb = nn.Embedding(50, 16)
            self.body = nn.Linear(16, 16)
            self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("steps", torch.arange(3))


@pytest.mark.parametrize("text,expected", [
    ("10GB", 10 * 10**9), ("500MB", 500 * 10**6), ("2KB", 2000), ("1GiB", 2**30), ("3MiB", 3 * 2**20),
    ("1.5GB", 1_500_000_000), (123, 123), ("77", 77), (" 2 KB ", 2000), ("4kib", 4096),
    ("8Mb", 10**6), (" 2 kb ", 250),  # lower-case b after a decimal prefix: bits, as in Hugging Face
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["ten GB", "5XB", "", "-1GB", 0, -5, 1.5, True, None])
def test_parse_size_errors_quote_the_value(bad):
    with pytest.raises((ValueError, TypeError), match=repr(bad).replace("(", r"\(").replace(".", r"\.")):
        parse_size(bad)


def test_single_file_round_trip_and_tied_weights_written_once(tmp_path):
    model = Tied()
    paths = save_model_weights(model.state_dict(), tmp_path)
    assert paths == [str(tmp_path / "model.safetensors")]
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]
    with safe_open(paths[0], "pt") as f:  # readable by safetensors alone; the alias is in the metadata
        assert sorted(f.keys()) == ["body.bias", "body.weight", "emb.weight", "steps"]
        assert json.loads(f.metadata()["stoker_tied"]) == {"head.weight": "emb.weight"}
    fresh = Tied(seed=1)
    result = load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert_same_weights(model, fresh)
    assert fresh.head.weight is fresh.emb.weight


def test_sharded_safetensors_readable_by_safetensors_alone(tmp_path):
    model = Tied()
    paths = save_model_weights(model.state_dict(), tmp_path, max_shard_size="2KB")
    names = sorted(os.listdir(tmp_path))
    shards = [n for n in names if n.endswith(".safetensors")]
    assert len(shards) >= 2 and names == sorted(shards + ["model.safetensors.index.json"])
    assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert sorted(paths) == sorted(str(tmp_path / n) for n in names)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    # Hugging Face's format: every weight_map entry is found in its file with the safetensors library alone.
    stored = {}
    for name, file in index["weight_map"].items():
        stored[name] = load_file(tmp_path / file)[name]
    torch.testing.assert_close(stored["emb.weight"], model.emb.weight.detach(), rtol=0, atol=0)
    assert set(stored) == set(model.state_dict()) - {"head.weight"}
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in stored.values())
    assert index["metadata"]["stoker_tied"] == {"head.weight": "emb.weight"}
    for file in shards:  # no shard exceeds the limit unless it holds a single tensor larger than it
        with safe_open(tmp_path / file, "pt") as f:
            sizes = [f.get_tensor(k).numel() * f.get_tensor(k).element_size() for k in f.keys()]
        assert len(sizes) == 1 or sum(sizes) <= 2000
    fresh = Tied(seed=1)
    load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert_same_weights(model, fresh)
    fresh = Tied(seed=2)
    load_checkpoint_in_model(fresh, tmp_path / "model.safetensors.index.json", strict=True)
    assert_same_weights(model, fresh)


@pytest.mark.parametrize("shard", ["10GB", "2KB"])
def test_bin_export_loads_with_weights_only(tmp_path, shard):
    model = Tied()
    save_model_weights(model.state_dict(), tmp_path, max_shard_size=shard, safe_serialization=False)
    names = sorted(os.listdir(tmp_path))
    if shard == "10GB":
        assert names == ["pytorch_model.bin"]
        plain = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
        assert plain["head.weight"].data_ptr() == plain["emb.weight"].data_ptr()  # stored once, tied on load
    else:
        assert "pytorch_model.bin.index.json" in names and "pytorch_model-00001-of-" in names[0]
        for n in names[:-1]:
            assert all(isinstance(v, torch.Tensor) for v in torch.load(tmp_path / n, weights_only=True).values())
    fresh = Tied(seed=3)
    load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert_same_weights(model, fresh)


def test_views_and_odd_dtypes_round_trip(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {"t": base.t(), "slice": base[1:3], "bf16": torch.randn(5).to(torch.bfloat16),
             "flags": torch.tensor([True, False]), "i8": torch.tensor([-3, 4], dtype=torch.int8),
             "scalar": torch.tensor(2.5, dtype=torch.float64), "empty": torch.zeros(0, 3), "empty2": torch.zeros(0)}
    save_model_weights(state, tmp_path)
    loaded = load_file(tmp_path / "model.safetensors")
    for k, v in state.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k
    save_model_weights(state, tmp_path / "bin", safe_serialization=False)
    loaded = torch.load(tmp_path / "bin" / "pytorch_model.bin", weights_only=True)
    assert loaded["slice"].untyped_storage().nbytes() == 2 * 6 * 4  # a view is saved alone, not its whole base
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_compile_prefix_removed_and_loadable_into_compiled_model(tmp_path):
    model = Tied()
    state = {k.replace("body.", "body._orig_mod.") if k.startswith("body.") else f"_orig_mod.{k}": v
             for k, v in model.state_dict().items()}
    save_model_weights(state, tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert not any("_orig_mod" in k for k in f.keys())
    compiled_like = nn.Module()  # what torch.compile returns: the model under ._orig_mod
    compiled_like._orig_mod = Tied(seed=4)
    load_checkpoint_in_model(compiled_like, tmp_path, strict=True)
    assert_same_weights(model, compiled_like._orig_mod)


def test_real_torch_compile_wrapper_round_trip(tmp_path):
    compiled = torch.compile(Tied())  # compiles lazily, at the first forward: nothing is compiled here
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    save_model_weights(compiled.state_dict(), tmp_path)
    plain = Tied(seed=11)
    load_checkpoint_in_model(plain, tmp_path, strict=True)
    assert_same_weights(compiled._orig_mod, plain)
    other = torch.compile(Tied(seed=12))
    load_checkpoint_in_model(other, tmp_path, strict=True)
    assert_same_weights(compiled._orig_mod, other._orig_mod)


def test_strict_lists_missing_and_unexpected_and_leaves_model_unchanged(tmp_path):
    state = Tied().state_dict()
    state["extra.weight"] = torch.ones(2)
    del state["body.bias"]
    save_model_weights(state, tmp_path)
    target = Tied(seed=5)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(MismatchedKeysError, match=r"missing keys \['body.bias'\].*unexpected keys \['extra.weight'\]"):
        load_checkpoint_in_model(target, tmp_path, strict=True)
    with pytest.raises(MismatchedKeysError, match=r'In torch\'s words: Missing key\(s\) in state_dict: "body.bias". '
                                                  r'Unexpected key\(s\) in state_dict: "extra.weight".\)'):
        load_checkpoint_in_model(target, tmp_path, strict=True)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    result = load_checkpoint_in_model(target, tmp_path)  # non-strict: loads what matches and reports the rest
    assert result.missing_keys == ["body.bias"] and result.unexpected_keys == ["extra.weight"]
    torch.testing.assert_close(target.body.weight, state["body.weight"], rtol=0, atol=0)
    assert torch.equal(target.body.bias, before["body.bias"])


def test_tied_alias_omitted_by_another_tool_is_not_missing(tmp_path):
    state = {k: v for k, v in Tied().state_dict().items() if k != "head.weight"}
    write_safetensors(str(tmp_path / "hf.safetensors"), state, {"format": "pt"})  # no stoker metadata at all
    target = Tied(seed=6)
    assert load_checkpoint_in_model(target, tmp_path / "hf.safetensors", strict=True).missing_keys == []
    assert torch.equal(target.head.weight, state["emb.weight"])


def test_meta_model_and_device_maps(tmp_path):
    model = Tied()
    save_model_weights(model.state_dict(), tmp_path, max_shard_size="3KB")
    with torch.device("meta"):
        empty = Tied()
    load_checkpoint_in_model(empty, tmp_path, device_map={"": "cpu"}, strict=True)
    assert_same_weights(model, empty)
    assert empty.head.weight is empty.emb.weight and isinstance(empty.emb.weight, nn.Parameter)
    target = Tied(seed=7)
    params = list(target.parameters())
    load_checkpoint_in_model(target, tmp_path, device_map={"emb": "cpu", "body": torch.device("cpu"), "": "cpu"})
    assert_same_weights(model, target)
    assert all(a is b for a, b in zip(params, target.parameters()))  # parameters kept: optimizers stay valid


@pytest.mark.parametrize("device_map,error,match", [
    ("auto", NotImplementedError, "'auto'"),
    ({"nope": "cpu"}, ValueError, "'nope' is not a module"),
    ({"emb": "cpu"}, ValueError, "places no device for"),
    ({"": "disk"}, NotImplementedError, "disk"),
])
def test_device_map_errors(tmp_path, device_map, error, match):
    save_model_weights(Tied().state_dict(), tmp_path)
    with pytest.raises(error, match=match):
        load_checkpoint_in_model(Tied(), tmp_path, device_map=device_map)


def test_reexport_replaces_old_files_without_leftovers(tmp_path):
    model = Tied()
    save_model_weights(model.state_dict(), tmp_path, max_shard_size="1KB")
    many = sorted(os.listdir(tmp_path))
    save_model_weights(model.state_dict(), tmp_path, max_shard_size="3KB")  # fewer shards: old ones removed
    fewer = sorted(os.listdir(tmp_path))
    assert len(fewer) < len(many) and all("-of-" + f"{len(fewer) - 1:05d}" in n for n in fewer[:-1])
    save_model_weights(model.state_dict(), tmp_path)  # single file: index and shards removed
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]
    save_model_weights(model.state_dict(), tmp_path, max_shard_size="3KB")  # and back
    assert sorted(os.listdir(tmp_path)) == fewer
    (tmp_path / "config.json").write_text("{}")  # files that are not weights are left alone
    save_model_weights(model.state_dict(), tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    fresh = Tied(seed=8)
    load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert_same_weights(model, fresh)


@pytest.mark.parametrize("bad,error,match", [
    ({"s": torch.eye(3).to_sparse()}, TypeError, r"\['s'\] has layout torch.sparse_coo.*to_dense"),
    ({"m": torch.empty(2, device="meta")}, ValueError, r"\['m'\] is on the meta device"),
    ({"x": 3}, TypeError, r"state_dict\['x'\] is a int"),
    ({"a._orig_mod.w": torch.ones(1), "a.w": torch.ones(1)}, ValueError, "'a.w' twice"),
])
def test_export_errors_name_the_tensor(tmp_path, bad, error, match):
    with pytest.raises(error, match=match):
        save_model_weights(bad, tmp_path)
    assert os.listdir(tmp_path) == []


def test_failed_export_keeps_previous_export(tmp_path):
    model = Tied()
    save_model_weights(model.state_dict(), tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()
    with pytest.raises(TypeError, match="complex128"):
        save_model_weights({"a": torch.ones(3), "z": torch.zeros(2, dtype=torch.complex128)}, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]
    assert (tmp_path / "model.safetensors").read_bytes() == before


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling this creates the marker file


def test_malicious_bin_refused_and_payload_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload(str(marker))}, protocol=2))
    with pytest.raises(ValueError, match="pytorch_model.bin.*weights_only"):
        load_checkpoint_in_model(Tied(), tmp_path)
    assert not marker.exists()


def test_missing_and_unrecognised_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing"):
        load_checkpoint_in_model(Tied(), tmp_path / "nothing")
    with pytest.raises(ValueError, match="model.safetensors"):
        load_checkpoint_in_model(Tied(), tmp_path)
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(ValueError, match="junk.safetensors"):
        load_checkpoint_in_model(Tied(), tmp_path / "junk.safetensors")


def test_writer_matches_safetensors_reader(tmp_path):
    tensors = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int16), "c": torch.randn(2).half()}
    record = write_safetensors(str(tmp_path / "x.safetensors"), tensors, {"note": "hi"})
    assert record.size == os.path.getsize(tmp_path / "x.safetensors")
    loaded, meta = read_safetensors(str(tmp_path / "x.safetensors"))
    assert meta == {"note": "hi"} and all(torch.equal(loaded[k], v) for k, v in tensors.items())
    assert all(torch.equal(load_file(tmp_path / "x.safetensors")[k], v) for k, v in tensors.items())


def test_accelerator_save_model_unwraps_and_shards(tmp_path):
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = accelerator.prepare(Tied())
    accelerator.save_model(model, tmp_path, max_shard_size="2KB")
    assert "model.safetensors.index.json" in os.listdir(tmp_path)
    fresh = Tied(seed=9)
    load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert_same_weights(accelerator.unwrap_model(model), fresh)


def test_a_training_checkpoint_file_gives_load_checkpoint_in_model_its_weights(tmp_path):
    """A ``torch.save`` of a training checkpoint (a Lightning ``.ckpt``: weights under ``state_dict`` beside the
    counters) is read by the same reader as the Trainer's ``load_from_checkpoint``: its weights load, and a file
    whose ``state_dict`` holds more than tensors is refused, naming the file."""
    source, target = Tied(seed=1), Tied(seed=2)
    torch.save({"epoch": 3, "global_step": 12, "state_dict": source.state_dict()}, tmp_path / "run.ckpt")
    load_checkpoint_in_model(target, tmp_path / "run.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))
    torch.save({"state_dict": {"body.weight": torch.zeros(16, 16), "note": "text"}}, tmp_path / "mixed.ckpt")
    with pytest.raises(ValueError, match="mixed.ckpt.*other values"):
        load_checkpoint_in_model(Tied(), tmp_path / "mixed.ckpt")
    torch.save([torch.zeros(1)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="list.pt.*state_dict"):
        load_checkpoint_in_model(Tied(), tmp_path / "list.pt")
