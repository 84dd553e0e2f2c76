"""Synchronous multi-worker training (MultiWorkerMirroredStrategy): tasks, checkpoints, one agreed stop.

The integration tests start real local clusters of two worker processes on 127.0.0.1 (ports
chosen free at run time), one for a custom loop and one for Keras ``fit``, together, once per
module; every process is killed at the end.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _clusters import collect, free_ports, reports, run_example, start, stop

import hookbus
from hookbus._tf._checkpoint_tf1 import TENSORFLOW, list_checkpoints
from hookbus._tf._collective import task_of_strategy
from hookbus.sinks import CheckpointSink
from hookbus.testing import ScriptedPublisher

CHILD = Path(__file__).with_name("_mwms_child.py")
SCENARIOS = ("loop", "keras")
STOP_AT = 23  # worker 1 alone asks to stop here; the workers agree at the next multiple of 10
RATE_AT = 13  # worker 1 alone asks for a tenth of the learning rate here; agreed at step 20
DEADLINE = 90  # hard limit for a whole cluster run, in seconds (a hang fails, it does not block)
#: Keras 3.15's fit fails under a multi-worker MultiWorkerMirroredStrategy (keras-team/keras#20585).
KERAS_UPSTREAM = ("Invalid reduction dimension 0 for input with 0 dimensions", "to a Tensor")


# -- unit -----------------------------------------------------------------------------------
class _Strategy:
    """Stands in for a strategy object: only its (real) cluster resolver is read."""

    def __init__(self, cluster: dict[str, list[str]], task_type: str, task_id: int) -> None:
        tf = pytest.importorskip("tensorflow")
        spec = tf.train.ClusterSpec(cluster)
        self.cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            spec, task_type=task_type, task_id=task_id
        )


def test_task_of_strategy() -> None:
    workers = {"worker": ["h:1", "h:2"]}
    assert task_of_strategy(None) is None
    assert task_of_strategy(_Strategy({"worker": ["h:1"]}, "worker", 0)) is None  # one machine
    assert task_of_strategy(_Strategy(workers, "worker", 0)) == hookbus.Task("worker", 0, True, collective=True)
    assert task_of_strategy(_Strategy(workers, "worker", 1)) == hookbus.Task("worker", 1, False, collective=True)
    chief = task_of_strategy(_Strategy({"chief": ["h:0"], **workers}, "worker", 0))
    assert chief is not None
    assert not chief.is_chief
    with pytest.raises(ValueError, match="with parameter servers is not a collective strategy"):
        task_of_strategy(_Strategy({"ps": ["h:0"], **workers}, "worker", 0))
    with pytest.raises(ValueError, match="task evaluator:0 is not a training worker"):
        task_of_strategy(_Strategy({"evaluator": ["h:0"], **workers}, "evaluator", 0))


def test_loop_publisher_checks_its_strategy_arguments() -> None:
    with pytest.raises(TypeError, match="strategy must be a tf.distribute.Strategy or None"):
        hookbus.LoopPublisher(hookbus.EventBus(), ["loss"], strategy="mirrored")
    with pytest.raises(ValueError, match="check_stop_every_n_steps must be a positive int"):
        hookbus.LoopPublisher(hookbus.EventBus(), ["loss"], check_stop_every_n_steps=0)


def test_checkpoint_sink_runs_on_every_collective_worker() -> None:
    bus = hookbus.EventBus()
    sink = bus.attach(CheckpointSink(Path("unused"), every_n_steps=2, every_n_secs=None))
    core = ScriptedPublisher(bus, ["loss"]).core
    core.set_task(hookbus.Task("worker", 1, collective=True))
    assert core.local_subscribers()[0].sink is sink
    core.set_task(hookbus.Task("worker", 1))  # parameter-server training: the chief alone saves
    assert core.local_subscribers() == []


def _collective_bus(tmp_path: Path, index: int, **schedule: Any) -> tuple[hookbus.EventBus, CheckpointSink, list[str]]:
    tf = pytest.importorskip("tensorflow")
    from hookbus._tf._checkpoint_tf2 import TF2CheckpointBackend

    bus = hookbus.EventBus()
    sink = bus.attach(CheckpointSink(tmp_path / "ckpt", keep=2, **schedule))
    backend = TF2CheckpointBackend(tf.train.Checkpoint(v=tf.Variable(1.0)))
    backend.attach()
    saved: list[str] = []
    save = backend.save

    def save_noting(path: str) -> str:
        saved.append(path)
        return save(path)

    backend.save = save_noting  # type: ignore[method-assign]
    core = ScriptedPublisher(bus, ["loss"]).core
    core.offer_checkpoints(backend, TENSORFLOW)
    core.set_task(hookbus.Task("worker", index, collective=True))
    return bus, sink, saved


def test_a_time_schedule_fails_at_begin_under_a_collective_strategy(tmp_path: Path) -> None:
    bus, _, _ = _collective_bus(tmp_path, 0)  # the default every_n_secs=600
    match = r"every worker saves, at the same steps.*every_n_secs=600.*every_n_steps"
    with pytest.raises(ValueError, match=match), bus:
        ScriptedPublisher(bus, keys=["loss"]).begin()


@pytest.mark.parametrize("index", [0, 1])
def test_a_non_chief_saves_into_a_scratch_directory_it_removes(tmp_path: Path, index: int) -> None:
    bus, sink, saved = _collective_bus(tmp_path, index, every_n_steps=2, every_n_secs=None)
    with bus:
        ScriptedPublisher(bus, keys=["loss"]).run([{"loss": 1.0}] * 7)
    ckpt = tmp_path / "ckpt"
    scratch = ckpt / ".hookbus-tmp-worker-1"
    steps = [2, 4, 6, 7]  # the schedule, then the end
    if index == 0:
        assert saved == [str(ckpt / f"model.ckpt-{s}") for s in steps]
        assert (ckpt / "checkpoint").exists()
        assert list_checkpoints(str(ckpt)) == [str(ckpt / "model.ckpt-6"), str(ckpt / "model.ckpt-7")]
    else:
        assert saved == [str(scratch / f"model.ckpt-{s}") for s in steps]
        assert sorted(p.name for p in ckpt.iterdir()) == []  # the chief's files only; none here
    assert not scratch.exists()
    assert sink._kept == [str(ckpt / "model.ckpt-6"), str(ckpt / "model.ckpt-7")]  # the same bookkeeping


# -- integration: real local clusters -------------------------------------------------------
@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run both scenarios' clusters at once; yield ``{scenario: {"out", "reports", "logs"}}``."""
    runs: dict[str, Any] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = iter(free_ports(2 * len(SCENARIOS)))
        for scenario in SCENARIOS:
            out = tmp_path_factory.mktemp(f"mwms-{scenario}")
            cluster = {"worker": [f"127.0.0.1:{next(ports)}" for _ in range(2)]}
            base = {"cluster": cluster, "scenario": scenario, "out": str(out), "stop_at": STOP_AT, "rate_at": RATE_AT}
            workers = [start(CHILD, {**base, "index": i}) for i in (0, 1)]
            procs += workers
            runs[scenario] = {"out": out, "workers": workers}
        collect(runs, DEADLINE)
        yield runs
    finally:
        stop(procs)


def _check_cluster_run(clusters: dict[str, Any], scenario: str) -> None:
    chief, other = reports(clusters, scenario)
    out: Path = clusters[scenario]["out"]
    assert (chief["error"], other["error"]) == (None, None), (chief, other)
    # Worker 1 alone asked at step 23; both stopped together at the agreement step 30.
    assert other["stop_source"].endswith("record")
    assert other["stop_step"] == STOP_AT
    assert chief["stop_source"] == "cluster"
    assert chief["stop_reason"] == "worker-1 stopped"
    assert chief["step"] == other["step"] == 30
    assert (chief["task"], other["task"]) == (["worker", 0], ["worker", 1])
    # Only the chief's observability sinks wrote; "each" wrote one file per worker.
    rows = (out / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows[1:]] == [5, 10, 15, 20, 25, 30]
    assert len(list((out / "tb" / "train").glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in out.glob("each*.csv")) == ["each.worker-0.csv", "each.worker-1.csv"]
    # Every worker saved at the same steps: the chief into ckpt/, worker 1 into a scratch
    # directory that is gone.
    ckpt = out / "ckpt"
    assert chief["saved"] == [str(ckpt / f"model.ckpt-{s}") for s in (10, 20, 30)]
    assert other["saved"] == [str(ckpt / ".hookbus-tmp-worker-1" / f"model.ckpt-{s}") for s in (10, 20, 30)]
    assert sorted(p.name for p in ckpt.iterdir() if p.name.startswith(".hookbus-tmp")) == []
    assert 'model_checkpoint_path: "model.ckpt-30"' in (ckpt / "checkpoint").read_text()


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_a_custom_loop_cluster_stops_together_and_only_the_chief_writes(clusters: dict[str, Any]) -> None:
    _check_cluster_run(clusters, "loop")


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_a_keras_fit_cluster_stops_together_and_only_the_chief_writes(clusters: dict[str, Any]) -> None:
    errors = [r["error"] for r in reports(clusters, "keras") if r["error"]]
    if errors and all(any(known in e for known in KERAS_UPSTREAM) for e in errors):
        first = errors[0].splitlines()[0][:160]
        pytest.xfail(f"Keras's own fit fails under a multi-worker strategy (keras-team/keras#20585): {first}")
    _check_cluster_run(clusters, "keras")


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_a_learning_rate_one_worker_asks_for_is_applied_by_every_worker_at_one_step(clusters: dict[str, Any]) -> None:
    """Issue 27: worker 1 alone asks for a tenth of the rate at step 13; both workers apply it at
    the agreement step 20 (before step 21 trains), so every worker's rate is the same at every
    step, and the weights, updated by all-reduced gradients times each worker's rate, stay equal."""
    chief, other = reports(clusters, "loop")
    assert (chief["error"], other["error"]) == (None, None), (chief, other)
    assert chief["rates"] == other["rates"]
    assert [int(s) for s, _ in chief["rates"]] == list(range(1, 31))
    assert {s: r for s, r in chief["rates"]} == {s: pytest.approx(0.01 if s <= 20 else 0.001) for s in range(1, 31)}
    [(step, old, new, source, reason)] = chief["changes"]
    assert (step, source, reason) == (20, "cluster", "worker-1 asked")
    assert (old, new) == (pytest.approx(0.01), pytest.approx(0.001))
    assert [c[:3] for c in other["changes"]] == [[20, old, new]]
    assert other["changes"][0][3:] == ["Steer", f"worker 1 at step {RATE_AT}"]
    assert chief["weights"] == other["weights"]


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_hookbus_watch_shows_a_machine_row_per_collective_worker_and_their_host_once(
    clusters: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48: each worker's log holds its own samples of the machine (the run's last one at
    least, taken as it closes); the cluster view has a row per worker and the one host's figures
    once, though both workers sampled it."""
    from hookbus._cli._cli import main

    out: Path = clusters["loop"]["out"]
    main(["watch", "--once", str(out)])
    text = capsys.readouterr().out
    rows = re.findall(r"^worker (\d) machine: task worker:(\d) \| host (\S+) \| CPU \d+% \| memory", text, re.M)
    assert [(name, task) for name, task, _ in rows] == [("0", "0"), ("1", "1")], text
    assert {host for *_, host in rows} == {socket.gethostname()}, text
    assert re.findall(r"^host (\S+): CPU \d+%", text, re.M) == [socket.gethostname()], text


def _run_example(directory: Path, steps: int) -> str:
    return run_example("--strategy", "mirrored", "--local", "--dir", str(directory), "--steps", str(steps))


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_mirrored_example_stops_at_its_last_step_and_resumes(tmp_path: Path) -> None:
    # 65 is no multiple of the agreement interval: the planned last step is agreed at begin.
    output = _run_example(tmp_path, 65)
    for task in ("worker-0", "worker-1"):
        assert f"{task}: 65 local steps, stopped at global step 65: reached step 65" in output, output
    output = _run_example(tmp_path, 90)  # resumes from the checkpoint at 65
    for task in ("worker-0", "worker-1"):
        assert f"{task}: 25 local steps, stopped at global step 90: reached step 90" in output, output
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows[1:]] == [20, 40, 60, 80]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.index")) == ["model.ckpt-65.index", "model.ckpt-90.index"]
    assert not list((tmp_path / "ckpt").glob(".hookbus-tmp-*"))


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_the_keras_callback_agrees_on_stops_under_a_real_one_worker_strategy(tmp_path: Path) -> None:
    """Keras's fit under a real one-worker MultiWorkerMirroredStrategy (real all-reduces), the
    callback's task forced to a collective one (a two-worker fit fails inside Keras)."""
    proc = start(
        CHILD,
        {
            "cluster": {"worker": [f"127.0.0.1:{free_ports(1)[0]}"]},
            "index": 0,
            "scenario": "one-worker",
            "out": str(tmp_path),
            "stop_at": STOP_AT,
            "rate_at": RATE_AT,
        },
    )
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = (tmp_path / "worker0.out").read_text(errors="replace")
    lines = [line[len("REPORT ") :] for line in stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, (tmp_path / "worker0.err").read_text(errors="replace")[-3000:]
    report = json.loads(lines[-1])
    assert report["alone_task"] is None  # a one-worker strategy is one machine
    assert report["asked"] == [STOP_AT]
    # Asked at 23 (check every 5 steps: 25 would agree), agreed at the end of epoch 3 (step 24).
    assert report["step"] == 24
    assert report["saved"] == ["model.ckpt-10.index", "model.ckpt-20.index", "model.ckpt-24.index"]
    # Issue 27: a rate asked for at 13 goes through the same real all-reduce, applied at the round of step 15.
    assert [c[0] for c in report["changes"]] == [15]
    assert {s: r for s, r in report["rates"]} == {s: pytest.approx(0.01 if s <= 15 else 0.001) for s in range(1, 25)}
