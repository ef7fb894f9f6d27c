"""save_state / load_state through the Accelerator, in one process: contents, naming, rotation, safety."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed
from stoker.accelerator.checkpointing import atomic, checkpoint
from stoker.accelerator.checkpointing.atomic import MANIFEST_NAME, CheckpointError
from stoker.accelerator.checkpointing.tree import load_tree, save_tree
from tests.helpers.ckpt_worker import Progress
from tests.helpers.weights import assert_same_weights, state_of


def make(project_dir=None, total_limit=None, stateful=True, precision="no", gas=1, workers=0, shuffle=True):
    """An accelerator with a model (tied weights, dropout), AdamW, a scheduler, a shuffled loader, a user object.

    Seeded like a training script: the loader's shuffle seed and the dropout masks come from the global RNG.
    """
    set_seed(0)
    accelerator = Accelerator(
        cpu=True, mixed_precision=precision, gradient_accumulation_steps=gas,
        project_config=ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=project_dir
                                            is not None, total_limit=total_limit),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Dropout(0.2), nn.Linear(4, 4))
    model[3].weight = model[0].weight  # tied: stored once, one parameter after loading
    model.register_buffer("counter", torch.zeros(()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 4, generator=g))
    loader = DataLoader(data, batch_size=4, shuffle=shuffle, num_workers=workers)
    progress = Progress()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    accelerator.register_for_checkpointing(progress)
    return accelerator, model, optimizer, loader, scheduler, progress


def step(accelerator, model, optimizer, scheduler, batch, progress):
    x, y = batch
    with accelerator.accumulate(model):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    if accelerator.sync_gradients:
        progress.windows += 1
    progress.losses.append(round(loss.item(), 6))
    model.counter += 1


def run(parts, n, save_to=None):
    """Runs ``n`` micro-steps (continuing epochs); returns the batches' first inputs seen.

    With ``save_to`` it saves inside the loop after the last step, as a training script does (leaving a ``for``
    loop over a loader ends that loader's epoch, as with a torch DataLoader).
    """
    accelerator, model, optimizer, loader, scheduler, progress = parts
    seen = []
    while len(seen) < n:
        for batch in loader:
            step(accelerator, model, optimizer, scheduler, batch, progress)
            seen.append(batch[0][0].tolist())
            if len(seen) == n:
                if save_to is not None:
                    accelerator.save_state(save_to)
                break
    return seen


def visible(folder):
    """Names in ``folder`` without the hidden ones (temporary folders, trash still being deleted)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))


@pytest.mark.parametrize("stop", [3, 7, 10, 13])
def test_resume_with_fresh_objects_is_exact(tmp_path, stop):
    """Stop after micro-step ``stop`` (mid-epoch, mid-window with accumulation 2, the epoch's last batch, ...)."""
    full = make(gas=2, precision="fp16")
    seen_full = run(full, 25)
    parts = make(gas=2, precision="fp16")
    seen = run(parts, stop, save_to=tmp_path / "ckpt")
    resumed = make(gas=2, precision="fp16")
    resumed[0].load_state(tmp_path / "ckpt")
    seen += run(resumed, 25 - stop)
    assert seen == seen_full
    assert_same_weights(state_of(full[1]), state_of(resumed[1]))
    assert resumed[5].state_dict() == full[5].state_dict() and resumed[0].step == full[0].step
    assert resumed[2].state_dict()["param_groups"] == full[2].state_dict()["param_groups"]


def test_without_load_state_the_runs_differ(tmp_path):
    """The control for the test above: fresh objects that skip load_state do not reproduce the run."""
    full = make(gas=2)
    run(full, 12)
    parts = make(gas=2)
    run(parts, 5)
    run(make(gas=2), 7)
    assert any(not torch.equal(a, b) for a, b in zip(state_of(full[1]).values(), state_of(parts[1]).values()))


def test_folder_contents_and_tied_weights_once(tmp_path):
    parts = make(stateful=True, precision="fp16")
    run(parts, 2)
    path = parts[0].save_state(tmp_path / "ckpt")
    assert path == str(tmp_path / "ckpt")
    assert sorted(os.listdir(path)) == sorted([
        "model.safetensors", "optimizer.safetensors", "scheduler.safetensors", "scaler.safetensors",
        "dataloader.safetensors", "custom_checkpoint.safetensors", "random_states_0.safetensors",
        "stoker_state.json", MANIFEST_NAME])
    state = json.loads(open(os.path.join(path, "stoker_state.json")).read())
    assert state["counters"]["step"] == 2 and state["num_processes"] == 1
    assert load_tree(os.path.join(path, "custom_checkpoint.safetensors"))["windows"] == 2
    assert load_tree(os.path.join(path, "scaler.safetensors"))["scaler"]["scale"] > 0


def test_scaler_file_only_with_a_scaler_and_the_precision_may_change_between_save_and_load(tmp_path):
    """Full precision writes no scaler.safetensors (as Accelerate writes scaler.pt only with fp16); an fp16 run
    loading such a checkpoint starts a fresh scaler, and a full-precision run ignores an fp16 checkpoint's."""
    fp32 = make(precision="no")
    run(fp32, 3)
    plain = fp32[0].save_state(tmp_path / "fp32")
    assert "scaler.safetensors" not in os.listdir(plain)
    assert "scaler.safetensors" not in json.loads(open(os.path.join(plain, MANIFEST_NAME)).read())["files"]
    fp16 = make(precision="fp16")
    run(fp16, 1)
    scaler = fp16[0].precision.scaler.state_dict()
    fp16[0].load_state(plain)
    assert_same_weights(fp16[1], fp32[1], "fp16 run after loading an fp32 checkpoint")
    assert fp16[0].precision.scaler.state_dict() == scaler, "the scaler is left as it was (fresh in a new process)"
    run(fp16, 2)  # and it trains on
    mixed = fp16[0].save_state(tmp_path / "fp16")
    assert "scaler.safetensors" in os.listdir(mixed)
    back = make(precision="no")
    back[0].load_state(mixed)
    assert_same_weights(back[1], fp16[1], "fp32 run after loading an fp16 checkpoint")


def test_automatic_naming_rotation_and_counter_after_load(tmp_path):
    parts = make(project_dir=str(tmp_path), total_limit=2)
    names = []
    for _ in range(5):
        run(parts, 1)
        names.append(os.path.basename(parts[0].save_state()))
    assert names == [f"checkpoint_{i}" for i in range(5)]
    assert visible(tmp_path / "checkpoints") == ["checkpoint_3", "checkpoint_4"]  # exactly newest 2
    parts[0].end_training()  # rotated-out folders are deleted in the background; end_training waits for that
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_3", "checkpoint_4"]
    assert parts[0].save_iteration == 5
    again = make(project_dir=str(tmp_path), total_limit=2)  # a new run in the same project dir
    with pytest.raises(ValueError, match="checkpoint_0.*load_state"):  # would reuse a number: refused ...
        (tmp_path / "checkpoints" / "checkpoint_0").mkdir()
        again[0].save_state()
    shutil.rmtree(tmp_path / "checkpoints" / "checkpoint_0")
    again[0].load_state()  # ... load_state() continues the numbering
    assert again[0].save_iteration == 5 and again[5].windows == 5
    assert os.path.basename(again[0].save_state()) == "checkpoint_5"
    assert visible(tmp_path / "checkpoints") == ["checkpoint_4", "checkpoint_5"]


def test_load_state_skips_incomplete_and_foreign_folders(tmp_path):
    parts = make(project_dir=str(tmp_path))
    run(parts, 1)
    parts[0].save_state()
    expected = state_of(parts[1])
    run(parts, 1)
    parts[0].save_state()
    newest = tmp_path / "checkpoints" / "checkpoint_1"
    shutil.copytree(newest, tmp_path / "checkpoints" / ".checkpoint_2.stoker-tmp")  # an interrupted save
    (tmp_path / "checkpoints" / "checkpoint_9").mkdir()  # a folder stoker did not write
    (tmp_path / "checkpoints" / "checkpoint_9" / "model.safetensors").write_bytes(b"junk")
    os.remove(newest / MANIFEST_NAME)  # and the newest made incomplete
    fresh = make(project_dir=str(tmp_path))
    fresh[0].load_state()
    assert_same_weights(expected, state_of(fresh[1]))
    assert fresh[0].save_iteration == 1 and fresh[5].windows == 1


def test_explicit_folder_replaced_only_when_it_is_a_checkpoint(tmp_path):
    parts = make()
    parts[0].save_state(tmp_path / "ckpt")
    run(parts, 2)
    parts[0].save_state(tmp_path / "ckpt")  # replaces the previous checkpoint whole
    assert visible(tmp_path) == ["ckpt"]
    parts[0].end_training()  # the replaced one is deleted in the background; end_training waits for that
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(ValueError, match="not a stoker checkpoint"):
        parts[0].save_state(tmp_path / "mine")
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ValueError, match="not a stoker checkpoint"):
        parts[0].save_state(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    parts[0].save_state(tmp_path / "empty")
    checkpoint.verify_checkpoint(tmp_path / "empty")


def test_replace_without_atomic_exchange_and_recovery(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)  # e.g. a file system without renameat2
    parts = make()
    parts[0].save_state(tmp_path / "ckpt")
    saved = state_of(parts[1])
    run(parts, 2)
    parts[0].save_state(tmp_path / "ckpt")
    parts[0].end_training()
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    # A crash between "old aside" and "new in place" leaves only the old one aside: load_state finds it.
    os.rename(tmp_path / "ckpt", tmp_path / ".ckpt.stoker-old")
    fresh = make()
    fresh[0].load_state(tmp_path / "ckpt")
    assert_same_weights(state_of(parts[1]), state_of(fresh[1]))
    assert not any(torch.equal(saved[k], state_of(fresh[1])[k]) for k in ["0.weight"])


class Bad:
    def state_dict(self):
        return {"foo": object()}

    def load_state_dict(self, state):
        pass


def test_unsafe_custom_state_fails_at_save_with_its_path_and_writes_nothing(tmp_path):
    parts = make(project_dir=str(tmp_path))
    parts[0].register_for_checkpointing(Bad())
    with pytest.raises(TypeError, match=r"register_for_checkpointing object #1 state_dict\(\)\['foo'\] is a "
                                        r"<class 'object'>.*cannot be stored safely; return tensors"):
        parts[0].save_state()
    assert os.listdir(tmp_path / "checkpoints") == [] and parts[0].save_iteration == 0


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_malicious_pickle_in_checkpoint_is_refused_and_never_runs(tmp_path):
    parts = make()
    path = parts[0].save_state(tmp_path / "ckpt")
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"state": Payload(str(marker))}, protocol=2)
    # 1. Accelerate's pickle names dropped into the folder.
    for name in ("random_states_0.pkl", "optimizer.bin"):
        (tmp_path / "ckpt" / name).write_bytes(evil)
        with pytest.raises(CheckpointError, match=name):
            make()[0].load_state(path)
        os.remove(tmp_path / "ckpt" / name)
    # 2. A stoker file replaced by a pickle: checksum mismatch.
    (tmp_path / "ckpt" / "custom_checkpoint.safetensors").write_bytes(evil)
    with pytest.raises(CheckpointError, match="custom_checkpoint.safetensors"):
        make()[0].load_state(path)
    # 3. ... even with a manifest forged to match, it is only ever parsed as safetensors.
    manifest = json.loads((tmp_path / "ckpt" / MANIFEST_NAME).read_text())
    forged = str(tmp_path / "ckpt" / "custom_checkpoint.safetensors")
    crc = f"{atomic._crc_file(forged):08x}"
    manifest["files"]["custom_checkpoint.safetensors"] = {"size": len(evil), "crc32": crc}
    (tmp_path / "ckpt" / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="custom_checkpoint.safetensors"):
        make()[0].load_state(path)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_file_gives_clear_error_naming_it(tmp_path, damage):
    parts = make()
    path = parts[0].save_state(tmp_path / "ckpt")
    target = os.path.join(path, "optimizer.safetensors")
    size = os.path.getsize(target)
    with open(target, "r+b") as f:
        if damage == "truncate":
            f.truncate(size - 10)
        else:
            f.seek(size - 5)
            byte = f.read(1)
            f.seek(size - 5)
            f.write(bytes([byte[0] ^ 0x01]))
    fresh = make()
    before = state_of(fresh[1])
    with pytest.raises(CheckpointError, match="optimizer.safetensors (has|does not match)"):
        fresh[0].load_state(path)
    assert_same_weights(before, state_of(fresh[1]))  # verified before anything was restored


def test_load_state_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        make(project_dir=str(tmp_path))[0].load_state()
    with pytest.raises(ValueError, match="automatic_checkpoint_naming"):
        make()[0].load_state()
    with pytest.raises(ValueError, match="automatic_checkpoint_naming"):
        make()[0].save_state()
    path = make()[0].save_state(tmp_path / "ckpt")
    fewer = Accelerator(cpu=True)
    fewer.prepare(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="holds 1 optimizers but 0 were prepared"):
        fewer.load_state(path)


def test_non_stateful_loader_position_is_not_restored(tmp_path):
    parts = make(stateful=False)
    run(parts, 3, save_to=tmp_path / "ckpt")
    fresh = make(stateful=False)
    fresh[0].load_state(tmp_path / "ckpt")
    assert fresh[3].state_dict()["batches_yielded"] == 0  # as in Accelerate: use skip_first_batches yourself


def test_resume_with_worker_processes(tmp_path):
    full = make(workers=2)
    seen_full = run(full, 14)
    parts = make(workers=2)
    seen = run(parts, 6, save_to=tmp_path / "ckpt")
    resumed = make(workers=2)
    resumed[0].load_state(tmp_path / "ckpt")
    seen += run(resumed, 8)
    assert seen == seen_full
    assert_same_weights(state_of(full[1]), state_of(resumed[1]))


class Stream(IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(24):
            yield torch.randn(4, generator=g), torch.randn(4, generator=g)


def test_iterable_dataset_position_resumes_through_torchdata(tmp_path):
    def make_stream():
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        return accelerator, accelerator.prepare(DataLoader(Stream(), batch_size=4))

    accelerator, loader = make_stream()
    full = [b[0][0].tolist() for b in loader]
    accelerator, loader = make_stream()
    it = iter(loader)
    seen = [next(it)[0][0].tolist() for _ in range(2)]
    accelerator.save_state(tmp_path / "ckpt")
    accelerator, loader = make_stream()
    accelerator.load_state(tmp_path / "ckpt")
    seen += [b[0][0].tolist() for b in loader]
    assert seen == full


def test_tree_files_are_plain_safetensors(tmp_path):
    save_tree(str(tmp_path / "x.safetensors"), {"a": torch.ones(2)})
    from safetensors.torch import load_file

    assert torch.equal(next(iter(load_file(tmp_path / "x.safetensors").values())), torch.ones(2))


def test_extra_loader_positions_are_refused_unless_asked_for(tmp_path):
    def make_two(n_loaders):
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        data = TensorDataset(torch.arange(24.0))
        return accelerator, accelerator.prepare(*[DataLoader(data, batch_size=4) for _ in range(n_loaders)])

    accelerator, (first, second) = make_two(2)
    it = iter(first)
    seen = [next(it)[0].tolist() for _ in range(2)]
    accelerator.save_state(tmp_path / "ckpt")
    accelerator, only = make_two(1)
    with pytest.raises(ValueError, match="holds 2 dataloaders but 1 were prepared"):
        accelerator.load_state(tmp_path / "ckpt")
    accelerator.load_state(tmp_path / "ckpt", extra_loaders=True)  # the first position is the prepared loader's
    assert [b[0].tolist() for b in only] == [[8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0],
                                             [16.0, 17.0, 18.0, 19.0], [20.0, 21.0, 22.0, 23.0]]
    assert seen[-1] == [4.0, 5.0, 6.0, 7.0]


def test_a_rotation_missed_by_a_killed_save_is_made_before_the_next_save_writes(tmp_path, monkeypatch):
    parts = make(project_dir=str(tmp_path), total_limit=2)
    with monkeypatch.context() as patch:  # saves killed between their commit and their rotation
        patch.setattr(checkpoint, "rotate_checkpoints", lambda *a, **k: [])
        for _ in range(4):
            parts[0].save_state()
    assert len(visible(tmp_path / "checkpoints")) == 4

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed while committing")

    monkeypatch.setattr(checkpoint, "commit_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        parts[0].save_state()
    assert visible(tmp_path / "checkpoints") == ["checkpoint_2", "checkpoint_3"]  # never more than the limit + 1
