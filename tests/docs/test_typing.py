"""stoker ships ``py.typed`` (PEP 561), so a user's ``mypy --strict`` reads its annotations.

The package is built as a wheel from a copy of the tree and unpacked into a folder on ``PYTHONPATH``, where mypy
treats it as an installed package: without ``py.typed`` mypy says "module is installed, but missing library stubs
or py.typed marker" and the check fails. (An editable install, ``pip install -e .``, is not found by mypy at all:
setuptools puts an import hook there, not a path.)

Only stoker is analysed: torch and the other third-party packages are not followed (``follow_imports = skip``), so
the check takes seconds instead of the ~50 s torch's own annotations cost. Errors inside stoker itself are not
shown either (mypy is silent on installed packages); ``tests/docs/typing/user_train.py`` is the user's file.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers.forkserver import parent_environ
from tests.helpers.launches import Launches, session_run

ROOT = Path(__file__).resolve().parents[2]
USER_FILE = Path(__file__).parent / "typing" / "user_train.py"
NOT_FOLLOWED = ["torch", "numpy", "safetensors", "torchdata", "torchmetrics", "tensorboard", "tqdm", "yaml", "wandb",
                "mlflow"]


def _wheel(tmp: Path) -> Path:
    """``pip wheel`` of a copy of the tree (an in-tree build would leave build/ and egg-info behind)."""
    source = tmp / "source"
    shutil.copytree(ROOT / "stoker", source / "stoker", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    # without setuptools here (Python 3.12+ venvs lack it), pip fetches it into an isolated build environment
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(tmp / "dist"),
                    str(source)], env=parent_environ(), check=True, timeout=300)
    return next((tmp / "dist").glob("stoker-*.whl"))


@session_run("mypy_strict", "test_the_wheel_ships_py_typed_and_a_users_file_passes_mypy_strict")
def _build_and_check(tmp_path: Path) -> tuple[list[str], subprocess.CompletedProcess]:
    """The wheel's file names and mypy's run on the user's file: subprocesses only, so a background run of the
    session (tests/helpers/launches.py)."""
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "site")
    shutil.copy(USER_FILE, tmp_path / "user_train.py")
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\n\n"
        + "".join(f"[mypy-{name}.*]\nfollow_imports = skip\n\n[mypy-{name}]\nfollow_imports = skip\n\n"
                  for name in NOT_FOLLOWED)
    )
    env = {**parent_environ(), "PYTHONPATH": str(tmp_path / "site")}  # stoker as installed, not this checkout
    env.pop("MYPYPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(tmp_path / "cache"),
         "user_train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    return names, proc


@pytest.mark.slow
def test_the_wheel_ships_py_typed_and_a_users_file_passes_mypy_strict(session_launches: Launches) -> None:
    names, proc = session_launches.result("mypy_strict")
    assert "stoker/py.typed" in names
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found in 1 source file" in proc.stdout


def test_the_users_file_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The type-checked file is a working script, not just annotations."""
    spec = importlib.util.spec_from_file_location("user_train", USER_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    assert module.fit(str(tmp_path / "runs")) in range(1, 5)  # 8 batches in windows of 2; fp16 may skip some
    assert module.loop() > 0.0


# Every lazy name with a module of its own must be named for type checkers (the ``**`` entries, Accelerate's
# ``accelerate.utils`` names, are typed in ``stoker.utils`` itself).
# The tuner's callbacks live above stoker.callbacks (they run the Trainer): a TYPE_CHECKING import of them there would
# close an import circle, so type checkers find them at stoker.tuner.finders.
NOT_TYPED_YET: set[str] = {"LearningRateFinder", "BatchSizeFinder"}


@pytest.mark.parametrize("init", ["stoker/__init__.py", "stoker/callbacks/__init__.py", "stoker/loggers/__init__.py"])
def test_type_checkers_see_each_lazy_name_from_the_module_it_is_loaded_from(init: str) -> None:
    """A package's ``_LAZY`` table (PEP 562) and its ``if TYPE_CHECKING:`` imports name the same modules, so mypy and
    the API reference see the class a user gets (``stoker.Trainer`` moving to another module must move both)."""
    tree = ast.parse((ROOT / init).read_text())
    lazy = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_LAZY"]:
            lazy = {k.value: v.value for k, v in zip(node.value.keys, node.value.values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}  # ** entries are not lazy
    typed = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.dump(stmt)
                typed.update({alias.asname or alias.name: stmt.module for alias in stmt.names})
    assert lazy, f"{init} has no _LAZY table"
    wrong = {name: (module, lazy.get(name)) for name, module in typed.items() if lazy.get(name) != module}
    assert not wrong, f"{init}: TYPE_CHECKING imports (module, _LAZY's module) disagree: {wrong}"
    assert set(lazy) - set(typed) - NOT_TYPED_YET == set(), f"{init}: lazy names type checkers cannot see"
