"""Every code block of the docs site and of README.md, run (or checked) as ``tests/docs/blocks.py`` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import NOT_RUN, ROOT, parse

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_block_of_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # blocks write runs/, checkpoints and exports into the working directory
    document = parse(page)
    examples = list(document.examples())
    for example in examples:
        example.evaluate()
    assert NOT_RUN not in document.namespace, f"{page}: a not-run marker with no python block after it"
