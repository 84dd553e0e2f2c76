"""The parameter server's shared flag, in one real session: a stop written by one task is read by
the others, and a restore the chief marks is seen once by a task whose step never went back."""

from __future__ import annotations

import threading
import time
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
        chief.mark_restore(session, 402)
        chief.session_created(session, Requests(), first=True)  # type: ignore[arg-type]
        worker = chief  # the worker reads the same variables: its last mark was the one before
        worker._mark = ""
        assert worker.restore_seen(session.run(worker.read)) == 402
        assert worker.restore_seen(session.run(worker.read)) is None  # once
        assert not stops.requested  # a mark is no stop
        session.run(chief._ops["assign"], feed_dict={chief._ops["value"]: "worker:1: diverged"})
        chief.observe(session.run(chief.read), stops)
        assert stops.reason == "worker:1: diverged"
        assert chief.restore_seen(session.run(chief.read)) is None  # a stop is no restore


def test_a_worker_whose_step_went_back_waits_for_the_chiefs_mark_and_takes_its_step() -> None:
    """The chief writes its mark a moment after the restore (its session's other hooks run first);
    the worker that already read its step going back waits for it, and resumes at its step."""
    graph = tf.Graph()
    chief = _shared(graph, hookbus.Task("worker", 0, is_chief=True))
    worker = SharedStop(hookbus.Task("worker", 1))
    worker.read, worker._ops = chief.read, chief._ops  # the same variables, as on a parameter server
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        stops: Any = Requests()
        chief.session_created(session, stops, first=True)
        worker.session_created(session, stops, first=True)
        later = threading.Timer(0.3, chief.mark_restore, (session, 302))
        began = time.monotonic()
        later.start()
        assert worker.await_restore(session, stops) == 302
        assert time.monotonic() - began >= 0.3
        later.join()
        assert worker.restore_seen(session.run(worker.read)) is None  # taken once
        # No mark (a chief killed before writing it): the wait ends at its bound, with nothing.
        assert worker.await_restore(session, stops, wait_secs=0.1) is None
        # A stop read while waiting ends the wait at once.
        session.run(chief._ops["assign"], feed_dict={chief._ops["value"]: "worker:0: diverged"})
        began = time.monotonic()
        assert worker.await_restore(session, stops, wait_secs=30) is None
        assert time.monotonic() - began < 10
        assert stops.reason == "worker:0: diverged"
