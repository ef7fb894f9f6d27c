"""``stoker.cli.LightningCLI``: a script written for Lightning's CLI (``cli_script.py``) driven by command lines,
config files and the environment, as its users do (``python main.py fit --config run.yaml --model.lr 0.01``)."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
import yaml

import stoker

pytest.importorskip("jsonargparse")

from stoker.cli import LightningCLI, SaveConfigCallback  # noqa: E402
from tests.cli.cli_script import Injected, RandomData, Regressor, WideRegressor  # noqa: E402
from tests.helpers.forkserver import run_python

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "max_epochs": 1}
SCRIPT = Path(__file__).with_name("cli_script.py")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["main.py"])  # pytest's own arguments are not the CLI's
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")  # no "no seed given" warning


def cli(*args: str, **kwargs) -> LightningCLI:
    kwargs.setdefault("trainer_defaults", QUIET)
    return LightningCLI(Regressor, RandomData, args=list(args), **kwargs)


def test_fit_with_a_config_file_and_overrides_later_wins(tmp_path):
    Path("run.yaml").write_text(yaml.safe_dump({
        "trainer": {"max_epochs": 2, "limit_train_batches": 2, "logger": False},
        "model": {"width": 3, "lr": 0.5}, "data": {"width": 3, "batch_size": 2}}))
    Path("late.yaml").write_text(yaml.safe_dump({"model": {"lr": 0.25}}))
    run = cli("fit", "--config", "run.yaml", "--config", "late.yaml", "--trainer.max_epochs", "3")
    assert run.subcommand == "fit"
    assert run.model.layer.in_features == 3 and run.model.hparams.lr == 0.25  # the later file wins
    assert run.datamodule.batch_size == 2
    assert run.trainer.max_epochs == 3 and run.trainer.global_step == 6  # 3 epochs of 2 batches: fit ran
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())  # logger=False: the log dir is the root dir
    assert saved["model"] == {"width": 3, "lr": 0.25} and saved["trainer"]["max_epochs"] == 3


def test_validate_test_predict_subcommands_run_the_trainer_methods():
    calls = []

    class Recording(LightningCLI):
        def before_test(self):
            calls.append("before_test")

        def after_test(self):
            calls.append("after_test")

    Recording(Regressor, RandomData, trainer_defaults={**QUIET, "logger": False}, save_config_callback=None,
              args=["test", "--trainer.limit_test_batches=2"])
    assert calls == ["before_test", "after_test"]
    run = cli("validate", "--trainer.logger=false", save_config_callback=None)
    assert run.trainer.validating is False and run.trainer.global_step == 0
    run = cli("predict", "--trainer.logger=false", "--return_predictions=true", save_config_callback=None)
    assert run.config.predict.return_predictions is True


def test_subclass_mode_takes_a_class_path_and_its_init_args():
    run = LightningCLI(Regressor, RandomData, subclass_mode_model=True, run=False, trainer_defaults=QUIET,
                       args=["--model=tests.cli.cli_script.WideRegressor", "--model.init_args.depth=5",
                             "--model.init_args.lr=0.3"])
    assert type(run.model) is WideRegressor and run.model.depth == 5 and run.model.hparams.lr == 0.3
    assert run.config.model.class_path == "tests.cli.cli_script.WideRegressor"


def test_no_model_class_takes_any_training_module_by_class_path():
    run = LightningCLI(run=False, trainer_defaults=QUIET, args=["--model=tests.cli.cli_script.Regressor",
                                                                "--model.width=2"])
    assert type(run.model) is Regressor and run.model.layer.in_features == 2
    assert run.datamodule is None


def test_print_config_is_a_config_file_that_runs():
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli("fit", "--model.lr=0.05", "--trainer.logger=false", "--seed_everything=3", "--print_config")
    text = out.getvalue()
    assert text.startswith("# stoker==")
    printed = yaml.safe_load(text)
    assert printed["model"] == {"width": 4, "lr": 0.05} and printed["seed_everything"] == 3
    assert printed["ckpt_path"] is None and printed["trainer"]["logger"] is False
    Path("printed.yaml").write_text(text)
    run = cli("fit", "--config=printed.yaml")
    assert run.model.hparams.lr == 0.05 and run.trainer.global_step == 4


def test_a_config_that_lightnings_print_config_wrote_runs_unchanged():
    """``python main.py fit --print_config > run.yaml`` under Lightning, then ``--config run.yaml`` after the rename:
    Lightning's Trainer keys stoker takes only at their inert values (``plugins: null``, ...) and the entry points'
    ``weights_only`` are accepted."""
    import pytorch_lightning as pl
    from pytorch_lightning.cli import LightningCLI as PLCLI

    class PLRegressor(pl.LightningModule):  # the same arguments as the script's classes, under Lightning
        def __init__(self, width: int = 4, lr: float = 0.1) -> None:
            super().__init__()

    class PLData(pl.LightningDataModule):
        def __init__(self, width: int = 4, size: int = 16, batch_size: int = 4) -> None:
            super().__init__()

    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        PLCLI(PLRegressor, PLData, args=["fit", "--model.lr=0.05", "--trainer.max_epochs=1", "--trainer.logger=false",
                                         "--trainer.enable_progress_bar=false", "--print_config"])
    printed = yaml.safe_load(out.getvalue())
    assert printed["trainer"]["plugins"] is None and "weights_only" in printed  # what made stoker's CLI refuse it
    Path("lightning.yaml").write_text(out.getvalue())
    run = cli("fit", "--config=lightning.yaml")
    assert run.model.hparams.lr == 0.05 and run.trainer.global_step == 4
    Path("other.yaml").write_text(out.getvalue().replace("plugins: null", "plugins: [an environment]"))
    with pytest.raises(TypeError, match=r"Trainer\(plugins=\.\.\.\) is a Lightning argument stoker does not take"):
        cli("fit", "--config=other.yaml")


def test_config_saved_in_the_log_dir_is_reused_and_never_overwritten():
    run = cli("fit", "--model.width=2", "--data.width=2", "--trainer.default_root_dir=runs")
    log_dir = Path(run.trainer.log_dir)
    assert log_dir.parts[0] == "runs" and (log_dir / "config.yaml").is_file()
    assert sum(isinstance(c, SaveConfigCallback) for c in run.trainer.callbacks) == 1
    again = cli("fit", f"--config={log_dir / 'config.yaml'}", "--trainer.logger=false")
    assert again.model.layer.in_features == 2 and again.trainer.log_dir == "runs"
    with pytest.raises(RuntimeError, match="Aborting to avoid overwriting"):  # runs/config.yaml is there now
        cli("fit", f"--config={log_dir / 'config.yaml'}", "--trainer.logger=false")
    cli("fit", f"--config={log_dir / 'config.yaml'}", "--trainer.logger=false",
        save_config_kwargs={"overwrite": True})


def test_no_config_saved_by_fast_dev_run_or_without_the_callback():
    cli("fit", "--trainer.logger=false", "--trainer.fast_dev_run=1")
    cli("fit", "--trainer.logger=false", save_config_callback=None)
    assert not Path("config.yaml").exists()


def test_optimizer_and_lr_scheduler_from_the_command_line():
    with pytest.warns(UserWarning, match="Regressor.configure_optimizers` will be overridden by `LightningCLI"):
        run = cli("fit", "--trainer.logger=false", "--optimizer", "torch.optim.Adam", "--optimizer.lr", "0.01",
                  "--lr_scheduler=StepLR", "--lr_scheduler.step_size=1", "--lr_scheduler.gamma=0.5")
    assert run.trainer.global_step == 4
    [optimizer], [scheduler] = run.model.configure_optimizers()
    assert isinstance(optimizer, torch.optim.Adam) and isinstance(scheduler, torch.optim.lr_scheduler.StepLR)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5)  # fit stepped this scheduler once
    assert run.config.fit.optimizer.class_path == "torch.optim.Adam"


def test_reduce_lr_on_plateau_names_its_metric_and_no_optimizer_keeps_the_module_s():
    run = cli("--optimizer=SGD", "--optimizer.lr=0.1", "--lr_scheduler=ReduceLROnPlateau",
              "--lr_scheduler.monitor=val_loss", run=False)
    config = run.model.configure_optimizers()
    assert config["lr_scheduler"]["monitor"] == "val_loss"
    assert cli(run=False).model.configure_optimizers().defaults["lr"] == 0.1  # the module's own SGD


def test_run_false_builds_the_objects_for_the_script():
    run = cli("--model.lr=0.2", "--trainer.max_epochs=2", "--trainer.logger=false", run=False)
    assert run.subcommand is None and run.trainer.global_step == 0
    assert run.model.hparams.lr == 0.2 and run.trainer.max_epochs == 2 and isinstance(run.datamodule, RandomData)
    run.trainer.fit(run.model, datamodule=run.datamodule)
    assert run.trainer.global_step == 8 and Path("config.yaml").is_file()
    other = run.instantiate_trainer(max_epochs=5)
    assert other.max_epochs == 5 and run.config_init.trainer.max_epochs == 2


def test_lazily_exported_callbacks_and_loggers_are_found_by_short_name():
    run = cli("--trainer.callbacks+=ModelPruning", "--trainer.callbacks.pruning_fn=l1_unstructured",
              "--trainer.callbacks+=DeviceStatsMonitor", "--trainer.logger=MLFlowLogger",
              "--trainer.logger.tracking_uri=file:./mlruns", run=False)
    names = [type(c).__name__ for c in run.trainer.callbacks]
    assert names[:2] == ["ModelPruning", "DeviceStatsMonitor"] and run.trainer.callbacks[0].pruning_fn is not None
    assert type(run.trainer.logger).__name__ == "MLFlowLogger"


def test_a_strategy_and_a_profiler_take_their_own_arguments_from_the_command_line():
    # The Trainer's `strategy` and `profiler` are typed with their base classes, so jsonargparse builds them from a
    # class path and `--trainer.strategy.<argument>` (not a NestedArg the Trainer would refuse)
    run = cli("--trainer.strategy=stoker.strategies.DDPStrategy", "--trainer.strategy.find_unused_parameters=true",
              "--trainer.strategy.process_group_backend=gloo", "--trainer.profiler=PyTorchProfiler",
              "--trainer.profiler.row_limit=5", "--trainer.logger=false", run=False)
    strategy = run.trainer.accelerator.strategy
    run.trainer.accelerator.end_training()  # the one-process group it opened (a later fork must not inherit it)
    assert type(strategy).__name__ == "DDPStrategy" and strategy.backend == "gloo"
    assert strategy.ddp_kwargs["find_unused_parameters"] is True
    assert type(run.trainer.profiler).__name__ == "PyTorchProfiler" and run.trainer.profiler.row_limit == 5
    assert cli("--trainer.strategy=single", "--trainer.profiler=simple", run=False).trainer.profiler is not None


def test_fit_ckpt_path_resumes_and_predict_reads_the_saved_hyperparameters():
    first = cli("fit", "--model.lr=0.05", "--trainer.default_root_dir=runs")
    [ckpt] = Path(first.trainer.log_dir, "checkpoints").glob("*.ckpt")
    resumed = cli("fit", f"--ckpt_path={ckpt}", "--trainer.max_epochs=2", "--trainer.logger=false")
    assert resumed.trainer.current_epoch == 2 and resumed.trainer.global_step == 8  # 4 more steps, not 8
    predicted = cli("predict", f"--ckpt_path={ckpt}", "--trainer.logger=false", save_config_callback=None)
    assert predicted.model.hparams.lr == 0.05  # from the checkpoint, not the default 0.1


def test_hyperparameters_are_the_parsed_config_so_load_from_checkpoint_rebuilds_objects():
    run = LightningCLI(Injected, RandomData, run=False, trainer_defaults=QUIET, auto_configure_optimizers=False,
                       args=["--model.activation=torch.nn.LeakyReLU", "--model.activation.negative_slope=0.2",
                             "--model.optimizer=Adam", "--model.optimizer.lr=0.01", "--trainer.logger=false"])
    assert isinstance(run.model.activation, torch.nn.LeakyReLU)
    hparams = dict(run.model.hparams)
    assert hparams["_instantiator"] == "stoker.cli.instantiate_module"
    assert hparams["activation"] == {"class_path": "torch.nn.LeakyReLU", "init_args": {"negative_slope": 0.2,
                                                                                      "inplace": False}}
    assert hparams["optimizer"]["class_path"] == "torch.optim.Adam"
    run.trainer.fit(run.model, datamodule=run.datamodule)
    [ckpt] = Path("checkpoints").glob("*.ckpt")
    loaded = Injected.load_from_checkpoint(ckpt)
    assert isinstance(loaded.activation, torch.nn.LeakyReLU) and loaded.activation.negative_slope == 0.2
    optimizer = loaded.configure_optimizers()
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.param_groups[0]["lr"] == 0.01
    torch.testing.assert_close(loaded.layer.weight, run.model.layer.weight, rtol=0, atol=0)
    plain = cli(run=False, load_from_checkpoint_support=False)
    assert "_instantiator" not in plain.model.hparams


def test_subclass_mode_checkpoint_names_its_class_for_the_base_class_and_ckpt_path():
    run = LightningCLI(Regressor, RandomData, subclass_mode_model=True, subclass_mode_data=True, run=False,
                       trainer_defaults={**QUIET, "logger": True},
                       args=["--model=WideRegressor", "--model.depth=3", "--data=RandomData", "--trainer.logger=false"])
    assert run.model.hparams["_class_path"] == "tests.cli.cli_script.WideRegressor"
    run.trainer.fit(run.model, datamodule=run.datamodule)  # _class_path differs from the data's: no clash
    [ckpt] = Path("checkpoints").glob("*.ckpt")
    loaded = stoker.LightningModule.load_from_checkpoint(ckpt)
    assert type(loaded) is WideRegressor and loaded.depth == 3
    again = LightningCLI(Regressor, RandomData, subclass_mode_model=True, trainer_defaults=QUIET,
                         save_config_callback=None,
                         args=["predict", "--model=Regressor", f"--ckpt_path={ckpt}", "--trainer.logger=false"])
    assert type(again.model) is WideRegressor


def test_seed_everything_default_argument_and_recorded_seed():
    run = cli("--seed_everything=7", run=False)
    assert run.config.seed_everything == 7 and torch.initial_seed() == 7
    assert cli(run=False, seed_everything_default=False).config.seed_everything is False
    assert isinstance(cli(run=False, seed_everything_default=True).config.seed_everything, int)


def test_args_as_a_dict_hooks_and_links():
    class Linked(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("data.width", "model.width")
            parser.add_argument("--note", default="none")

        def before_instantiate_classes(self):
            self.order = ["before"]

        def after_instantiate_classes(self):
            self.order.append(type(self.model).__name__)

    run = Linked(Regressor, RandomData, run=False, args={"data": {"width": 6}, "note": "hi"})
    assert run.model.layer.in_features == 6 and run.config.note == "hi" and run.order == ["before", "Regressor"]


def test_environment_variables_only_when_asked(monkeypatch):
    monkeypatch.setenv("PL_TRAINER__MAX_EPOCHS", "4")
    assert cli(run=False).trainer.max_epochs == 1
    assert cli(run=False, parser_kwargs={"default_env": True}).trainer.max_epochs == 4


def test_trainer_defaults_callbacks_are_always_added_and_parser_kwargs_per_subcommand():
    from stoker.callbacks import LearningRateMonitor

    Path("fit.yaml").write_text("trainer:\n  max_epochs: 3\n")
    run = cli(run=False, trainer_defaults={**QUIET, "callbacks": LearningRateMonitor()})
    assert any(isinstance(c, LearningRateMonitor) for c in run.trainer.callbacks)
    run = cli("fit", "--trainer.logger=false", parser_kwargs={"fit": {"default_config_files": ["fit.yaml"]}})
    assert run.trainer.max_epochs == 3 and run.trainer.global_step == 12


def test_a_script_run_as_a_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")]))
    done = run_python([str(SCRIPT), "fit", "--trainer.max_epochs=1", "--model.lr=0.02",
                       "--trainer.enable_progress_bar=false", "--trainer.default_root_dir=out"], cwd=tmp_path, env=env,
                      timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    [config] = (tmp_path / "out").rglob("config.yaml")
    assert yaml.safe_load(config.read_text())["model"]["lr"] == 0.02


def test_import_stoker_does_not_import_jsonargparse_and_its_absence_names_the_extra():
    code = ("import sys; import stoker, stoker.cli; assert 'jsonargparse' not in sys.modules\n"
            "sys.modules['jsonargparse'] = None\n"
            "try:\n    from stoker.cli import LightningCLI\nexcept ModuleNotFoundError as e:\n    print(e)\n")
    done = run_python(["-c", code], env=dict(os.environ, PYTHONPATH=str(SCRIPT.parents[2])), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install 'stoker[cli]'" in done.stdout
