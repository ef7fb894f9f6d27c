"""``import stoker`` stays light: heavy optional modules load only where they are used.

The check runs in a fresh interpreter (this test process has imported everything already) and compares against a
bare ``import torch``, because torch itself may import some of these (``torch.hub`` imports tqdm). One interpreter
takes all the snapshots, since starting one costs about as much as importing torch.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("tensorboard", "torchmetrics", "torch._dynamo", "tqdm")

_PROBE = """
import json, sys
heavy = {heavy!r}
loaded = lambda: sorted(h for h in heavy if any(m == h or m.startswith(h + ".") for m in sys.modules))
snapshots = {{}}
import torch
snapshots["torch"] = loaded()
import stoker
snapshots["stoker"] = loaded()
acc = stoker.Accelerator(cpu=True, mixed_precision="bf16")
model, loader = acc.prepare(torch.nn.Linear(2, 2), torch.utils.data.DataLoader(torch.ones(4, 2), batch_size=2))
for x in loader:
    with acc.accumulate(model):
        acc.backward(model(x).sum())
snapshots["engine"] = loaded()
import tensorboard  # last: checks that the probe sees a heavy import at all
snapshots["probe"] = loaded()
print(json.dumps(snapshots))
"""


@pytest.fixture(scope="module")
def snapshots() -> dict[str, list[str]]:
    code = _PROBE.format(heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_stoker_adds_no_heavy_module_beyond_torch(snapshots: dict[str, list[str]]) -> None:
    added = sorted(set(snapshots["stoker"]) - set(snapshots["torch"]))
    assert added == [], f"`import stoker` imported {added}: import them lazily, where they are used"


def test_using_the_accelerator_stays_light_too(snapshots: dict[str, list[str]]) -> None:
    # An Accelerator step must not pull in the Trainer's or the loggers' dependencies either.
    added = sorted(set(snapshots["engine"]) - set(snapshots["torch"]))
    assert added == [], f"creating and using an Accelerator imported {added}"


def test_the_probe_detects_a_heavy_import(snapshots: dict[str, list[str]]) -> None:
    # Guards the tests above against passing vacuously (a broken probe would report nothing at all).
    assert "tensorboard" in snapshots["probe"] and "tensorboard" not in snapshots["engine"]
