"""``stoker launch`` settings (flags, Accelerate config files, torchrun's command line, the environment it sets),
the Accelerator picking them up, ``stoker env``, and the console script's entry point. In-process and fast; the real
launches are in test_cli_launch.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from stoker import Accelerator
from stoker.compat.accelerate.environment import settings_from_environment
from stoker.cli import main
from stoker.cli.config import read_accelerate_config
from stoker.cli.launch import add_parser, launch_environment, resolve, torchrun_args

REPO = Path(__file__).resolve().parents[1]
LAUNCH_VARS = ("STOKER_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION", "STOKER_GRADIENT_ACCUMULATION_STEPS",
               "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "STOKER_USE_CPU", "ACCELERATE_USE_CPU")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["launch", *argv])


def test_flags_map_onto_torchrun_one_machine() -> None:
    args = _parse("--num_processes", "4", "--cpu", "train.py", "--lr", "3e-4", "--cpu")
    assert args.training_script_args == ["--lr", "3e-4", "--cpu"]  # everything after the script is the script's
    settings = resolve(args, gpu_count=0)
    assert torchrun_args(settings, "train.py", ["--lr", "3e-4"]) == [
        "--nproc-per-node=4", "--nnodes=1", "--max-restarts=0", "--monitor-interval=0.1", "--standalone",
        "train.py", "--lr", "3e-4"]
    fixed_port = resolve(_parse("--num-processes=2", "--main_process_port", "29600", "-m", "pkg.train"), gpu_count=0)
    assert torchrun_args(fixed_port, "pkg.train", [], module=True)[4:] == [
        "--master-addr=127.0.0.1", "--master-port=29600", "--module", "pkg.train"]


def test_flags_map_onto_torchrun_several_machines() -> None:
    args = _parse("--num_processes", "8", "--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                  "10.0.0.1", "--max_restarts", "2", "train.py")
    assert torchrun_args(resolve(args, gpu_count=4), "train.py", []) == [
        "--nproc-per-node=4", "--nnodes=2", "--max-restarts=2", "--monitor-interval=0.1", "--node-rank=1",
        "--master-addr=10.0.0.1", "--master-port=29500", "train.py"]
    c10d = resolve(_parse("--num_processes=2", "--num_machines=2", "--main_process_ip=h", "--main_process_port=7",
                          "--rdzv_backend=c10d", "t.py"), gpu_count=1)
    assert torchrun_args(c10d, "t.py", [])[4:7] == ["--rdzv-backend=c10d", "--rdzv-endpoint=h:7", "--rdzv-id=stoker"]


def test_default_process_count_follows_the_gpus() -> None:
    assert resolve(_parse("t.py"), gpu_count=0)["num_processes"] == 1
    assert resolve(_parse("t.py"), gpu_count=4)["num_processes"] == 4
    assert resolve(_parse("--multi_gpu", "t.py"), gpu_count=2)["num_processes"] == 2
    assert resolve(_parse("--cpu", "t.py"))["num_processes"] == 1  # --cpu never counts GPUs


@pytest.mark.parametrize("argv, message", [
    (["--num_processes", "3", "--num_machines", "2"], "multiple of --num_machines 2"),
    (["--num_processes", "0"], "must be >= 1"),
    (["--num_machines", "2", "--num_processes", "2"], "needs --main_process_ip"),
    (["--num_machines", "2", "--machine_rank", "2", "--main_process_ip", "h", "--num_processes", "2"],
     r"--machine_rank 2 must be in 0..1"),
    (["--mixed_precision", "fp8"], "expected one of no, fp16, bf16"),
    (["--gradient_accumulation_steps", "0"], "expected an integer >= 1"),
    (["--cpu", "--multi_gpu"], "contradict"),
    (["--multi_gpu"], "no GPU is visible"),
    (["--rdzv_backend", "etcd"], "expected 'static' or 'c10d'"),
])
def test_bad_settings_are_clear_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(_parse(*argv, "t.py"), gpu_count=0)


def test_bad_settings_exit_2_before_starting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--num_processes", "3", "--num_machines", "2", "t.py"]) == 2
    assert "error: stoker launch: --num_processes 3" in capsys.readouterr().err


def test_accelerate_config_file_keys_and_flags_override_them(tmp_path: Path, capsys) -> None:
    config = tmp_path / "default_config.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\ndowncast_bf16: 'no'\n"
        "machine_rank: 0\nmain_training_function: main\nmixed_precision: bf16\nnum_machines: 1\n"
        "num_processes: 4\nrdzv_backend: static\nsame_network: true\ntpu_env: []\nuse_cpu: false\n"
        "gpu_ids: all\ndynamo_config:\n  dynamo_backend: INDUCTOR\nfsdp_config: {}\n"
    )
    settings, ignored = read_accelerate_config(config)
    assert settings == {"num_processes": 4, "num_machines": 1, "machine_rank": 0, "mixed_precision": "bf16",
                        "cpu": True, "rdzv_backend": "static", "same_network": True}
    assert ignored == ["dynamo_config"]  # set, but chosen in the script in stoker (empty fsdp_config is not)
    settings = resolve(_parse("--config_file", str(config), "--num_processes", "2", "t.py"), gpu_count=0)
    assert (settings["num_processes"], settings["mixed_precision"], settings["cpu"]) == (2, "bf16", True)
    assert "ignoring dynamo_config" in capsys.readouterr().err
    json_config = tmp_path / "config.json"  # Accelerate also writes JSON configs
    json_config.write_text(json.dumps({"num_processes": 3, "mixed_precision": "fp16", "use_cpu": True}))
    assert read_accelerate_config(json_config)[0] == {"num_processes": 3, "mixed_precision": "fp16", "cpu": True}


@pytest.mark.parametrize("text, message", [
    ("distributed_type: DEEPSPEED\n", "DeepSpeed is not supported"),
    ("compute_environment: AMAZON_SAGEMAKER\n", "use LOCAL_MACHINE"),
    ("- a list\n", "expected a mapping"),
    ("num_processes: [\n", "not valid YAML"),
])
def test_config_files_stoker_cannot_launch_are_refused(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_accelerate_config(config)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_accelerate_config(tmp_path / "missing.yaml")


def test_launch_environment_sets_stoker_and_accelerate_names() -> None:
    env = launch_environment({"mixed_precision": "BF16", "gradient_accumulation_steps": 4, "cpu": True,
                              "gpu_ids": "0, 1", "num_cpu_threads_per_process": 2})
    assert env == {"STOKER_MIXED_PRECISION": "bf16", "ACCELERATE_MIXED_PRECISION": "bf16",
                   "STOKER_GRADIENT_ACCUMULATION_STEPS": "4", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4",
                   "STOKER_USE_CPU": "true", "ACCELERATE_USE_CPU": "true", "CUDA_VISIBLE_DEVICES": "0,1",
                   "OMP_NUM_THREADS": "2"}
    assert launch_environment({"num_processes": 2}) == {}  # nothing given, nothing changed


def test_accelerator_takes_the_environment_and_explicit_arguments_win(monkeypatch) -> None:
    assert settings_from_environment(None, None, False) == ("no", 1, False)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # what `accelerate launch` sets works too
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    assert settings_from_environment(None, None, False) == ("fp16", 3, True)
    monkeypatch.setenv("STOKER_MIXED_PRECISION", "bf16")  # stoker's own name first
    accelerator = Accelerator()
    assert (accelerator.mixed_precision, accelerator.gradient_accumulation_steps) == ("bf16", 3)
    assert str(accelerator.device) == "cpu"
    explicit = Accelerator(mixed_precision="no", gradient_accumulation_steps=1)
    assert (explicit.mixed_precision, explicit.gradient_accumulation_steps) == ("no", 1)
    monkeypatch.setenv("STOKER_GRADIENT_ACCUMULATION_STEPS", "four")
    with pytest.raises(ValueError, match="STOKER_GRADIENT_ACCUMULATION_STEPS='four' is not a number"):
        Accelerator()


def test_stoker_env_reports_versions_devices_and_backends(capsys, monkeypatch) -> None:
    import torch

    monkeypatch.setenv("STOKER_MIXED_PRECISION", "bf16")
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    assert f"- torch: {torch.__version__}" in text and "- stoker: 0.1.0" in text and "- torchdata: " in text
    assert f"- CUDA available: {torch.cuda.is_available()}" in text and "- MPS available: " in text
    assert "- Distributed backends: gloo" in text and "STOKER_MIXED_PRECISION=bf16" in text
    assert main(["env", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["packages"]["torch"] == torch.__version__ and facts["distributed"]["gloo"] is True
    assert facts["optional"]["wandb"] and facts["optional"]["mlflow"]


def test_pyproject_declares_the_console_script_and_the_extras() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["stoker"] == "stoker.cli:main"
    assert project["optional-dependencies"]["wandb"] == ["wandb>=0.19.10"]
    assert project["optional-dependencies"]["mlflow"] == ["mlflow>=2.8"]
    assert any(dep.startswith("pyyaml") for dep in project["dependencies"])


def test_no_command_prints_help(capsys) -> None:
    assert main([]) == 2
    assert "{launch,env}" in capsys.readouterr().out
