"""Lightning's callback module paths (``pytorch_lightning.callbacks.<module>`` renamed ``stoker.callbacks.<module>``)
are the modules the callbacks live in, under a second name."""

from __future__ import annotations

import importlib

import pytest

import stoker

FACES = {  # Lightning's module -> (stoker's module, the class a script imports from it)
    "callback": ("base", "Callback"),
    "throughput_monitor": ("throughput", "ThroughputMonitor"),
    "stochastic_weight_avg": ("swa", "StochasticWeightAveraging"),
    "model_summary": ("summary", "ModelSummary"),
    "gradient_accumulation_scheduler": ("accumulation_scheduler", "GradientAccumulationScheduler"),
    "on_exception_checkpoint": ("on_exception", "OnExceptionCheckpoint"),
    "model_checkpoint": ("checkpoint", "ModelCheckpoint"),
    # the modules whose names stoker shares with Lightning
    "lr_monitor": ("lr_monitor", "LearningRateMonitor"),
    "timer": ("timer", "Timer"),
    "prediction_writer": ("prediction_writer", "BasePredictionWriter"),
    "lambda_function": ("lambda_function", "LambdaCallback"),
    "early_stopping": ("early_stopping", "EarlyStopping"),
}


@pytest.mark.parametrize("lightning_name", sorted(FACES))
def test_the_lightning_path_is_the_callbacks_own_module(lightning_name, monkeypatch):
    core_name, class_name = FACES[lightning_name]
    face = importlib.import_module(f"stoker.callbacks.{lightning_name}")
    core = importlib.import_module(f"stoker.callbacks.{core_name}")
    assert face is core and getattr(face, class_name) is getattr(stoker, class_name)
    # what a script patches by Lightning's path reaches the module the callback runs in
    monkeypatch.setattr(f"stoker.callbacks.{lightning_name}.__stoker_probe__", 1, raising=False)
    assert core.__stoker_probe__ == 1


def test_importing_stoker_loads_none_of_the_faces():
    from tests.helpers.dist_spawn import base_env
    from tests.helpers.forkserver import run_python  # a process without stoker (torch is imported: not in question)

    code = ("import sys, stoker, stoker.callbacks; "
            "print(sorted(m for m in sys.modules if m.startswith('stoker.callbacks.') and m.split('.')[-1] in "
            f"{sorted(set(FACES) - {v[0] for v in FACES.values()})!r}))")
    done = run_python(["-c", code], env=base_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
