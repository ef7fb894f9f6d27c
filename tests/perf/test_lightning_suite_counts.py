"""benchmarks/lightning_suite.py: how it renames imports and which tests it counts (no Lightning needed)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent.parent / "benchmarks"


@pytest.fixture()
def suite() -> Iterator[object]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("lightning_suite")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_each_imported_name_is_guarded_on_its_own(suite: object) -> None:
    source = "from stoker.loggers import (\n    CSVLogger,\n    NotThere as Renamed,\n)\nimport os\n"
    namespace: dict[str, object] = {}
    exec(suite.guarded_imports(source + "from stoker import not_there\n"), namespace)
    assert namespace["CSVLogger"].__module__.startswith("stoker") and "os" in namespace
    assert "not_there" not in namespace  # a missing function stays unbound: NameError where a test uses it
    with pytest.raises(NameError, match="stoker has no Renamed"):  # a missing class: a stand-in that cannot be made
        namespace["Renamed"]()


def test_a_test_reaching_internals_through_a_helper_is_private(suite: object, tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text(textwrap.dedent("""
        try:
            from stoker.trainer.connectors import _request_dataloader
        except ImportError:
            pass
        from lightning_fabric.utilities.cloud_io import _load as pl_load

        def test_private_function(): _request_dataloader(None)
        def test_fabric_loader_is_not_lightnings_internals(): pl_load("x")

        def spy(trainer):
            return watch(trainer)

        def watch(trainer):
            return trainer.fit_loop.epoch_loop

        class Model:
            def hook(self):
                return self.trainer._logger_connector

        def test_through_helpers(): spy(None)
        def test_through_a_class(): Model()
        def test_public(): assert 1
        @mock.patch("torch.save")
        def test_decorated(_): pass
    """))
    assert suite.private_tests(path) == {"test_through_helpers", "test_through_a_class", "test_decorated",
                                         "test_private_function"}


def test_a_test_asking_for_a_fixture_that_patches_lightnings_private_names_is_private(suite: object,
                                                                                        tmp_path: Path) -> None:
    root = tmp_path / "tests_pytorch"
    (root / "loggers").mkdir(parents=True)
    (root / "conftest.py").write_text(textwrap.dedent("""
        import pytest
        @pytest.fixture
        def wandb_mock(monkeypatch):
            monkeypatch.setattr("lightning.pytorch.loggers.wandb._WANDB_AVAILABLE", True)
        @pytest.fixture
        def data(tmp_path):
            return tmp_path
    """))
    (root / "loggers" / "test_x.py").write_text(textwrap.dedent("""
        def test_mocked(wandb_mock, tmp_path): pass
        def test_public(data): pass
    """))
    assert suite.private_fixtures(root / "loggers" / "test_x.py") == {"wandb_mock"}
    assert suite.private_tests(root / "loggers" / "test_x.py") == {"test_mocked"}


def test_wording_only_failures_are_counted_apart(suite: object, tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase name="test_a"/>'
        f'<testcase name="test_b"><failure message="{suite.WORDING}&#10; Expected regex: x"/></testcase>'
        '<testcase name="test_c"><failure message="AssertionError: assert 1 == 2"/></testcase>'
        '<testcase name="test_d"><skipped/></testcase>'
        '</testsuite></testsuites>')
    stoker = suite.outcomes(xml)
    assert stoker == {"test_a": "passed", "test_b": "wording", "test_c": "failed", "test_d": "skipped"}
    lightning = {"test_a": "passed", "test_b": "passed", "test_c": "passed", "test_d": "passed", "test_e": "failed"}
    per_file = {"lightning": lightning, "stoker": stoker}
    # public: passing under Lightning, not private, not wording-only (test_b); of those, test_a passes on stoker
    assert suite.counts(per_file, {"test_d"}, ["lightning", "stoker"]) == (2, 1, 1, 1)


def test_a_test_parametrized_with_classes_is_matched_under_lightnings_class_names(suite: object) -> None:
    # under stoker, Lightning's LightningModule parameter is TrainingModule: the same test, named after the class
    assert suite.lightning_id("test_x[TrainingModule]") == "test_x[LightningModule]"
    assert suite.lightning_id("test_x[DataModule-2]") == "test_x[LightningDataModule-2]"
    assert suite.lightning_id("test_x[MyDataModule]") == "test_x[MyDataModule]"
    assert suite.lightning_id("test_x") == "test_x"


def test_a_keyboard_interrupt_leaving_a_test_fails_that_test_only(suite: object, tmp_path: Path) -> None:
    tests = tmp_path / "tests_pytorch"
    tests.mkdir()
    (tests / "test_x.py").write_text("def test_a():\n    raise KeyboardInterrupt\n\ndef test_b():\n    pass\n")
    xml = tmp_path / "out.xml"
    suite.run_file(tmp_path, "test_x.py", xml, timeout=120)
    assert suite.outcomes(xml) == {"test_a": "failed", "test_b": "passed"}


def test_faking_a_machine_or_reaching_internals_through_shared_helpers_is_private(suite: object,
                                                                                    tmp_path: Path) -> None:
    root = tmp_path / "tests_pytorch"
    (root / "helpers").mkdir(parents=True)
    (root / "conftest.py").write_text(textwrap.dedent("""
        import pytest
        import lightning_fabric
        def mock_cuda_count(monkeypatch, n):
            monkeypatch.setattr(lightning_fabric.accelerators.cuda, "num_cuda_devices", lambda: n)
        @pytest.fixture
        def cuda_count_2(monkeypatch):
            mock_cuda_count(monkeypatch, 2)
    """))
    (root / "helpers" / "pipelines.py").write_text(textwrap.dedent("""
        def run_model_test(trainer):
            trainer._checkpoint_connector.restore(None)
        def plain(trainer):
            trainer.fit(None)
    """))
    (root / "test_x.py").write_text(textwrap.dedent("""
        from unittest.mock import patch
        import tests_pytorch.helpers.pipelines as tpipes
        from tests_pytorch.conftest import mock_cuda_count
        from tests_pytorch.helpers.pipelines import run_model_test as restore

        def test_faked_gpus(monkeypatch): mock_cuda_count(monkeypatch, 4)
        def test_faked_by_fixture(cuda_count_2): pass
        def test_shared_helper(): tpipes.run_model_test(None)
        def test_shared_helper_by_name(): restore(None)
        def test_public_shared_helper(): tpipes.plain(None)
        def test_chain(bar): bar.progress.columns[-1]._renderable_cache
        def test_set_by_name(monkeypatch, imports): monkeypatch.setattr(imports, "_RICH_AVAILABLE", False)
        @patch("stoker.callbacks.timer.time")
        def test_bare_patch(_): pass
        def test_own_privates(): self._x = 1
    """))
    assert suite.private_tests(root / "test_x.py") == {
        "test_faked_gpus", "test_faked_by_fixture", "test_shared_helper", "test_shared_helper_by_name",
        "test_chain", "test_set_by_name", "test_bare_patch"}


def test_a_subclass_reading_its_lightning_parents_private_state_is_private(suite: object, tmp_path: Path) -> None:
    """``self._x`` in a test's own class is the test's business unless the file never sets nor defines ``_x``: then
    it is the Lightning parent's internal state (``class MyPruning(ModelPruning)`` reading ``self._original_layers``)."""
    path = tmp_path / "test_x.py"
    path.write_text(textwrap.dedent("""
        class Pruning(ModelPruning):
            def on_train_end(self, trainer, module):
                assert self._original_layers

        class Counting(Callback):
            def __init__(self):
                self._seen: int = 0
            def _bump(self):
                self._seen += 1
            def on_train_end(self, trainer, module):
                self._bump()
                assert self._seen

        def test_inherited(): Pruning()
        def test_own_state(): Counting()
    """), encoding="utf-8")
    assert suite.private_tests(path) == {"test_inherited"}
