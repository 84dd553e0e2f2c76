"""The parameter server's shared flag, in one real session: a stop written by one task is read by
the others, and a restore the chief marks is seen once by a task whose step never went back."""

from __future__ import annotations

from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import hookbus  # noqa: E402
from hookbus._tf.hook._shared_stop import SharedStop  # noqa: E402


class Requests:
    """What SharedStop uses of the run's stops: whether one is requested, and a request."""

    def __init__(self) -> None:
        self.reason: str | None = None

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str, source: str) -> None:
        self.reason = reason


def _shared(graph: Any, task: hookbus.Task) -> SharedStop:
    with graph.as_default(), tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
        step = tf.compat.v1.train.get_or_create_global_step()
    shared = SharedStop(task)
    shared.build(tf, graph, step)
    return shared


def test_a_restore_the_chief_marks_is_seen_once_by_a_worker_whose_step_never_went_back() -> None:
    graph = tf.Graph()
    chief = _shared(graph, hookbus.Task("worker", 0, is_chief=True))
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        stops: Any = Requests()
        chief.session_created(session, stops, first=True)  # a fresh cluster: no restore yet
        assert chief.restore_seen(session.run(chief.read)) is None
        # A restarted chief (another process, here the same variables) restores the checkpoint at 402.
        chief.session_created(session, Requests(), first=True, restored_step=402)  # type: ignore[arg-type]
        worker = chief  # the worker reads the same variables: its last mark was the one before
        worker._mark = ""
        assert worker.restore_seen(session.run(worker.read)) == 402
        assert worker.restore_seen(session.run(worker.read)) is None  # once
        assert not stops.requested  # a mark is no stop
        session.run(chief._ops["assign"], feed_dict={chief._ops["value"]: "worker:1: diverged"})
        chief.observe(session.run(chief.read), stops)
        assert stops.reason == "worker:1: diverged"
        assert chief.restore_seen(session.run(chief.read)) is None  # a stop is no restore
