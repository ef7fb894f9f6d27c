"""A run of summed-loss micro-batches of 1, 3, 2 and 5 items with accumulation 2, for the mid-window resume test.

    python tests/helpers/window_worker.py DIR PRECISION...   # for each: load_state(DIR/PRECISION), finish the run,
                                                             # save the weights to DIR/PRECISION.pt

In the test process, ``run(precision)`` is the uninterrupted run and ``run(precision, save_to=DIR/PRECISION)`` stops
after the first micro-batch (inside the first window) with ``save_state``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:  # run as a script: make `stoker` and `tests` importable
    sys.path.insert(0, str(REPO))

from stoker import Accelerator  # noqa: E402
from tests.helpers.models import make_mlp, make_regression_data  # noqa: E402
from tests.helpers.weights import params_of  # noqa: E402

SIZES = (1, 3, 2, 5)


def run(mixed_precision: str, save_to: str | None = None, resume_from: str | None = None) -> list[torch.Tensor]:
    """Trains on the four micro-batches (from the second one after ``resume_from``); returns the weights."""
    x, y = make_regression_data(n=sum(SIZES)).tensors
    starts = [sum(SIZES[:i]) for i in range(len(SIZES))]
    model = make_mlp(seed=13)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision, gradient_accumulation_steps=2)
    model, opt = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.05))
    first = 0
    if resume_from is not None:
        accelerator.load_state(resume_from)
        first = 1
    for start, size in list(zip(starts, SIZES))[first:]:
        with accelerator.accumulate(model):
            out = model(x[start:start + size])
            accelerator.backward(F.mse_loss(out, y[start:start + size], reduction="sum"), num_items=size)
            opt.step()
            opt.zero_grad()
        if save_to is not None:
            accelerator.save_state(save_to)
            break
    return params_of(model)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    for precision in sys.argv[2:]:
        torch.save(run(precision, resume_from=str(folder / precision)), folder / f"{precision}.pt")
