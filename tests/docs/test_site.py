"""The docs site builds with ``mkdocs build --strict`` (broken links, anchors and API references fail it), and
every ``stoker.…`` name the pages mention exists and is public."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Module paths a user imports from: the package, its top-level packages, and the faces Lightning's and
# Accelerate's import lines need after the rename. Anything deeper is an internal path that moves.
PUBLIC_MODULES = {
    "stoker", "stoker.accelerator", "stoker.trainer", "stoker.callbacks", "stoker.loggers", "stoker.cli",
    "stoker.utils", "stoker.utilities", "stoker.utilities.rank_zero", "stoker.utilities.types",
    "stoker.utilities.model_summary", "stoker.utilities.warnings", "stoker.utilities.seed", "stoker.utilities.parsing",
    "stoker.utilities.parameter_tying",
    "stoker.strategies", "stoker.profilers", "stoker.logging", "stoker.local_sgd", "stoker.tracking", "stoker.tuner", "stoker.tuner.tuning",
}
NOT_PYTHON = {"stoker.version"}  # the MLflow tag the MLflow logger sets, not a Python name
NAME = re.compile(r"(?<![\w./-])stoker(?:\.[A-Za-z_]\w*)+")


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    reference = (tmp_path / "reference" / "trainer" / "index.html").read_text()
    assert "max_epochs" in reference and "training_step" in reference  # generated from the docstrings
    for page in (ROOT / "docs").rglob("*.md"):
        built = tmp_path / page.relative_to(ROOT / "docs").with_suffix("")
        assert (built / "index.html").is_file() or page.name == "index.md", page


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: object = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise AssertionError(dotted)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_stoker_name_on_the_page_exists_and_is_public(page: Path) -> None:
    for dotted in sorted(set(NAME.findall(page.read_text())) - NOT_PYTHON):
        parts = dotted.split(".")
        cut = max(n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in PUBLIC_MODULES)
        if cut < len(parts):
            assert not _is_module(".".join(parts[:cut + 1])), f"{page.name}: {dotted} names an internal module"
        _resolve(dotted)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False
