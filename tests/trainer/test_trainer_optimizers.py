"""``trainer.optimizers`` are the optimizers ``configure_optimizers`` returned (Lightning's), the hooks get those same
objects, and ``trainer.prepared_optimizers`` are the Accelerator's wrappers around them."""

from __future__ import annotations

from typing import Any

import torch

from stoker import Callback
from stoker.accelerator import AcceleratedOptimizer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class AdamRegressor(Regressor):
    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class Seen(Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.seen.append(("zero_grad", optimizer))

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.seen.append(("step", optimizer))


def test_trainer_optimizers_are_the_configured_ones_and_the_hooks_get_them(tmp_path: Any) -> None:
    clipped: list[Any] = []

    class Clipping(AdamRegressor):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            clipped.append(optimizer)
            self.clip_gradients(optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")

    seen = Seen()
    trainer = quiet_trainer(max_epochs=1, default_root_dir=tmp_path, callbacks=[seen])
    trainer.fit(Clipping(), make_loader(make_regression_data(n=16), batch_size=8))
    (adam,) = trainer.optimizers
    assert type(adam) is torch.optim.Adam
    (prepared,) = trainer.prepared_optimizers
    assert isinstance(prepared, AcceleratedOptimizer) and prepared.optimizer is adam
    assert trainer.optimizers is trainer.optimizers  # one list, not a copy per read
    assert [kind for kind, _ in seen.seen] == ["zero_grad", "step"] * 2
    assert all(opt is adam for _, opt in seen.seen) and clipped == [adam, adam]


def test_module_optimizers_hands_out_the_stepping_wrapper_or_the_user_optimizer(tmp_path: Any) -> None:
    got: dict[str, Any] = {}

    class Manual(AdamRegressor):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            got["wrapped"], got["raw"] = self.optimizers(), self.optimizers(use_pl_optimizer=False)
            opt = got["wrapped"]
            opt.zero_grad()
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss["loss"] if isinstance(loss, dict) else loss)
            opt.step()

    trainer = quiet_trainer(max_epochs=1, default_root_dir=tmp_path)
    trainer.fit(Manual(), make_loader(make_regression_data(n=16), batch_size=8))
    assert got["raw"] is trainer.optimizers[0] and type(got["raw"]) is torch.optim.Adam
    assert got["wrapped"] is not got["raw"] and trainer.global_step == 2


def test_scheduler_configs_hold_the_configured_scheduler_which_steps_and_resumes(tmp_path: Any) -> None:
    class Scheduled(AdamRegressor):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.Adam(self.parameters(), lr=0.01)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                       "interval": "step"}}

    data = make_loader(make_regression_data(n=32), batch_size=8)
    first = quiet_trainer(max_steps=2, default_root_dir=tmp_path, enable_checkpointing=True)
    first.fit(Scheduled(), data)
    (config,) = first.lr_scheduler_configs
    assert type(config.scheduler) is torch.optim.lr_scheduler.StepLR and config.scheduler.last_epoch == 2
    assert config.scheduler.optimizer is first.optimizers[0]
    resumed = quiet_trainer(max_steps=4, default_root_dir=tmp_path)
    resumed.fit(Scheduled(), data, ckpt_path="last")
    assert resumed.lr_scheduler_configs[0].scheduler.last_epoch == 4
    assert resumed.optimizers[0].param_groups[0]["lr"] == 0.01 * 0.5 ** 4
