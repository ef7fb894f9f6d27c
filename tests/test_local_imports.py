"""An import statement inside a function makes the name it binds local to the *whole* function, so a use of that
name above the import fails with UnboundLocalError, even when the module imports the same name at the top.

Found on a GPU: ``DDPStrategy.setup_environment`` called ``torch.cuda.set_device`` and, further down,
``import torch._dynamo``, which bound ``torch`` locally: every DDP or FSDP run on CUDA failed at start. CPU runs
never reached that line. This check reads every function of the package, the tests, the benchmarks and the
examples, and fails on any name read before an import statement of the same function binds it.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("stoker", "tests", "benchmarks", "examples")


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``function``'s own body (not its signature: annotations are not evaluated here), without those
    of functions, lambdas or classes defined inside it."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # a scope of its own (its decorators and defaults are rare enough to leave out)
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _bound_by_import(node: ast.Import | ast.ImportFrom) -> list[str]:
    names = []
    for alias in node.names:
        if alias.asname:
            names.append(alias.asname)
        elif isinstance(node, ast.Import):
            names.append(alias.name.split(".")[0])  # `import a.b.c` binds `a`
        elif alias.name != "*":
            names.append(alias.name)
    return names


def reads_before_local_import(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: function reads NAME before its import at line L`` for each such read in ``source``."""
    problems = []
    for function in ast.walk(ast.parse(source, filename)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = _own_nodes(function)
        first_import: dict[str, tuple[int, int]] = {}
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in _bound_by_import(node):
                    where = (node.lineno, node.col_offset)
                    first_import[name] = min(first_import.get(name, where), where)
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in first_import:
                line, col = first_import[node.id]
                if (node.lineno, node.col_offset) < (line, col):
                    problems.append(f"{filename}:{node.lineno}: {function.name} reads {node.id} before its import "
                                    f"at line {line}")
    return problems


def test_no_function_reads_a_name_before_its_own_import_binds_it() -> None:
    problems = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            problems += reads_before_local_import(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, ("a function-local import makes the name local to the whole function; use "
                          "importlib.import_module for a side-effect import, or move the import up:\n"
                          + "\n".join(problems))


def test_the_check_finds_the_setup_environment_pattern() -> None:
    planted = textwrap.dedent("""
        import torch

        def setup(device):
            if device.type == "cuda":
                torch.cuda.set_device(device)
            import torch._dynamo

        def fine():
            import torch.nn
            return torch.nn.Linear(1, 1)

        def nested_is_its_own_scope():
            def inner():
                import torch
                return torch
            return torch, inner
    """)
    assert reads_before_local_import(planted) == ["<source>:6: setup reads torch before its import at line 7"]


def test_ddp_setup_environment_reaches_set_device_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The behaviour itself, without a GPU: the strategy believes it runs on CUDA and must get as far as
    ``torch.cuda.set_device`` (stopped there, before any process group is made)."""
    from stoker.accelerator.distributed import ddp

    class Reached(Exception):
        pass

    def set_device(device: torch.device) -> None:
        raise Reached(str(device))

    monkeypatch.setattr(ddp, "default_device", lambda cpu, index: torch.device("cuda", index))
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    with pytest.raises(Reached, match="cuda:0"):
        ddp.DDPStrategy().setup_environment(cpu=False)
