"""Shared fixtures, and the rule that keeps the suite whole without TensorFlow.

TensorFlow is imported only by the tests that need it. A test that needs TensorFlow says so in one
of two ways, and is skipped (with the reason) where TensorFlow is not installed:

- in its own process: ``tf = pytest.importorskip("tensorflow")`` (module level or in the test), or
  the ``tf`` marker where TensorFlow is reached through hookbus (a ``CheckpointSink``, a Keras
  model built by hookbus);
- in the processes it starts: the ``subprocess`` or ``distributed`` marker.

``tests/test_tiers.py`` pins the rule; CI's fast tier (``.ci/run``) runs the suite without
TensorFlow installed, so a test that needs it without saying so fails there.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import shutil
import signal
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
#: Put first on the ``PYTHONPATH`` of the processes the tests start: its ``sitecustomize`` keeps
#: Keras from loading scikit-learn there (seconds of CPU a process; see that module).
CHILD_SITE = str(Path(__file__).resolve().parent / "_child_site")
os.environ["PYTHONPATH"] = os.pathsep.join([CHILD_SITE, *filter(None, [os.environ.get("PYTHONPATH")])])

from hookbus.testing import FakeClock  # noqa: E402 - after the TF log level is set

if TYPE_CHECKING:
    from _mlflow_server import MlflowServer

# CI must pass on every machine: the same examples everywhere, and no timing checks a slow or loaded
# machine could fail (per-test @settings still override these).
settings.register_profile("hookbus", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hookbus")


# The markers whose tests need TensorFlow: in this process (tf) or in the processes they start.
NEEDS_TENSORFLOW = ("tf", "subprocess", "distributed")
# What a failure for want of TensorFlow (or of Keras, which comes with it) says.
_MISSING_TENSORFLOW = ("No module named 'tensorflow'", "No module named 'keras'", "needs TensorFlow: pip install")


def tensorflow_installed() -> bool:
    """Whether ``import tensorflow`` can find TensorFlow (without importing it: that takes seconds)."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # a finder refusing it, or a half-removed module
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without TensorFlow, skip what needs it (before any fixture of it runs), saying why; on a
    pytest-xdist worker, put the longest work first."""
    if not tensorflow_installed():
        for item in items:
            marker = next((name for name in NEEDS_TENSORFLOW if item.get_closest_marker(name)), None)
            if marker is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs TensorFlow (marked {marker}), which is not installed"))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the order the groups go out in
        items.sort(key=lambda item: next((i for i, m in enumerate(_FIRST) if item.get_closest_marker(m)), len(_FIRST)))


#: What goes out to the workers first, in this order (a stable sort: the rest keeps its order): the
#: local clusters, then the tests that start processes, the longest work, so that none of it is left
#: for the end, when the other workers would idle.
_FIRST = ("distributed", "subprocess")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n N`` (README's test commands), hand each pytest-xdist worker whole groups, in the
    order of their first test (pyproject's addopts: ``--dist loadscope --no-loadscope-reorder``).

    A module is one group: its module-scoped fixtures (a local cluster, a training run once for
    many assertions) are set up once, on one worker. The modules that start local clusters (a
    ``distributed`` mark: up to ten TensorFlow processes each, deadlines set for one cluster at a
    time) are one group, run one after another on one worker while the others run the rest.
    (pytest-xdist's own ``xdist_group`` marks do not group under pytest 9.2: the worker renames
    node ids through an attribute pytest no longer reads.)
    """
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class ModulesAndClusters(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "clusters" if _marks_distributed(root / module) else module

    return ModulesAndClusters(config, log)


@functools.cache
def _marks_distributed(path: Path) -> bool:
    """Whether the test module at ``path`` marks a test ``distributed`` (in its code, not a string)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "distributed"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        for node in ast.walk(tree)
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A test that fails for want of TensorFlow is told how to say that it needs it."""
    report = yield
    if (
        report.failed
        and not tensorflow_installed()
        and any(text in report.longreprtext for text in _MISSING_TENSORFLOW)
    ):
        report.sections.append(
            (
                "hookbus: this test needs TensorFlow",
                "TensorFlow is not installed here. Say that the test needs it (see tests/conftest.py): "
                "tf = pytest.importorskip('tensorflow') in the test or at module level, @pytest.mark.tf when "
                "hookbus reaches TensorFlow for it, @pytest.mark.subprocess when a process it starts does.",
            )
        )
    return report


@pytest.fixture(autouse=True, scope="session")
def _no_inherited_tf_config() -> Iterator[None]:
    """A TF_CONFIG from the shell would make this process (and its children) a cluster task.

    Session-scoped so it also precedes the module-scoped fixtures that train or start children.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv("TF_CONFIG", raising=False)
        yield


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1000.0)


@pytest.fixture
def tf_graph() -> Iterator[Any]:
    """A fresh graph-mode default graph for one test (TensorFlow imported here)."""
    tf = pytest.importorskip("tensorflow")
    graph = tf.Graph()
    with graph.as_default():
        yield graph


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One real ``mlflow server`` (127.0.0.1, a free port, SQLite) shared by the tests that read a run
    back through it; a test that stops its server starts its own (``tests/_mlflow_server.py``).
    Skips where MLflow is not installed."""
    from _mlflow_server import MlflowServer

    with MlflowServer(tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server


@pytest.fixture(scope="session")
def _mlflow_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite store with its tables made (MLflow runs its migrations: seconds), once."""
    tracking = pytest.importorskip("mlflow.tracking")
    directory = tmp_path_factory.mktemp("mlflow-schema")
    tracking.MlflowClient(f"sqlite:///{directory / 'mlflow.db'}").search_experiments()
    return directory / "mlflow.db"


@pytest.fixture
def mlflow_store(tmp_path: Path, _mlflow_schema: Path) -> Path:
    """``tmp_path`` holding a fresh real MLflow store, ``mlflow.db`` (a copy of one MLflow made):
    ``MLflowSink(directory=mlflow_store)``'s default store, ``sqlite:///<mlflow_store>/mlflow.db``."""
    shutil.copyfile(_mlflow_schema, tmp_path / "mlflow.db")
    return tmp_path


@pytest.fixture
def handed_on() -> Iterator[list[int]]:
    """For a test that sends its own process a stop signal (SIGTERM, SIGUSR1) under ``with bus:``: the
    signals the bus hands on when its run ends, caught by this fixture's handler (their default
    action would end pytest itself, as it ends a training script once its run is saved)."""
    caught: list[int] = []

    def catch(signum: int, frame: Any) -> None:
        caught.append(signum)

    previous = {signum: signal.signal(signum, catch) for signum in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
