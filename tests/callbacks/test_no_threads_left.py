"""A fit leaves no worker threads of its own behind: the checkpoint writer's threads end once their work is done."""

from __future__ import annotations

import threading
from pathlib import Path

from stoker import Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


def _stoker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("stoker-") and t.is_alive()]


def test_fit_with_checkpoints_ends_its_threads(tmp_path: Path) -> None:
    # With a logger, as users run it (the saves then finish on the saver thread and fsync files in parallel).
    trainer = Trainer(max_epochs=3, default_root_dir=str(tmp_path), enable_progress_bar=False)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=32), 8))
    assert list(tmp_path.rglob("epoch=2*")), "the run saved checkpoints (and so used the threads)"
    assert _stoker_threads() == []


def test_the_threads_start_again_for_the_next_fit(tmp_path: Path) -> None:
    module, loader = Regressor(), make_loader(make_regression_data(n=32), 8)
    for epochs in (2, 4):  # the second fit continues the first one's run and saves (and rotates) again
        Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), enable_progress_bar=False).fit(module, loader)
        assert _stoker_threads() == []
    assert list(tmp_path.rglob("epoch=3*"))
