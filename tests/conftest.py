"""Shared fixtures. TensorFlow is imported only by the tests that need it."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from hookbus.testing import FakeClock  # noqa: E402 - after the TF log level is set


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
