"""``WandbLogger``'s media calls as Lightning names them (``log_image``, ``log_text``, ``log_audio``,
``log_video``), from a module's hooks through ``self.logger``, read back from the offline run W&B wrote."""

from __future__ import annotations

import wave

import numpy as np
import pytest
import torch
from PIL import Image

from stoker import Trainer
from stoker.loggers import WandbLogger
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import wandb_runs


class Illustrated(Regressor):
    """Logs media at each validation's end, as Lightning scripts do through ``self.logger``."""

    wav = gif = ""

    def on_validation_epoch_end(self) -> None:
        images = [np.full((4, 4, 3), 60 * i, dtype=np.uint8) for i in range(2)]
        self.logger.log_image("samples", images, caption=["dark", "light"])
        self.logger.log_text("notes", columns=["epoch", "text"], data=[[self.current_epoch, "ok"]])
        self.logger.log_audio("tone", [self.wav], caption=["beep"])
        self.logger.log_video("clip", [self.gif], format=["gif"])


@pytest.mark.slow  # one offline W&B run: the W&B service starts (several seconds)
def test_media_logged_from_a_module_reach_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="media", save_dir=tmp_path)
    trainer = Trainer(max_epochs=2, logger=logger, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, num_sanity_val_steps=0)
    data = make_regression_data(n=16)
    module = Illustrated()
    module.wav = str(tmp_path / "beep.wav")
    with wave.open(module.wav, "wb") as f:  # a file, so that W&B needs no audio package to read it
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(8000)
        f.writeframes((np.sin(np.linspace(0, 50, 800)) * 3000).astype("<i2").tobytes())
    module.gif = str(tmp_path / "clip.gif")
    frames = [Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)) for i in range(3)]
    frames[0].save(module.gif, save_all=True, append_images=frames[1:])
    trainer.fit(module, make_loader(data), make_loader(data))

    (run,) = wandb_runs(tmp_path)
    logged = {}  # each call is a run.log of its own: key -> its records, in order
    for _, values in run.history:
        for name in ("samples", "notes", "tone", "clip"):
            if any(k.startswith(name + ".") for k in values):
                logged.setdefault(name, []).append(values)
    assert {name: len(records) for name, records in logged.items()} == {"samples": 2, "notes": 2, "tone": 2,
                                                                         "clip": 2}  # at each validation's end
    assert all(r["samples.count"] == 2 and r["samples.captions"] == ["dark", "light"] for r in logged["samples"])
    assert all(r["notes._type"] == "table-file" for r in logged["notes"])
    assert all(r["tone.count"] == 1 and r["tone.captions"] == ["beep"] for r in logged["tone"])
    assert all(r["clip.count"] == 1 and r["clip.videos"][0]["_type"] == "video-file" for r in logged["clip"])


def test_media_calls_check_their_arguments(monkeypatch):
    logger = WandbLogger(project="media", offline=True)
    with pytest.raises(TypeError, match=r"log_image\('x', \.\.\.\) takes a list of items, got Tensor"):
        logger.log_image("x", torch.zeros(3, 4, 4))
    with pytest.raises(ValueError, match=r"2 items, but the keyword lists have lengths \{'caption': 1\}"):
        logger.log_image("x", [torch.zeros(3, 4, 4)] * 2, caption=["only one"])
