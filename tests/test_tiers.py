"""The suite's tiers hold: without TensorFlow nothing fails, what needs it skips and says why.

The rule is in ``tests/conftest.py``; CI's fast tier (``.ci/run``) runs the whole suite in an
environment without TensorFlow, so a test that needs it without saying so fails there too.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from conftest import tensorflow_installed

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NEEDS_TENSORFLOW = ("tensorflow", "keras")

# Runs pytest in a process where TensorFlow and Keras cannot be found, as where they are not installed.
WITHOUT_TENSORFLOW = textwrap.dedent(
    """
    import sys

    class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tensorflow", "keras"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    if sys.argv[1] == "without":
        sys.meta_path.insert(0, NoTensorFlow())
    import pytest

    sys.exit(pytest.main(sys.argv[2:]))
    """
)

EXAMPLE_TESTS = {
    "test_plain.py": """
        def test_plain():
            assert True
        """,
    "test_marked.py": """
        import pytest

        @pytest.mark.tf
        def test_in_process():
            pass

        @pytest.mark.subprocess
        def test_children():
            pass

        @pytest.mark.distributed
        def test_cluster():
            pass
        """,
    "test_importorskip.py": """
        import pytest

        tf = pytest.importorskip("tensorflow")

        def test_graph():
            tf.Graph()
        """,
    "test_unmarked.py": """
        def test_imports_tensorflow_without_saying_so():
            import tensorflow
        """,
}


def _child_script(path: Path) -> bool:
    """A script the tests run as a process of its own (it may import TensorFlow: its test is marked),
    or a helper module that only such scripts import (it runs in their processes alone)."""
    if path.name.endswith("_child.py"):
        return True
    importers = _importers().get(path.stem, [])
    return bool(importers) and all(p.name.endswith("_child.py") for p in importers)


@functools.cache
def _importers() -> dict[str, list[Path]]:
    """For each top-level module name, the files under tests/ that import it (read once)."""
    found: dict[str, list[Path]] = {}
    for path in TESTS.rglob("*.py"):
        for name in _imported_modules(path):
            found.setdefault(name, []).append(path)
    return found


def _imported_modules(path: Path) -> set[str]:
    """The top-level module names ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _imports_of_tensorflow(path: Path) -> list[str]:
    """Each ``import tensorflow`` / ``import keras`` statement in ``path``, as ``file:line``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in NEEDS_TENSORFLOW for name in names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_tests_reach_tensorflow_only_through_importorskip() -> None:
    """An ``import tensorflow`` in a test module fails to collect (or to run) without TensorFlow;
    ``pytest.importorskip("tensorflow")`` skips instead and says why."""
    offenders = [
        where
        for path in sorted(TESTS.rglob("*.py"))
        if not _child_script(path)
        for where in _imports_of_tensorflow(path)
    ]
    assert offenders == [], "use tf = pytest.importorskip('tensorflow') (or 'keras') instead"


def _run(tmp_path: Path, tensorflow: str, *files: str) -> dict[str, tuple[str, str]]:
    """Run ``files`` of EXAMPLE_TESTS under this suite's conftest; each test's outcome and message."""
    suite = tmp_path / tensorflow
    suite.mkdir()
    (suite / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    for name in files:
        (suite / name).write_text(textwrap.dedent(EXAMPLE_TESTS[name]))
    junit = suite / "junit.xml"
    args = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(suite), "-p", "no:cacheprovider", "-q"]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, tensorflow, *args, f"--junitxml={junit}", str(suite)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=suite,
    )
    assert junit.exists(), result.stdout + result.stderr
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        outcome = next(iter(case), None)
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if outcome is None:
            outcomes[name] = ("passed", "")
        else:
            outcomes[name] = (outcome.tag, f"{outcome.get('message', '')}\n{outcome.text or ''}")
    return outcomes


@pytest.mark.timeout(240)
def test_without_tensorflow_what_needs_it_skips_saying_why_and_the_rest_runs(tmp_path: Path) -> None:
    outcomes = _run(tmp_path, "without", *EXAMPLE_TESTS)
    assert {name: outcome for name, (outcome, _) in outcomes.items()} == {
        "test_plain::test_plain": "passed",
        "test_marked::test_in_process": "skipped",
        "test_marked::test_children": "skipped",
        "test_marked::test_cluster": "skipped",
        "::test_importorskip": "skipped",
        "test_unmarked::test_imports_tensorflow_without_saying_so": "failure",
    }
    for test, marker in [("test_in_process", "tf"), ("test_children", "subprocess"), ("test_cluster", "distributed")]:
        assert f"needs TensorFlow (marked {marker}), which is not installed" in outcomes[f"test_marked::{test}"][1]
    assert "could not import 'tensorflow'" in outcomes["::test_importorskip"][1]
    # A test that needs TensorFlow without saying so fails, and its report says how to say so.
    failure = outcomes["test_unmarked::test_imports_tensorflow_without_saying_so"][1]
    assert "No module named 'tensorflow'" in failure


@pytest.mark.timeout(240)
def test_the_failure_of_an_unmarked_test_says_how_to_mark_it(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (suite / "test_unmarked.py").write_text(textwrap.dedent(EXAMPLE_TESTS["test_unmarked.py"]))
    args = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(suite), "-p", "no:cacheprovider", "-q", str(suite)]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, "without", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=suite,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "hookbus: this test needs TensorFlow" in result.stdout
    assert "@pytest.mark.subprocess when a process it starts does" in result.stdout


@pytest.mark.timeout(240)
def test_with_tensorflow_the_marked_tests_run(tmp_path: Path) -> None:
    outcomes = _run(tmp_path, "with", "test_plain.py", "test_marked.py")
    expected = "passed" if tensorflow_installed() else "skipped"
    assert {name: outcome for name, (outcome, _) in outcomes.items()} == {
        "test_plain::test_plain": "passed",
        "test_marked::test_in_process": expected,
        "test_marked::test_children": expected,
        "test_marked::test_cluster": expected,
    }
