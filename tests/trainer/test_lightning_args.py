"""Trainer arguments under Lightning's names (issue 14 item 2): aliases, the options stoker adds, unknown names."""

from __future__ import annotations

import functools
import logging
import warnings
from datetime import timedelta
from typing import Any

import pytest
import torch

from stoker import Callback, Trainer
from stoker.accelerator import parse_precision
from stoker.callbacks import Timer
from tests.helpers.models import Regressor, batches, clone_model, make_loader, make_regression_data, raw_loop
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import params_of


bare = functools.partial(quiet_trainer, enable_model_summary=False)  # a quiet Trainer that prints no summary


class Count(Callback):
    def __init__(self) -> None:
        self.val_runs = self.sanity = self.train_batches = 0
        self.sanity_flags: list[bool] = []

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        self.val_runs += 1
        self.sanity_flags.append(trainer.sanity_checking)

    def on_sanity_check_end(self, trainer: Any, module: Any) -> None:
        self.sanity += 1

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        self.train_batches += 1


def test_aliases_give_the_same_run_as_stokers_names() -> None:
    data = make_regression_data(n=64)
    a, b = Regressor(momentum=0.0), Regressor(momentum=0.0)
    bare(max_epochs=1, accumulate=2, clip_grad_norm=0.5).fit(a, make_loader(data, batch_size=8))
    t = bare(max_epochs=1, accumulate_grad_batches=2, gradient_clip_val=0.5)
    assert (t.accumulate, t.clip_grad_norm, t.clip_grad_value) == (2, 0.5, None)
    t.fit(b, make_loader(data, batch_size=8))
    for got, want in zip(params_of(a.net), params_of(b.net)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    t = bare(gradient_clip_val=0.3, gradient_clip_algorithm="value")
    assert (t.clip_grad_norm, t.clip_grad_value) == (None, 0.3)
    assert bare(gradient_clip_val=0).clip_grad_norm is None  # Lightning's 0: no clipping


@pytest.mark.parametrize("kwargs, match", [
    ({"accumulate": 2, "accumulate_grad_batches": 4}, "one setting under two names"),
    ({"clip_grad_norm": 1.0, "gradient_clip_val": 1.0}, "Pass only one"),
    ({"gradient_clip_val": 1.0, "gradient_clip_algorithm": "max"}, "'norm'"),
    ({"gradient_clip_algorithm": "value"}, "without gradient_clip_val"),
    ({"fast_dev_run": -1}, "fast_dev_run"),
    ({"num_sanity_val_steps": -2}, "num_sanity_val_steps"),
    ({"max_time": "1 hour"}, "DD:HH:MM:SS"),
    ({"float32_matmul_precision": "low"}, "'highest'"),
    ({"num_nodes": 2}, "torchrun --nnodes=2"),
    ({"min_epochs": -1}, "min_epochs"),
])
def test_bad_lightning_arguments_say_how_to_fix(kwargs: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        bare(**kwargs)


def test_unknown_argument_names_a_close_match_from_both_name_sets() -> None:
    with pytest.raises(TypeError, match=r"unknown argument 'max_epoch'.*Did you mean 'max_epochs'"):
        bare(max_epoch=3)
    with pytest.raises(TypeError, match=r"Did you mean 'accumulate_grad_batches'"):
        bare(accumulate_grad_batch=2)
    with pytest.raises(TypeError, match=r"Did you mean 'clip_grad_norm'"):
        bare(clip_grad_nrm=1.0)
    with pytest.raises(TypeError, match="Lightning argument stoker does not take: precision and strategy are "
                                        "Trainer"):
        bare(plugins=["an environment"])  # (profiler=, overfit_batches= and sync_batchnorm=, refused here
        # before, are taken now)


def test_precision_names_of_lightning() -> None:
    assert [parse_precision(p) for p in ("32-true", "16-mixed", "bf16-mixed", "bf16-true", "16-true")] == [
        "no", "fp16", "bf16", "bf16-true", "fp16-true"]
    module = Regressor()
    trainer = bare(max_epochs=1, precision="bf16-true")
    trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8))
    assert trainer.global_step == 4
    assert {p.dtype for p in module.parameters()} == {torch.bfloat16}  # true half: the weights themselves


def test_fast_dev_run_runs_n_batches_writes_nothing(tmp_path: Any) -> None:
    count = Count()
    trainer = Trainer(fast_dev_run=3, max_epochs=5, default_root_dir=tmp_path, callbacks=[count],
                      enable_progress_bar=False, enable_model_summary=False)
    data = make_loader(make_regression_data(n=80), batch_size=8)
    trainer.fit(Regressor(), data, make_loader(make_regression_data(n=80), batch_size=8))
    assert (trainer.global_step, count.train_batches, count.val_runs, trainer.num_val_batches) == (3, 3, 1, [3])
    assert trainer.loggers == [] and trainer.checkpoint_callback is None
    assert list(tmp_path.iterdir()) == []  # no checkpoints, no logs
    assert bare(fast_dev_run=True).fast_dev_run == 1


def test_a_held_stop_request_is_also_lightnings_info_record(caplog: Any) -> None:
    class StopAtOnce(Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            trainer.should_stop = True

    with caplog.at_level(logging.INFO, logger="stoker.trainer.trainer"), pytest.warns(UserWarning, match="min_epochs"):
        bare(max_epochs=5, min_epochs=2, callbacks=[StopAtOnce()]).fit(
            Regressor(), make_loader(make_regression_data(n=32), batch_size=8))
    records = [r for r in caplog.records if r.name == "stoker.trainer.trainer"]
    assert [r.getMessage() for r in records] == [  # once, in Lightning's words, for a script's logging set-up
        "Trainer was signaled to stop but the required `min_epochs=2` or `min_steps=None` has not been met. "
        "Training will continue..."]


def test_min_epochs_and_min_steps_hold_a_stop_request() -> None:
    class StopAtOnce(Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            trainer.should_stop = True

    data = make_regression_data(n=32)  # 4 batches per epoch
    with pytest.warns(UserWarning, match="min_epochs=2"):
        t = bare(max_epochs=5, min_epochs=2, callbacks=[StopAtOnce()])
        t.fit(Regressor(), make_loader(data, batch_size=8))
    assert (t.current_epoch, t.global_step) == (2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = bare(max_epochs=5, min_steps=6, callbacks=[StopAtOnce()])
        t.fit(Regressor(), make_loader(data, batch_size=8))
    assert t.global_step == 6
    assert bare(min_epochs=3)._max_epochs_effective == 3  # stoker's default of one epoch grows to min_epochs


def test_max_time_adds_a_timer() -> None:
    t = bare(max_time={"minutes": 5})
    timers = [c for c in t.callbacks if isinstance(c, Timer)]
    assert len(timers) == 1 and timers[0].duration == timedelta(minutes=5)
    assert bare(max_time="00:00:00:00").max_time == timedelta(0)
    with pytest.warns(UserWarning, match="Timer callback's duration is used"):
        t = bare(max_time="00:01:00:00", callbacks=[Timer(duration="00:02:00:00")])
    assert [c.duration for c in t.callbacks if isinstance(c, Timer)] == [timedelta(hours=2)]


def test_max_time_zero_stops_after_the_first_step(tmp_path) -> None:
    t = bare(max_time=timedelta(0), max_epochs=3, default_root_dir=tmp_path)  # the Timer saves `last` there
    t.fit(Regressor(), make_loader(make_regression_data(n=32), batch_size=8))
    assert t.global_step == 1


def test_num_sanity_val_steps_runs_a_short_validation_before_training_without_side_effects() -> None:
    data, val = make_regression_data(n=32), make_regression_data(n=40)
    reference = Regressor()
    bare(max_epochs=1).fit(reference, make_loader(data, batch_size=8))
    count = Count()
    module = Regressor()
    trainer = bare(max_epochs=1, num_sanity_val_steps=2, callbacks=[count])
    trainer.fit(module, make_loader(data, batch_size=8), make_loader(val, batch_size=8))
    assert count.sanity == 1 and count.val_runs == 2 and count.sanity_flags == [True, False]
    assert trainer.num_val_batches == [5]  # the full validation after the sanity check
    for got, want in zip(params_of(module.net), params_of(reference.net)):  # RNG untouched: same training
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    count = Count()
    bare(max_epochs=1, callbacks=[count]).fit(Regressor(), make_loader(data, batch_size=8),
                                              make_loader(val, batch_size=8))
    assert count.sanity == 1 and count.val_runs == 2  # the default: Lightning's sanity check of 2 batches
    count = Count()
    bare(max_epochs=1, num_sanity_val_steps=0, callbacks=[count]).fit(Regressor(), make_loader(data, batch_size=8),
                                                                      make_loader(val, batch_size=8))
    assert count.sanity == 0 and count.val_runs == 1  # 0: no sanity check


def test_reload_dataloaders_every_n_epochs_asks_the_hook_again() -> None:
    class Reloading(Regressor):
        calls = 0

        def train_dataloader(self) -> Any:
            Reloading.calls += 1
            return make_loader(make_regression_data(n=16 * Reloading.calls), batch_size=8)

    t = bare(max_epochs=4, reload_dataloaders_every_n_epochs=2)
    t.fit(Reloading())
    assert Reloading.calls == 2 and t.global_step == 2 + 2 + 4 + 4
    Reloading.calls = 0
    bare(max_epochs=4).fit(Reloading())
    assert Reloading.calls == 1


def test_detect_anomaly_benchmark_and_matmul_precision() -> None:
    before = torch.get_float32_matmul_precision()
    try:
        bare(float32_matmul_precision="medium", benchmark=True)
        assert torch.get_float32_matmul_precision() == "medium" and torch.backends.cudnn.benchmark
        bare(benchmark=False)
        assert not torch.backends.cudnn.benchmark
    finally:
        torch.set_float32_matmul_precision(before)

    class NaNGrad(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return (self(batch[0]).sum() * 0.0).sqrt() * torch.tensor(-1.0).sqrt()

    with pytest.raises(RuntimeError, match="returned nan"):
        bare(max_steps=1, detect_anomaly=True).fit(NaNGrad(), make_loader(make_regression_data(n=16), batch_size=8))


def test_use_distributed_sampler_is_checked() -> None:
    assert bare(use_distributed_sampler=False).use_distributed_sampler is False  # one process: nothing to shard
    with pytest.raises(TypeError, match="use_distributed_sampler"):
        bare(use_distributed_sampler="no")


def test_num_nodes_one_is_accepted() -> None:
    assert bare(num_nodes=1).num_nodes == 1


def test_parity_kept_with_lightning_names_reference_loop() -> None:
    data = make_regression_data(n=56)
    module = Regressor(momentum=0.0)
    reference = raw_loop(clone_model(module.net), batches(data, 8), epochs=1, accumulate=2, momentum=0.0)
    bare(max_epochs=1, accumulate_grad_batches=2).fit(module, make_loader(data, batch_size=8))
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_num_nodes_is_checked_against_the_launcher(monkeypatch: Any) -> None:
    from stoker.compat.lightning import args as check

    monkeypatch.setenv("WORLD_SIZE", "4")
    assert check.num_nodes(2, 2) == 2
    with pytest.raises(ValueError, match="WORLD_SIZE=4. Pass num_nodes=2"):
        check.num_nodes(3, 2)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match="torchrun --nnodes=3"):
        check.num_nodes(3, 1)


@pytest.mark.parametrize("kwargs, value, algorithm", [
    ({"gradient_clip_val": 0.5}, 0.5, "norm"),
    ({"gradient_clip_val": 0.5, "gradient_clip_algorithm": "value"}, 0.5, "value"),
    ({"clip_grad_norm": 2.0}, 2.0, "norm"),
    ({}, None, None),
])
def test_gradient_clip_attributes_are_what_configure_gradient_clipping_receives(kwargs: dict, value: Any,
                                                                                  algorithm: Any) -> None:
    seen: list[tuple] = []

    class Clipping(Regressor):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            seen.append((gradient_clip_val, gradient_clip_algorithm))

    trainer = quiet_trainer(max_steps=1, **kwargs)
    assert (trainer.gradient_clip_val, trainer.gradient_clip_algorithm) == (value, algorithm)
    trainer.fit(Clipping(), make_loader(make_regression_data(n=8)))
    assert seen == [(value, algorithm)]


@pytest.mark.parametrize("name", ["64-true", "64", 64])
def test_double_precision_trains_as_a_float64_loop(name: Any, tmp_path: Any) -> None:
    data = make_regression_data(n=32)
    module = Regressor()
    reference = clone_model(module.net).double()
    trainer = quiet_trainer(max_epochs=2, precision=name, enable_checkpointing=True, default_root_dir=str(tmp_path))
    trainer.fit(module, make_loader(data, batch_size=8))
    assert trainer.precision == "fp64-true" and all(p.dtype == torch.float64 for p in module.parameters())
    raw_loop(reference, [(x.double(), y.double()) for x, y in batches(data, 8)], epochs=2)
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    resumed = Regressor()  # the float64 weights come back from the checkpoint as they were saved
    quiet_trainer(max_epochs=2, precision=name).validate(resumed, make_loader(data),
                                                         ckpt_path=trainer.checkpoint_callback.best_model_path)
    assert next(resumed.parameters()).dtype == torch.float64


@pytest.mark.parametrize("precision, dtype", [("32-true", torch.float32), ("bf16-mixed", torch.float32),
                                              ("64-true", torch.float64), ("bf16-true", torch.bfloat16)])
def test_init_module_builds_on_the_device_in_the_weights_dtype(precision: str, dtype: torch.dtype) -> None:
    trainer = quiet_trainer(precision=precision, accelerator="cpu")
    with trainer.init_module():
        layer = torch.nn.Linear(3, 2)
    assert layer.weight.device == trainer.accelerator.device and layer.weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32 and torch.ones(1).dtype == torch.float32  # put back


@pytest.mark.parametrize("inference", [False, True])
def test_inference_mode_for_stages_run_on_their_own_and_no_grad_inside_fit(inference: bool) -> None:
    seen: list[tuple[str, bool, bool]] = []

    class Looks(Regressor):
        def _look(self, stage: str) -> None:
            seen.append((stage, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

        def on_validation_start(self) -> None:
            self._look("fit-validate" if self.trainer.state.fn == "fit" else "validate")

        def on_test_start(self) -> None:
            self._look("test")

    trainer = quiet_trainer(max_steps=2, inference_mode=inference, num_sanity_val_steps=0)
    module = Looks()
    data = make_loader(make_regression_data(n=16), batch_size=8)
    trainer.fit(module, data, data)
    trainer.validate(module, data)
    trainer.test(module, data)
    assert seen == [("fit-validate", False, False), ("validate", False, inference), ("test", False, inference)]


def test_trainer_logger_and_loggers_can_be_assigned(tmp_path: Any) -> None:
    from stoker.loggers import CSVLogger

    first, second = CSVLogger(str(tmp_path), name="a"), CSVLogger(str(tmp_path), name="b")
    trainer = Trainer(default_root_dir=str(tmp_path), enable_progress_bar=False)
    trainer.logger = first
    assert trainer.loggers == [first] and trainer.logger is first
    trainer.loggers = [first, second]
    assert trainer.logger is first and trainer.log_dir == first.log_dir
    trainer.logger = None
    assert trainer.logger is None and trainer.loggers == []
    trainer.loggers = None  # "no loggers", kept as an empty list
    assert trainer.loggers == [] and trainer.log_dir == str(tmp_path)
    trainer.loggers = (second,)
    assert trainer.loggers == [second]
