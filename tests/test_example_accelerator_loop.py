"""Runs ``examples/accelerator_loop.py`` as a script, in full precision and in fp16, and checks that it learns."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.forkserver import parent_environ
from tests.helpers.launches import Launches, session_run

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "accelerator_loop.py"
TINY = ["--samples", "256", "--batch-size", "16", "--epochs", "3", "--cpu"]

# One interpreter runs the script twice as __main__ with each command line: start-up (importing torch, and the
# torch._dynamo that torch.optim pulls in) is most of a run's cost, so this halves the test's time.
_RUNNER = """
import runpy, sys
for mp in ("no", "fp16"):
    sys.argv = [{script!r}, "--mixed-precision", mp, *{tiny!r}]
    print("=== run", mp, flush=True)
    runpy.run_path({script!r}, run_name="__main__")
"""


@session_run("accelerator_loop", "test_example_runs_and_learns_in_full_precision_and_fp16")
def _run_example(tmp: Path) -> subprocess.CompletedProcess:
    code = _RUNNER.format(script=str(SCRIPT), tiny=TINY)
    return subprocess.run([sys.executable, "-c", code], env=parent_environ(), capture_output=True, text=True,
                          timeout=300)


def test_example_runs_and_learns_in_full_precision_and_fp16(session_launches: Launches) -> None:
    """The script run in a subprocess started with the other example scripts' (``tests/helpers/launches.py``)."""
    proc = session_launches.result("accelerator_loop")
    assert proc.returncode == 0, proc.stderr
    outputs = dict(re.findall(r"=== run (\w+)\n(.*?)(?==== run|\Z)", proc.stdout, flags=re.S))
    assert sorted(outputs) == ["fp16", "no"]
    for mp, out in outputs.items():
        assert f"mixed_precision={mp} gradient_accumulation_steps=2" in out
        epochs = [float(v) for v in re.findall(r"epoch \d+: loss (\S+)", out)]
        final = float(re.search(r"final loss (\S+)", out).group(1))
        assert len(epochs) == 3 and final == epochs[-1] and math.isfinite(final)
        assert epochs[-1] < 0.9 * epochs[0], out  # it learns
        # 16 batches an epoch in windows of 2: 8 optimizer steps per epoch (fp16 may skip a few that overflow).
        steps = int(re.findall(r"optimizer steps so far: (\d+)", out)[-1])
        assert steps == 24 if mp == "no" else 20 <= steps <= 24, out

