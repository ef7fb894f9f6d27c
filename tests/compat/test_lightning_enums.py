"""Lightning's ``GradClipAlgorithmType`` from ``stoker.utilities``: its members work wherever "norm"/"value" do."""

from __future__ import annotations

import stoker.utilities
from stoker import Trainer
from stoker.utilities import GradClipAlgorithmType
from tests.helpers.dist_spawn import base_env
from tests.helpers.forkserver import run_python


def test_members_are_the_algorithm_names_the_trainer_takes():
    assert GradClipAlgorithmType("value") is GradClipAlgorithmType.VALUE and GradClipAlgorithmType.NORM == "norm"
    assert GradClipAlgorithmType.supported_types() == ["norm", "value"]
    assert GradClipAlgorithmType.supported_type("value") and not GradClipAlgorithmType.supported_type("l2")
    trainer = Trainer(gradient_clip_val=0.3, gradient_clip_algorithm=GradClipAlgorithmType.VALUE, logger=False)
    assert (trainer.clip_grad_norm, trainer.clip_grad_value, trainer.gradient_clip_algorithm) == (None, 0.3, "value")
    assert "GradClipAlgorithmType" in stoker.utilities.__all__


def test_the_other_utilities_do_not_load_the_trainer():
    code = ("import sys, stoker.utilities; from stoker.utilities import rank_zero_only; "
            "assert 'stoker.compat.lightning' not in sys.modules; stoker.utilities.GradClipAlgorithmType; "
            "assert 'stoker.compat.lightning' in sys.modules")
    done = run_python(["-c", code], env=base_env(), timeout=120)  # a process without stoker loaded
    assert done.returncode == 0, done.stderr
