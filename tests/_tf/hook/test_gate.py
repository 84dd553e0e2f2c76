"""The start gate (issue 28, ``GlobalStepWaiterHook``'s job): its rule, its bad input, and what
the dashboard and the event log make of it. The real parameter-server runs are in
tests/_tf/hook/test_gate_cluster.py."""

from __future__ import annotations

import io
import math
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import hookbus
from hookbus._tf.hook._gate import POLL_SECS, PROGRESS_SECS, StartGate, start_gate
from hookbus.sinks import ConsoleSink, EventLogSink
from hookbus.testing import ScriptedPublisher

WORKER = hookbus.Task("worker", 1)


class Cluster:
    """The reads a waiting worker makes: the global step moves by ``per_poll`` on each read, the
    stop flag is ``flag_at`` from that read on; ``sleep`` moves the fake clock (no real waiting)."""

    def __init__(self, *, step: int = 5, per_poll: int = 0, flag_at: int | None = None) -> None:
        self.now, self.step, self.per_poll, self.flag_at, self.reads = 0.0, step, per_poll, flag_at, 0
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.stops: list[Any] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert 0 <= seconds <= POLL_SECS
        self.now += seconds

    def read(self) -> tuple[Any, int]:
        self.reads += 1
        if self.reads > 1:
            self.step += self.per_poll
        flag = b"worker-0: reached step 20" if self.flag_at is not None and self.reads >= self.flag_at else b""
        return flag, self.step

    def report(self, state: str, **fields: Any) -> None:
        self.reports.append((state, fields))

    def wait(self, gate: StartGate, stopped: Callable[[], bool] | None = None) -> int:
        gate.clock, gate.sleep = self.clock, self.sleep
        return gate.wait(self.read, self.observe, stopped or (lambda: bool(self.stops)), self.report)

    def observe(self, flag: Any) -> None:
        if flag:
            self.stops.append(flag)

    def states(self) -> list[str]:
        return [state for state, _ in self.reports]


# -- the rule ------------------------------------------------------------------------------------
def test_a_worker_waits_until_the_step_is_reached_and_reports_the_wait() -> None:
    cluster = Cluster(step=5, per_poll=3)
    assert cluster.wait(StartGate(40, None, "raise", WORKER)) == 41  # 5 + 12 polls of 3
    # Published as it began, every PROGRESS_SECS while it lasted (6 s of polls), and as it ended.
    assert cluster.states() == ["waiting", "waiting", "reached"]
    state, last = cluster.reports[-1]
    assert last == {"until_step": 40, "step": 41, "waited_secs": 12 * POLL_SECS, "timeout_secs": None, "starts": True}
    assert cluster.reports[1][1]["waited_secs"] >= PROGRESS_SECS


def test_a_step_already_reached_or_a_run_already_stopping_publishes_nothing() -> None:
    cluster = Cluster(step=50)
    assert cluster.wait(StartGate(40, 1.0, "raise", WORKER)) == 50
    assert (cluster.reads, cluster.reports) == (1, [])
    stopping = Cluster(step=5, flag_at=1)  # the flag was up when the session began
    assert stopping.wait(StartGate(40, None, "raise", WORKER)) == 5
    assert (stopping.reads, stopping.reports, stopping.stops) == (1, [], [b"worker-0: reached step 20"])


@pytest.mark.parametrize("on_timeout", ["start", "raise"])
def test_a_timeout_starts_or_raises_naming_the_task_the_step_and_the_timeout(on_timeout: str) -> None:
    cluster = Cluster(step=12)  # the chief is gone: the step never moves
    gate = StartGate(1000, 2.0, on_timeout, WORKER)
    if on_timeout == "start":
        assert cluster.wait(gate) == 12
    else:
        message = (
            r"^worker-1 waited 2\.0 s for global step 1000 and the global step is still 12: is the chief "
            r"training\? \(wait_timeout_secs=2, on_timeout='raise'"
        )
        with pytest.raises(TimeoutError, match=message):
            cluster.wait(gate)
    assert cluster.states() == ["waiting", "timed_out"]
    assert cluster.reports[-1][1]["starts"] is (on_timeout == "start")
    assert cluster.now == 2.0  # the last sleep is cut to the timeout


def test_the_clusters_stop_flag_ends_the_wait_and_wins_over_a_step_reached_in_the_same_read() -> None:
    cluster = Cluster(step=5, per_poll=100, flag_at=2)
    assert cluster.wait(StartGate(40, None, "start", WORKER)) == 105
    assert cluster.states() == ["waiting", "stopped"]
    assert cluster.reports[-1][1]["starts"] is False
    assert cluster.stops == [b"worker-0: reached step 20"]


def test_staggered_start_is_tensorflows_k_log_task_plus_one_counted_chief_first() -> None:
    stagger = hookbus.staggered_start(10)
    # Without a chief job worker 0 is the chief (position 0); with one, worker i is position i + 1.
    assert [stagger(hookbus.Task("worker", i)) for i in range(4)] == [int(10 * math.log(i + 1)) for i in range(4)]
    assert [stagger(hookbus.Task("worker", i, has_chief_job=True)) for i in range(3)] == [6, 10, 13]
    assert stagger(hookbus.Task("chief", 0, has_chief_job=True)) == 0
    gate = start_gate(stagger, timeout_secs=None, on_timeout="raise", task=hookbus.Task("worker", 3), mode="train")
    assert gate is not None
    assert gate.until_step == int(10 * math.log(4))


def test_the_chief_one_machine_and_step_zero_never_wait() -> None:
    for task in (hookbus.Task("worker", 0), hookbus.Task("chief", 0, has_chief_job=True), None):
        assert start_gate(40, timeout_secs=5.0, on_timeout="start", task=task, mode="train") is None
    assert start_gate(0, timeout_secs=None, on_timeout="raise", task=WORKER, mode="train") is None
    assert start_gate(None, timeout_secs=None, on_timeout="raise", task=WORKER, mode="train") is None


# -- bad input, before training -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"wait_for_step": -1},
            r"wait_for_step must be a non-negative int \(a global step\) or a function of the "
            r"task, e.g. hookbus.staggered_start\(10\) \(got -1\)",
        ),
        ({"wait_for_step": 2.5}, r"wait_for_step must be a non-negative int .* \(got 2\.5\)"),
        ({"wait_for_step": "100"}, r"wait_for_step must be a non-negative int .* \(got '100'\)"),
        ({"wait_for_step": True}, r"wait_for_step must be a non-negative int .* \(got True\)"),
        (
            {"wait_for_step": lambda task: -3},
            r"wait_for_step\(worker-1\) \(from .*<lambda>\) must be a non-negative int \(got -3\)",
        ),
        ({"wait_for_step": 10, "on_timeout": "wait"}, r"on_timeout must be one of 'start', 'raise' \(got 'wait'\)"),
        (
            {"wait_for_step": 10, "wait_timeout_secs": 0},
            r"wait_timeout_secs must be a positive finite number of seconds \(got 0\)",
        ),
        ({"wait_timeout_secs": 5}, r"on_timeout and always_wait apply to the start gate: give wait_for_step too"),
        ({"always_wait": True}, r"on_timeout and always_wait apply to the start gate: give wait_for_step too"),
        ({"wait_for_step": 10, "mode": "eval"}, r"wait_for_step delays training: it takes mode='train'"),
    ],
)
def test_bad_gate_arguments_fail_at_construction_naming_the_value(kwargs: dict[str, Any], message: str) -> None:
    pytest.importorskip("tensorflow")
    with pytest.raises(ValueError, match=message):
        hookbus.EventBusHook(hookbus.EventBus(), task=WORKER, **kwargs)


def test_lockstep_workers_are_refused_before_training(tf_graph: Any) -> None:
    tf = pytest.importorskip("tensorflow")
    collective = hookbus.Task("worker", 1, collective=True)
    with pytest.raises(
        ValueError,
        match=r"wait_for_step is refused for task worker-1: its workers train in lockstep "
        r"\(MultiWorkerMirroredStrategy",
    ):
        hookbus.EventBusHook(hookbus.EventBus(), wait_for_step=10, task=collective)
    # A global step that is not on a parameter server (a collective strategy's, on the workers): at begin.
    with tf.device("/job:worker/task:0"):
        step = tf.compat.v1.train.get_or_create_global_step()
    hook = hookbus.EventBusHook(
        hookbus.EventBus(), train_op=tf.compat.v1.assign_add(step, 1), task=WORKER, wait_for_step=10
    )
    with pytest.raises(
        ValueError,
        match=r"wait_for_step needs the global step on a parameter server \(it is on "
        r"'/job:worker/task:0'\): its workers train in lockstep",
    ):
        hook.begin()


# -- stops while waiting: real signals --------------------------------------------------------------
@pytest.mark.reliability
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_a_first_ctrl_c_end_the_wait_as_a_graceful_stop(signum: int, handed_on: list[int]) -> None:
    bus = hookbus.EventBus()
    pub = ScriptedPublisher(bus, keys=["loss"], task=WORKER)
    cluster = Cluster(step=5)
    states: list[str] = []
    bus.on("waiting_for_step", lambda event: states.append(event.state))
    gate = StartGate(1000, None, "raise", WORKER)  # real clock and sleep: the signal comes during a sleep
    sent = threading.Event()

    def read() -> tuple[Any, int]:
        if not sent.is_set():
            sent.set()
            threading.Timer(0.1, os.kill, (os.getpid(), signum)).start()
        return cluster.read()

    def run() -> int:
        pub.begin()
        pub.session(5)
        return gate.wait(read, lambda flag: None, lambda: bus.should_stop, pub.core.publish_waiting)

    if signum == signal.SIGINT:  # the run ends by raising KeyboardInterrupt once everything is written
        with pytest.raises(KeyboardInterrupt), bus:
            run()
    else:
        with bus:
            assert run() == 5
        assert handed_on == [signum]  # once everything is written
    assert states == ["waiting", "stopped"]
    assert bus.stop_reason == f"received {signal.Signals(signum).name}"


# -- the dashboard, the event log, replay ------------------------------------------------------------
def _publish_a_wait(bus: hookbus.EventBus, *, outcome: str = "reached") -> None:
    pub = ScriptedPublisher(bus, keys=["loss"], task=WORKER)
    pub.begin()
    pub.session(5, restored=False)  # the chief's fresh run, joined at step 5
    wait = pub.core.publish_waiting
    wait("waiting", until_step=40, step=5, waited_secs=0.0, timeout_secs=60.0, starts=False)
    wait("waiting", until_step=40, step=22, waited_secs=5.0, timeout_secs=60.0, starts=False)
    wait(outcome, until_step=40, step=41, waited_secs=7.5, timeout_secs=60.0, starts=outcome == "reached")
    pub.advance({"loss": 1.0}, step=42)
    pub.end()


def test_the_dashboard_shows_the_wait_as_a_status_line_and_says_how_it_ended() -> None:
    out = io.StringIO()
    bus = hookbus.EventBus()
    console = bus.attach(ConsoleSink(Console(file=out, width=120), live=False, plain_every_n_secs=0, every_n_steps=1))
    console.runs_on = "all"  # a worker's own dashboard
    seen: list[tuple[str, ...]] = []
    bus.on("waiting_for_step", lambda event: seen.append(console.snapshot.notes))
    with bus:
        _publish_a_wait(bus)
    assert seen == [
        ("waiting for global step 40 (at 5, 0 s of 60 s)",),
        ("waiting for global step 40 (at 22, 5 s of 60 s)",),
        (),
    ]
    text = out.getvalue()
    assert "waiting for global step 40 (at 5, 0 s of 60 s)" in text
    assert "reached global step 40 (at 41, after 8 s): training starts" in text
    assert "(at 22" not in text  # progress updates the status line only


def test_the_event_log_records_the_wait_and_replay_publishes_it_again(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(path, runs_on="all"))
    with bus:
        _publish_a_wait(bus, outcome="stopped")
    records = [r for r in hookbus.read_event_log(path) if r["record"] == "waiting_for_step"]
    assert [(r["state"], r["step"], r["until_step"], r["waited_secs"], r["starts"]) for r in records] == [
        ("waiting", 5, 40, 0.0, False),
        ("waiting", 22, 40, 5.0, False),
        ("stopped", 41, 40, 7.5, False),
    ]
    assert all(r["timeout_secs"] == 60.0 and isinstance(r["wall_time"], float) for r in records)
    replayed: list[hookbus.sink_api.WaitForStep] = []
    again = hookbus.EventBus()
    again.on("waiting_for_step", replayed.append)
    hookbus.replay(path, again)
    fields = ("state", "step", "until_step", "waited_secs", "timeout_secs", "starts", "wall_time")
    assert [tuple(getattr(e, f) for f in fields) for e in replayed] == [tuple(r[f] for f in fields) for r in records]
