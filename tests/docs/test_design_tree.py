"""The tree on the design page ("How it is built") lists exactly the package's folders and modules."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _listed() -> set[str]:
    page = (ROOT / "docs" / "design.md").read_text()
    block = re.search(r"## The tree\n.*?```text\n(.*?)```", page, re.S)
    assert block, "docs/design.md has no tree block under '## The tree'"
    paths, stack = set(), []
    for line in block.group(1).splitlines():
        name = line.split()[0]
        depth = (len(line) - len(line.lstrip(" "))) // 2
        stack[depth:] = [name.rstrip("/")]
        paths.add("/".join(stack) + ("/" if name.endswith("/") else ""))
    return paths


def _real() -> set[str]:
    found = set()
    for path in (ROOT / "stoker").rglob("*.py"):
        rel = path.relative_to(ROOT)
        found.add(str(rel))
        for parent in rel.parents:
            if str(parent) != ".":
                found.add(f"{parent}/")
    return found


def test_the_design_page_lists_every_module_and_nothing_else() -> None:
    listed, real = _listed(), _real()
    assert sorted(real - listed) == [], "modules missing from docs/design.md's tree"
    assert sorted(listed - real) == [], "docs/design.md's tree lists modules that do not exist"
