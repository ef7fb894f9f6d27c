"""The README is the front page: its two commands stay the ones a newcomer and CI run, and its examples work.

(Every block of the README also runs in ``test_code_blocks.py``; these tests check what each example leaves behind
and that running it twice resumes.)
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = next(b for b in _python_blocks() if "accelerator.prepare(" in b and '"my_model"' in b)  # the Accelerator one
    monkeypatch.chdir(tmp_path)  # it saves "my_model" in the working directory
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert (tmp_path / "my_model" / "model.safetensors").is_file()


def test_readme_test_command_is_the_one_ci_runs() -> None:
    command = 'pip install -e ".[test]" && python -m pytest -q'
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in README.read_text()
    assert any(line.strip() == command for line in ci.splitlines())
    assert "pip install -e . && python examples/char_lm.py" in README.read_text()


def test_readme_trainer_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    code = next(b for b in _python_blocks() if "Trainer(" in b and "class " in b)  # the Trainer one
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert not [w for w in caught if "logging interval" in str(w.message)]  # its step values reach the logger
    assert "after 21 optimizer steps" in capsys.readouterr().out  # 14 micro-batches per epoch, windows of 2
    assert (tmp_path / "runs" / "quick" / "stoker_logs" / "version_0" / "checkpoints" / "epoch=2-step=21.ckpt").is_dir()
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # resumes: max_epochs already reached
    assert "after 21 optimizer steps" in capsys.readouterr().out


def test_readme_is_a_front_page() -> None:
    """Under ~150 lines: what stoker is, the two commands, two examples and the way into the docs."""
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link
