"""How the docs' code blocks are run: a Sybil parser for every fenced block of a Markdown page.

Each page is one document with one namespace, so a page can build its example block by block. The fence's
language says what happens to a block:

- ``python``: executed, in order, in the page's namespace (the test has moved into a temporary folder first).
  A block preceded by ``<!-- not-run: why -->`` is compiled and its ``stoker`` imports are resolved, but not run;
  the page itself must say why in its text (the marker's reason is for the test's reader).
- ``<!-- invisible-code-block: python ... -->``: executed like a ``python`` block, shown to nobody; pages use them
  to check what the prose claims (a file that a run writes, a number it prints).
- ``bash``: commands. Scripts of this repository (``examples/``, ``benchmarks/``) must exist and take every
  ``--flag`` given to them; the flags given to ``stoker launch`` must be flags it defines.
- ``text``: output or a file layout, shown as is.

Any other language fails the test, so a new kind of block gets a rule here before it gets onto a page.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from sybil import Document, Example, Region
from sybil.evaluators.python import pad
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = "__docs_not_run__"
_NOT_RUN_MARKER = re.compile(r"^<!-- not-run: (?P<reason>[^\n]+?) -->[ \t]*\n", re.MULTILINE)


def run_python(example: Example) -> None:
    """Executes the block in the page's namespace, or only compiles it and resolves its imports when marked."""
    __tracebackhide__ = True
    reason = example.namespace.pop(NOT_RUN, None)
    source = pad(example.parsed, example.line + example.parsed.line_offset)
    code = compile(source, example.path, "exec", dont_inherit=True)
    if reason is None:
        exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)
    else:
        _resolve_stoker_imports(ast.parse(source), example)


def _resolve_stoker_imports(tree: ast.AST, example: Example) -> None:
    """A block that is not run still names real things: each ``from stoker... import X`` must import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "stoker":
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{example.path}:{node.lineno}: {node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "stoker":
                    importlib.import_module(alias.name)


def mark_not_run(example: Example) -> None:
    assert NOT_RUN not in example.namespace, f"{example.path}:{example.line}: two not-run markers in a row"
    example.namespace[NOT_RUN] = example.parsed


def check_commands(example: Example) -> None:
    """Shell blocks are not run (they install, launch on GPUs, or take minutes); what they name must exist."""
    __tracebackhide__ = True
    assert NOT_RUN not in example.namespace, f"{example.path}:{example.line}: not-run marks python blocks only"
    text = example.parsed.replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for command in line.split("&&"):
            _check_command(shlex.split(command), f"{example.path}:{example.line}")


def _check_command(words: list[str], where: str) -> None:
    scripts = [i for i, w in enumerate(words) if w.startswith(("examples/", "benchmarks/")) and w.endswith(".py")]
    for i in scripts:
        script = ROOT / words[i]
        assert script.is_file(), f"{where}: {words[i]} does not exist"
        source = script.read_text()
        for flag in (w.split("=")[0] for w in words[i + 1:] if w.startswith("--")):
            # the source names most flags literally; a flag built from a table shows in --help (slower: it runs)
            assert f'"{flag}"' in source or re.search(rf"{flag}\b", _help(words[i])), \
                f"{where}: {words[i]} has no flag {flag}"
    if words[:2] == ["stoker", "launch"]:
        end = scripts[0] if scripts else next((i for i, w in enumerate(words) if w.endswith(".py")), len(words))
        for flag in (w.split("=")[0] for w in words[2:end] if w.startswith("--")):
            assert re.search(rf"{flag}\b", _help("-m", "stoker", "launch")), \
                f"{where}: stoker launch has no flag {flag}"


@functools.cache
def _help(*command: str) -> str:
    """A command's ``--help``, as a user would read it (some flags are built from a table, not written out)."""
    return subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, check=True,
                          cwd=ROOT, timeout=120).stdout


def show_only(example: Example) -> None:
    assert NOT_RUN not in example.namespace, f"{example.path}:{example.line}: not-run marks python blocks only"


def unknown_language(language: str):  # noqa: ANN201 - an evaluator
    def fail(example: Example) -> None:
        raise AssertionError(f"{example.path}:{example.line}: a ```{language} block; tests/docs/blocks.py runs "
                             "python, checks bash and shows text: pick one, or give the new language a rule there")
    return fail


EVALUATORS = {"python": run_python, "bash": check_commands, "text": show_only}


class FencedBlocks:
    """Every fenced block of a page (any language) and every invisible Python block, with its evaluator."""

    def __init__(self) -> None:
        self.lexers = LexerCollection([
            FencedCodeBlockLexer(language=r".*", mapping={"language": "arguments", "source": "source"}),
            DirectiveInHTMLCommentLexer(directive="invisible-code-block", arguments="python"),
        ])

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexers(document):
            language = region.lexemes["arguments"].strip()
            region.parsed = region.lexemes["source"]
            region.evaluator = EVALUATORS.get(language) or unknown_language(language)
            yield region


def not_run_markers(document: Document) -> Iterable[Region]:
    for match in _NOT_RUN_MARKER.finditer(document.text):
        yield Region(match.start(), match.end(), match.group("reason"), mark_not_run)


def parse(page: Path) -> Document:
    document = Document.parse(str(page), FencedBlocks(), not_run_markers)
    document.namespace["__name__"] = "docs_page"
    return document
