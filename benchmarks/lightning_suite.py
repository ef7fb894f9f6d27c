"""Lightning's own tests, run on stoker: how much of Lightning's public behaviour a renamed script gets.

A measurement, not part of the test run. It takes Lightning's test suite at a tag (``tests/tests_pytorch`` and the
demos its tests build on), makes two copies of it in a scratch folder and runs the chosen test files in both:

* ``lightning``: Lightning's tests as they are, on the installed ``pytorch_lightning`` (only the package names of
  the unified ``lightning`` distribution are mapped to the standalone ones: ``lightning.pytorch`` ->
  ``pytorch_lightning``, ``lightning.fabric`` -> ``lightning_fabric``);
* ``stoker``: the same files with the rename a user makes (``lightning.pytorch`` / ``pytorch_lightning`` ->
  ``stoker``) and the demos (``BoringModel`` ...) re-based on stoker's module the same way. Lightning's test
  infrastructure (``conftest.py``, ``helpers/runif.py``) stays Lightning's: it only provides fixtures (its check
  that a test leaves no environment variable behind also allows ``STOKER_GLOBAL_SEED``, the renamed
  ``PL_GLOBAL_SEED`` that ``seed_everything`` writes). Each module-level ``from stoker... import ...`` is wrapped
  in ``try``/``except ImportError``, so a name stoker lacks (a Lightning internal such as a connector's private
  function) fails only the tests that use it, not the whole file at collection.

Every test's outcome under both is written to ``--out`` (JSON), with the table per file printed at the end.
A test is *public* unless its source, a helper it calls (the test file's own, a ``conftest.py`` fixture or helper,
a function of the suite's ``helpers`` modules), reads Lightning's internals (``PRIVATE_HINTS``: the loops' and
connectors' insides, private names, also at the end of an attribute chain, set by name, or read on ``self`` by a
test's subclass of a Lightning class (a private name the file never sets: `inherited_privates`), mocks of Lightning's
modules or ``torch.save``; ``FIXTURE_HINT`` and ``MODULE_PATCH``: a patched private name or module attribute of
Lightning's, such as the device counts a test fakes a GPU machine with); those are counted apart, since a
different framework cannot be expected to pass them, and so is a test that fails on stoker only because its
``pytest.raises(..., match=...)`` got the expected kind of error in stoker's words (the ``wording`` outcome).

Usage (the Lightning source from ``git archive 2.6.5 tests/tests_pytorch src/lightning/pytorch/demos``)::

    python benchmarks/lightning_suite.py --lightning-src /tmp/lt --out /tmp/lt/results.json
    python benchmarks/lightning_suite.py --lightning-src /tmp/lt --files models/test_hooks.py --which stoker

The default file list is the one issue 30 measured (Lightning 2.6.5).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FILES = [
    "models/test_hooks.py",
    "trainer/flags/test_min_max_epochs.py",
    "trainer/flags/test_limit_batches.py",
    "trainer/flags/test_val_check_interval.py",
    "trainer/flags/test_check_val_every_n_epoch.py",
    "trainer/flags/test_fast_dev_run.py",
    "trainer/flags/test_overfit_batches.py",
    "trainer/optimization/test_manual_optimization.py",
    "callbacks/test_early_stopping.py",
    "checkpointing/test_model_checkpoint.py",
    "loggers/test_tensorboard.py",
    "trainer/logging_/test_train_loop_logging.py",
    "trainer/test_dataloaders.py",
    "callbacks/test_gradient_accumulation_scheduler.py",
]

# A test whose source matches one of these reads Lightning's internals rather than its public behaviour.
PRIVATE_HINTS = re.compile(
    r"fit_loop\.|\.epoch_loop|_logger_connector|_results\b|_accelerator_connector|_checkpoint_connector|"
    r"_data_connector|_callback_connector|_signal_connector|\btrainer\._|\bmodel\._|\bcallback\._|"
    r"\bpatch\(\s*[\"'](lightning_fabric|lightning|pytorch_lightning|stoker)\.|mock\.patch\.object\(\s*(Trainer|LightningModule)|"
    r"torch\.save|_TORCH_GREATER|_utilities\.|\.strategy\._|"
    # any object's private attribute or method, also at the end of a chain (`trainer.progress_bar_callback._x`,
    # `bar.progress.columns[-1]._renderable_cache`,
    # a patched "lightning_fabric.utilities.data._num_cpus_available"); not the test's own classes' `self._x`, nor
    # torch's or Python's
    r"(?<![\w.])(?!(?:self|cls)\._)(?!torch\b|os\b|sys\b)[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\]\n]*\])*\._[a-z]\w*|"
    r"patch\.object\([^)]*?,\s*[\"']_[a-z]|"
    # a private name set on a module or object by name (``monkeypatch.setattr(imports, "_RICH_AVAILABLE", False)``)
    r"setattr\(\s*[\w.]+\s*,\s*[\"']_[A-Za-z]")
# How pytest reports a ``pytest.raises(SomeError, match=...)`` whose error was raised with other words.
WORDING = "AssertionError: Regex pattern did not match."
# The packages a private import is read from: Lightning's own, under either flavour's name (not lightning_fabric's).
LIGHTNING_ROOTS = {"stoker", "pytorch_lightning", "lightning"}
INFRA = {"conftest.py", os.path.join("helpers", "runif.py")}


def lightning_names(text: str) -> str:
    """The unified package's names mapped to the standalone packages that are installed."""
    text = re.sub(r"\blightning\.fabric\b", "lightning_fabric", text)
    return re.sub(r"\blightning\.pytorch\b", "pytorch_lightning", text)


def stoker_names(text: str) -> str:
    """A user's rename: Lightning's package -> stoker; the demos -> the stoker copy made beside the tests."""
    text = re.sub(r"\blightning\.pytorch\.core\.optimizer\b", "pytorch_lightning.core.optimizer", text)
    text = re.sub(r"\blightning\.pytorch\.demos\b", "stoker_demos", text)
    text = re.sub(r"\bpytorch_lightning\.demos\b", "stoker_demos", text)
    text = re.sub(r"\blightning\.fabric\b", "lightning_fabric", text)
    text = re.sub(r"\blightning\.pytorch\b", "stoker", text)
    return re.sub(r"\bpytorch_lightning\b(?!\.core\.optimizer)", "stoker", text)


def guarded_imports(text: str) -> str:
    """Each name of a module-level ``from stoker... import ...`` imported on its own, in ``try``/``except ImportError``.

    A name stoker does not have (a Lightning internal such as ``_request_dataloader``, a feature such as the
    ``Tuner``, a logger such as ``CometLogger`` listed beside ``CSVLogger``) then fails only the tests that use it
    (``NameError``), not the other names of its line nor every test of the file at collection.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    for node in reversed(tree.body):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "stoker":
            guarded = []
            for alias in node.names:
                name = alias.name + (f" as {alias.asname}" if alias.asname else "")
                guarded += ["try:\n", f"    from {node.module} import {name}\n", "except ImportError:\n",
                            *_stand_in(alias.asname or alias.name)]
            lines[node.lineno - 1:node.end_lineno] = guarded
    return "".join(lines)


def _stand_in(local: str) -> list[str]:
    """The ``except`` body for a missing name: a class name (``CometLogger``) gets a class whose instances cannot be
    made, so a module-level list or ``parametrize`` naming it still builds and only the tests that use it fail;
    any other name stays unbound (``NameError`` where it is used)."""
    if not (local[:1].isupper() and not local.isupper()):
        return ["    pass\n"]
    return [f"    class {local}:  # not in stoker\n", "        def __init__(self, *args, **kwargs):\n",
            f"            raise NameError('stoker has no {local}')\n"]


def build_tree(src: Path, dest: Path, flavour: str) -> None:
    """``dest/tests_pytorch`` (and for stoker ``dest/stoker_demos``) renamed for ``flavour``."""
    if dest.exists():
        shutil.rmtree(dest)
    tests = dest / "tests_pytorch"
    shutil.copytree(src / "tests" / "tests_pytorch", tests)
    rename = stoker_names if flavour == "stoker" else lightning_names
    for path in tests.rglob("*.py"):
        rel = str(path.relative_to(tests))
        text = path.read_text(encoding="utf-8")
        if rel in INFRA:
            text = lightning_names(text)
            if flavour == "stoker":  # the fixture that fails a test leaving env vars set allows seed_everything's
                text = text.replace('"PL_GLOBAL_SEED",', '"PL_GLOBAL_SEED", "STOKER_GLOBAL_SEED",')
        else:
            text = rename(text)
            text = guarded_imports(text) if flavour == "stoker" else text
        path.write_text(text, encoding="utf-8")
    if flavour == "stoker":
        demos = dest / "stoker_demos"
        shutil.copytree(src / "src" / "lightning" / "pytorch" / "demos", demos)
        for path in demos.rglob("*.py"):
            path.write_text(stoker_names(path.read_text(encoding="utf-8")), encoding="utf-8")
        # The package face names the LSTM and transformer demos too, whose imports reach Lightning's module
        # paths (``lightning.pytorch.core``); the tests import the boring classes only.
        (demos / "__init__.py").write_text("from stoker_demos.boring_classes import BoringDataModule, BoringModel, "
                                           "DemoModel\n", encoding="utf-8")


# A KeyboardInterrupt leaving a test would end the whole pytest run, and every later test of the file would go
# uncounted: this plugin (given to both runs) fails that one test instead.
INTERRUPT_PLUGIN = '''import pytest


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    try:
        return (yield)
    except KeyboardInterrupt as error:
        raise RuntimeError(f"KeyboardInterrupt left the test: {error!r}") from error
'''


def run_file(root: Path, rel: str, xml: Path, timeout: int) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    (root / "escaped_interrupt.py").write_text(INTERRUPT_PLUGIN, encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p",
           "escaped_interrupt", "--timeout", "120", f"--junitxml={xml}", "-o", "addopts=", f"tests_pytorch/{rel}"]
    try:
        subprocess.run(cmd, cwd=root, env=env, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pass  # the tests without a result in the XML count as not passed


# A test parametrized with classes is named after them: under stoker `LightningModule` is `TrainingModule`, so
# `test_x[TrainingModule]` is the run of Lightning's `test_x[LightningModule]`.
ID_CLASS_NAMES = {"TrainingModule": "LightningModule", "DataModule": "LightningDataModule"}


def lightning_id(name: str) -> str:
    """``name`` with stoker's class names in its parameter id replaced by the Lightning names they stand for."""
    base, bracket, params = name.partition("[")
    if not bracket:
        return name
    parts = params[:-1].split("-")
    return f"{base}[{'-'.join(ID_CLASS_NAMES.get(p, p) for p in parts)}]"


def outcomes(xml: Path) -> dict[str, str]:
    """test id -> "passed" | "failed" | "skipped" from a junit XML file (empty when the run died)."""
    if not xml.exists():
        return {}
    result = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = lightning_id(case.get("name", ""))
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                # pytest.raises(match=...) caught the expected kind of error, whose words differ
                wording = (child.get("message") or "").startswith(WORDING)
                state = "wording" if wording else "failed"
            elif child.tag == "skipped":
                state = "skipped"
        result[name] = state
    return result


# A fixture that patches a private name of Lightning's modules (``monkeypatch.setattr("lightning.pytorch.loggers.
# wandb._WANDB_AVAILABLE", True)``): every test that asks for it reads Lightning's internals.
FIXTURE_HINT = re.compile(r"setattr\(\s*[\"'](lightning|pytorch_lightning|stoker)[\w.]*\._\w")
# A conftest helper or fixture that patches an attribute of one of Lightning's modules, named as the module object
# (``monkeypatch.setattr(lightning.fabric.accelerators.cuda, "num_cuda_devices", lambda: n)``): the test simulates a
# machine (GPUs, MPS) through Lightning's own device checks, which a different framework never calls.
MODULE_PATCH = re.compile(r"setattr\(\s*(lightning|pytorch_lightning|lightning_fabric)\.[\w.]+\s*,")


def private_fixtures(path: Path) -> set[str]:
    """Names of the fixtures and helper functions in the ``conftest.py`` files above ``path`` (up to
    ``tests_pytorch``) whose source reads Lightning's internals (``PRIVATE_HINTS``, ``FIXTURE_HINT``) or patches
    Lightning's modules (``MODULE_PATCH``), directly or by calling such a helper (``cuda_count_2`` calls
    ``mock_cuda_count``)."""
    found: set[str] = set()
    for folder in path.parents:
        conftest = folder / "conftest.py"
        if conftest.is_file():
            source = conftest.read_text(encoding="utf-8")
            lines = source.splitlines(keepends=True)
            functions = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
            for node in functions:  # helpers are defined before the fixtures that call them
                body = "".join(lines[node.lineno - 1:node.end_lineno])
                calls = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                if PRIVATE_HINTS.search(body) or FIXTURE_HINT.search(body) or MODULE_PATCH.search(body) \
                        or calls & found:
                    found.add(node.name)
        if folder.name == "tests_pytorch":
            break
    return found


def private_helpers(path: Path, tree: ast.Module) -> set[str]:
    """The names under which ``path`` uses a function of the suite's own helper modules (``tests_pytorch.helpers``)
    whose source reads Lightning's internals (``tpipes.run_model_test``, which restores through
    ``trainer._checkpoint_connector``): ``alias.function`` for a module imported as ``alias``, or the function's
    name when imported by name."""
    root = next((p for p in path.parents if p.name == "tests_pytorch"), None)
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or root is None:
            continue
        for alias in node.names:
            module = alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
            if not module.startswith("tests_pytorch.helpers."):
                continue
            parts = module.split(".")[1:]
            source_file = root.joinpath(*parts).with_suffix(".py")
            wanted = None  # a module imported whole: each of its functions, as ``alias.function``
            if not source_file.is_file():  # ``from tests_pytorch.helpers.pipelines import run_model_test``
                source_file, wanted = root.joinpath(*parts[:-1]).with_suffix(".py"), parts[-1]
                if not source_file.is_file():
                    continue
            source = source_file.read_text(encoding="utf-8")
            lines = source.splitlines(keepends=True)
            for fn in ast.parse(source).body:
                if isinstance(fn, ast.FunctionDef) and wanted in (None, fn.name) and \
                        PRIVATE_HINTS.search("".join(lines[fn.lineno - 1:fn.end_lineno])):
                    found.add(f"{alias.asname or alias.name}.{fn.name}" if wanted is None else alias.asname or fn.name)
    return found


def inherited_privates(source: str) -> set[str]:
    """Private names a test file reads on ``self`` but never sets nor defines itself: in a test's subclass of a
    Lightning class (``class MyPruning(ModelPruning)``), ``self._original_layers`` is Lightning's internal state."""
    read = set(re.findall(r"\bself\.(_[a-z]\w*)", source))
    assigned = set(re.findall(r"\bself\.(_[a-z]\w*)\s*(?::[^=\n]*)?(?:[-+*/|&]?=)(?!=)", source))
    defined = set(re.findall(r"\bdef\s+(_[a-z]\w*)", source))
    return read - assigned - defined


def private_tests(path: Path) -> set[str]:
    """Names of the test functions in ``path`` whose source reads Lightning's internals, also through the module's
    own helpers: a module-level function or class the test names (directly or through another helper) counts as
    part of its source (``mock_training_epoch_loop(trainer)`` reads ``fit_loop.epoch_loop``), and so does a private
    function of Lightning's imported by name (``_request_dataloader``) and a ``conftest.py`` fixture or helper that
    patches Lightning's private names or modules (`private_fixtures`: asked for as a fixture, or imported by name,
    ``from tests_pytorch.conftest import mock_cuda_count``), and a function of the suite's helper modules that reads
    them (`private_helpers`)."""
    fixtures = private_fixtures(path)
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    defs = {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}

    def text(node: ast.AST) -> str:
        first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])  # mocks in decorators
        return "".join(lines[first - 1:node.end_lineno])

    # Lightning's private functions imported by name (``from ...data_connector import _request_dataloader``)
    private_imports = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                       and (node.module or "").split(".")[0] in LIGHTNING_ROOTS
                       for alias in node.names if alias.name.startswith("_")}
    private_imports |= {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                        and (node.module or "").endswith("conftest") for alias in node.names
                        if alias.name in fixtures}

    helpers = private_helpers(path, tree)
    inherited = inherited_privates(source)

    def reads_internals(node: ast.AST, seen: set[str]) -> bool:
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        dotted = {f"{n.value.id}.{n.attr}" for n in ast.walk(node)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        own = text(node)
        if PRIVATE_HINTS.search(own) or names & private_imports or (names | dotted) & helpers or \
                any(f"self.{name}" in own for name in inherited):
            return True
        return any(reads_internals(defs[name], seen | {name}) for name in sorted((names & defs.keys()) - seen))

    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
            and (reads_internals(node, {node.name}) or {a.arg for a in node.args.args} & fixtures)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lightning-src", required=True, type=Path,
                        help="folder holding Lightning's tests/tests_pytorch and src/lightning/pytorch/demos")
    parser.add_argument("--work", type=Path, default=Path("/tmp/stoker-lightning-suite"))
    parser.add_argument("--files", nargs="*", default=FILES)
    parser.add_argument("--which", default="lightning,stoker")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per file and flavour")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    flavours = args.which.split(",")
    for flavour in flavours:
        build_tree(args.lightning_src, args.work / flavour, flavour)
    results: dict[str, dict[str, dict[str, str]]] = {}
    for rel in args.files:
        results[rel] = {}
        for flavour in flavours:
            xml = args.work / f"{flavour}-{rel.replace('/', '_')}.xml"
            xml.unlink(missing_ok=True)
            run_file(args.work / flavour, rel, xml, args.timeout)
            results[rel][flavour] = outcomes(xml)
        private = private_tests(args.work / flavours[0] / "tests_pytorch" / rel)
        results[rel]["private"] = {name: "private" for name in private}
        print(row(rel, results[rel], private, flavours), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(total(results, flavours))
    return 0


def counts(per_file: dict[str, dict[str, str]], private: set[str], flavours: list[str]) -> tuple[int, int, int, int]:
    """(public tests passing under Lightning, of those passing on stoker, private tests passing under Lightning,
    public tests that differ only in an error's wording on stoker). The wording ones are not in the first two
    numbers: stoker raised the kind of error the test expects, in its own words."""
    base = per_file.get("lightning", {})
    other = per_file.get("stoker", {})
    public = [t for t, s in base.items() if s == "passed" and t.split("[")[0] not in private]
    hidden = [t for t, s in base.items() if s == "passed" and t.split("[")[0] in private]
    if "lightning" not in flavours:  # stoker alone: every test that ran counts as public
        public = [t for t in other if t.split("[")[0] not in private]
    wording = [t for t in public if other.get(t) == "wording"]
    public = [t for t in public if other.get(t) != "wording"]
    return len(public), sum(other.get(t) == "passed" for t in public), len(hidden), len(wording)


def row(rel: str, per_file: dict[str, dict[str, str]], private: set[str], flavours: list[str]) -> str:
    public, passing, hidden, wording = counts(per_file, private, flavours)
    return (f"{rel:60s} public {public:4d}  pass on stoker {passing:4d}  "
            f"(not counted: private {hidden}, wording only {wording})")


def total(results: dict[str, dict[str, dict[str, str]]], flavours: list[str]) -> str:
    sums = [0, 0, 0, 0]
    for per_file in results.values():
        for i, n in enumerate(counts(per_file, set(per_file.get("private", {})), flavours)):
            sums[i] += n
    return (f"{'total':60s} public {sums[0]:4d}  pass on stoker {sums[1]:4d}  "
            f"(not counted: private {sums[2]}, wording only {sums[3]})")


if __name__ == "__main__":
    sys.exit(main())
