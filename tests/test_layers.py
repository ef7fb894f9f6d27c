"""The package's structure, read from its own import statements (every one, ``TYPE_CHECKING`` and function-local
imports included): the Trainer, callbacks and loggers take engine names only from ``stoker.accelerator`` (never a
submodule), no two modules import each other (directly or round a circle), no layer imports one above it
(engine < callbacks < trainer < the package face), and no file is over 400 lines.

Known leftovers of the restructuring are listed below; the checks fail on anything new. Remove an entry when it is
fixed (each list only shrinks).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stoker"
MAX_LINES = 400
UPPER = ("trainer", "callbacks", "loggers")  # the layers that may use the engine's face only
# The core's layers, then the peers' surfaces (compat) and their module-path faces (utils): compat may import the
# core, the core never imports compat.
RANK = {"loggers": 0, "accelerator": 1, "callbacks": 2, "trainer": 3, "compat": 4, "utils": 5}
CORE = ("loggers", "accelerator", "callbacks", "trainer")

KNOWN_CIRCLES: set[frozenset[str]] = set()
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_OVER: set[str] = set()


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``package`` (a package is named by its folder)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(package: Path) -> dict[str, set[str]]:
    """Module -> the package's own modules it imports (``from .x import name`` counts as ``x``, or as ``x.name``
    when that is a module)."""
    files = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                    module = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target not in files and "." in target:
                    target = target.rpartition(".")[0]
                if target in files and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The groups of modules that import each other, directly or round a loop (strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.add(frozenset(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "face"


def engine_internals(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of ``stoker.accelerator.<submodule>`` from the Trainer, callbacks or loggers."""
    return {(m, t) for m, ts in graph.items() for t in ts
            if layer(m) in UPPER and layer(t) == "accelerator" and t != "stoker.accelerator"}


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports that run against the layers (a lower layer importing a higher one)."""
    return {(m, t) for m, ts in graph.items() for t in ts
            if layer(m) != layer(t) and layer(m) in RANK and layer(t) in RANK and RANK[layer(t)] > RANK[layer(m)]}


def over_long(package: Path) -> set[str]:
    return {path.relative_to(package.parent).as_posix() for path in modules(package).values()
            if len(path.read_text().splitlines()) > MAX_LINES}


def test_trainer_callbacks_and_loggers_import_only_the_engine_face() -> None:
    found = engine_internals(imports(PACKAGE))
    assert not found, ("import these names from `stoker.accelerator` (export them in its __init__ if needed), not "
                       f"from its submodules: {sorted(found)}")


def test_the_engine_has_no_import_circle() -> None:
    found = [sorted(c) for c in circles(imports(PACKAGE)) if any(m.startswith("stoker.accelerator") for m in c)]
    assert not found, f"engine modules that import each other: {found}"


def test_no_new_import_circles() -> None:
    new = circles(imports(PACKAGE)) - KNOWN_CIRCLES
    assert not new, f"modules that import each other: {[sorted(c) for c in new]}"


def test_no_new_upward_imports() -> None:
    new = upward(imports(PACKAGE)) - KNOWN_UPWARD
    assert not new, f"imports that run up the layers (engine < callbacks < trainer < face): {sorted(new)}"


FACES = ("stoker.logging", "stoker.local_sgd", "stoker.tracking")  # top-level faces over compat modules


def test_the_core_never_imports_the_compat_surfaces() -> None:
    graph = imports(PACKAGE)
    found = {(m, t) for m, ts in graph.items() for t in ts
             if layer(m) in CORE and (layer(t) in ("compat", "utils") or t in FACES)}
    assert not found, f"core modules that import a compat surface: {sorted(found)}"


def test_no_new_files_over_400_lines() -> None:
    new = over_long(PACKAGE) - KNOWN_OVER
    assert not new, f"files over {MAX_LINES} lines (split them by responsibility): {sorted(new)}"


def test_the_checks_find_each_kind_of_violation(tmp_path: Path) -> None:
    """The checker itself, on a made-up package: a circle, an engine submodule imported from above, an upward
    import and a long file are all reported; a clean import is not."""
    pkg = tmp_path / "stoker"
    files = {
        "__init__.py": "",
        "accelerator/__init__.py": "from .a import A\n",
        "accelerator/a.py": "from .b import B\nA = 1\n",
        "accelerator/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nB = 2\n",
        "callbacks/__init__.py": "",
        "callbacks/c.py": "def f():\n    from stoker.accelerator.a import A\n    from ..trainer import t\n",
        "trainer/__init__.py": "",
        "trainer/t.py": "from stoker.accelerator import A\n" + "x = 1\n" * (MAX_LINES + 1),
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    graph = imports(pkg)
    assert circles(graph) == {frozenset({"stoker.accelerator.a", "stoker.accelerator.b"})}
    assert engine_internals(graph) == {("stoker.callbacks.c", "stoker.accelerator.a")}
    assert upward(graph) == {("stoker.callbacks.c", "stoker.trainer.t")}
    assert over_long(pkg) == {"stoker/trainer/t.py"}
    assert "stoker.accelerator" in graph["stoker.trainer.t"]


def test_checkpoint_io_leaves_sharding_to_the_strategy() -> None:
    """How weights and optimizer state are saved is the strategy's (``checkpoint_files_hold``,
    ``save_checkpoint_shards``, ...): checkpoint I/O never asks whether parameters are sharded, nor imports the
    Accelerator."""
    graph = imports(PACKAGE)
    for path in sorted((PACKAGE / "accelerator" / "checkpointing").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "shards_parameters" not in names, f"{path.name} branches on shards_parameters"
        module = "stoker.accelerator.checkpointing" + ("" if path.stem == "__init__" else f".{path.stem}")
        assert "stoker.accelerator.accelerator" not in graph[module], f"{path.name} imports the Accelerator"
