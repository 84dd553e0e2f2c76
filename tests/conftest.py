"""Shared fixtures. TensorFlow is imported only by the tests that need it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from hookbus.testing import FakeClock  # noqa: E402 - after the TF log level is set

# CI must pass on every machine: the same examples everywhere, and no timing checks a slow or loaded
# machine could fail (per-test @settings still override these).
settings.register_profile("hookbus", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hookbus")


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
def tf_graph():
    """A fresh graph-mode default graph for one test (TensorFlow imported here)."""
    tf = pytest.importorskip("tensorflow")
    graph = tf.Graph()
    with graph.as_default():
        yield graph
