"""A state file whose tree was tampered with is refused with the file's name and the problem, not a bare error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from stoker.accelerator import CheckpointError, load_tree
from stoker.accelerator.checkpointing.tree import TREE_KEY


@pytest.mark.parametrize("depth", [5_000, 200_000])
def test_a_tree_nested_absurdly_deep_is_named_as_such(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "optimizer.safetensors"
    skeleton = "[" * depth + "1" + "]" * depth  # valid JSON, deeper than any state
    save_file({"t": torch.zeros(1)}, str(path), metadata={"format": "pt", TREE_KEY: skeleton})
    with pytest.raises(CheckpointError, match=r"optimizer\.safetensors holds a malformed stoker tree \(it nests too "
                                              r"deeply"):
        load_tree(str(path))


def test_a_flipped_byte_in_a_manifest_file_name_is_blamed_on_the_manifest(tmp_path: Path) -> None:
    """Before, the real file was reported as unknown ("holds files its manifest does not list"), pointing the
    operator at a healthy file."""
    from torch import nn

    from stoker import Accelerator
    from stoker.accelerator.checkpointing.atomic import MANIFEST_NAME

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(3, 2))
    ckpt = Path(accelerator.save_state(str(tmp_path / "ckpt")))
    manifest = (ckpt / MANIFEST_NAME).read_bytes()
    (ckpt / MANIFEST_NAME).write_bytes(manifest.replace(b"model.safetensors", b"model.safetensorz", 1))
    with pytest.raises(CheckpointError, match=r"stoker_manifest\.json lists \['model\.safetensorz'\], which are not "
                                              r"in the folder, and not \['model\.safetensors'\], which are: the "
                                              r"manifest was altered"):
        accelerator.load_state(str(ckpt))
