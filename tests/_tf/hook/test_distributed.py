"""Multi-worker training: where subscribers run, task fields, and one stop for the whole cluster.

The integration tests start real local clusters (one parameter server and two workers each, as
separate processes on 127.0.0.1, ports chosen free at run time). The three scenarios start
together, once per module, and every process is killed at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _clusters import collect, free_ports, reports, run_example, start, stop

import hookbus
from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, NanGuardSink, TensorBoardSink
from hookbus.testing import ScriptedPublisher

CHILD = Path(__file__).with_name("_cluster_child.py")
SCENARIOS = ("files", "nan", "early")
# Hard limit for a whole cluster run, in seconds (a hang fails, it does not block). Nine processes
# import TensorFlow at once on two cores: 17 s idle, 41 s with two busy cores, so leave room.
DEADLINE = 150


# -- unit: runs_on, Task, filtering -------------------------------------------------------------
def test_runs_on_defaults_per_sink(tmp_path: Path) -> None:
    assert CSVSink(tmp_path / "m.csv").runs_on == "chief"
    assert TensorBoardSink(tmp_path / "tb").runs_on == "chief"
    assert CheckpointSink(tmp_path / "ck").runs_on == "chief"
    assert ConsoleSink().runs_on == "chief"
    assert NanGuardSink("loss").runs_on == "all"
    assert hookbus.sink_api.Sink().runs_on == "all"


def test_bad_runs_on_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"runs_on must be one of 'chief', 'all', 'each' \(got 'everywhere'\)"):
        CSVSink(tmp_path / "m.csv", runs_on="everywhere")
    with pytest.raises(ValueError, match="runs_on='each' needs a sink with an output path"):
        NanGuardSink("loss").runs_on = "each"
    with pytest.raises(ValueError, match="runs_on='each' is for sinks"):
        hookbus.EventBus().on("after_run", print, runs_on="each")


def test_task_from_tf_config() -> None:
    cluster = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}

    def config(task: dict[str, Any], jobs: dict[str, Any] = cluster) -> dict[str, str]:
        return {"TF_CONFIG": json.dumps({"cluster": jobs, "task": task})}

    assert hookbus.Task.from_tf_config({}) is None
    assert hookbus.Task.from_tf_config(config({"type": "worker", "index": 0})) == hookbus.Task("worker", 0, True)
    assert hookbus.Task.from_tf_config(config({"type": "worker", "index": 1})).is_chief is False  # type: ignore[union-attr]
    chief_job = {**cluster, "chief": ["h:4"]}
    assert hookbus.Task.from_tf_config(config({"type": "worker", "index": 0}, chief_job)).is_chief is False  # type: ignore[union-attr]
    assert hookbus.Task.from_tf_config(config({"type": "chief", "index": 0}, chief_job)).is_chief is True  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="cluster has no chief"):
        hookbus.Task.from_tf_config(config({"type": "ps", "index": 0}, {"ps": ["h:1"]}))
    with pytest.raises(ValueError, match="task worker:5 is not in its cluster"):
        hookbus.Task.from_tf_config(config({"type": "worker", "index": 5}))
    with pytest.raises(ValueError, match="parameter servers and evaluators run no training hook"):
        hookbus.Task.from_tf_config(config({"type": "ps", "index": 0}))
    assert hookbus.Task.from_tf_config(config({"type": "evaluator", "index": 0})) is None
    with pytest.raises(ValueError, match="TF_CONFIG must be JSON"):
        hookbus.Task.from_tf_config({"TF_CONFIG": "{not json"})


@pytest.mark.parametrize(("index", "expected"), [(0, ["all", "chief"]), (1, ["all"])])
def test_bus_calls_only_the_subscribers_of_its_task(tmp_path: Path, index: int, expected: list[str]) -> None:
    bus = hookbus.EventBus()
    got: list[tuple[str, Any, Any, Any]] = []
    bus.on("after_run", lambda e: got.append(("all", e.task_type, e.task_index, e.local_step)))
    bus.on("after_run", lambda e: got.append(("chief", e.task_type, e.task_index, e.local_step)), runs_on="chief")
    each = bus.attach(CSVSink(tmp_path / "m.csv", every_n_steps=1, runs_on="each"))
    publisher = ScriptedPublisher(bus, keys=["loss"], task=hookbus.Task("worker", index))
    with bus:
        publisher.core.count_local_step(7)
        publisher.run([{"loss": 1.0}])
    assert sorted(name for name, *_ in got) == expected
    assert {tuple(rest) for _, *rest in got} == {("worker", index, 7)}
    assert each.path == tmp_path / f"m.worker-{index}.csv"
    assert each.path.exists()
    assert not (tmp_path / "m.csv").exists()


def test_one_machine_events_carry_no_task() -> None:
    bus = hookbus.EventBus()
    got: list[Any] = []
    bus.on("after_run", got.append)
    with bus:
        ScriptedPublisher(bus, keys=["loss"]).run([{"loss": 1.0}])
    assert (got[0].task_type, got[0].task_index, got[0].local_step) == (None, None, None)


def test_a_cluster_hook_fails_before_training_without_a_placed_global_step(tf_graph: Any) -> None:
    tf = pytest.importorskip("tensorflow")
    task = hookbus.Task("worker", 0)
    with pytest.raises(ValueError, match="check_stop_every_n_steps must be a positive int \\(got 0\\)"):
        hookbus.EventBusHook(hookbus.EventBus(), task=task, check_stop_every_n_steps=0)
    with pytest.raises(TypeError, match="task must be a hookbus.Task"):
        hookbus.EventBusHook(hookbus.EventBus(), task="worker:0")  # type: ignore[arg-type]
    step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.assign_add(step, 1)
    hook = hookbus.EventBusHook(hookbus.EventBus(), train_op=train_op, task=task)
    with pytest.raises(ValueError, match="the global step has no device.*replica_device_setter"):
        hook.begin()


# -- integration: real local clusters ----------------------------------------------------------
@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run every scenario's cluster at once; yield ``{scenario: {"out", "reports", "logs"}}``."""
    runs: dict[str, Any] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = iter(free_ports(3 * len(SCENARIOS)))  # at once, so no two tasks share one
        for scenario in SCENARIOS:
            out = tmp_path_factory.mktemp(scenario)
            ps, w0, w1 = (f"127.0.0.1:{next(ports)}" for _ in range(3))
            cluster = {"ps": [ps], "worker": [w0, w1]}
            base = {"cluster": cluster, "scenario": scenario, "out": str(out)}
            server = start(CHILD, {**base, "type": "ps", "index": 0})
            workers = [start(CHILD, {**base, "type": "worker", "index": i}) for i in (0, 1)]
            procs += [server, *workers]
            runs[scenario] = {"out": out, "server": server, "workers": workers}
        collect(runs, DEADLINE)
        yield runs
    finally:
        stop(procs)  # the parameter servers serve forever; workers only if they hung


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_only_the_chief_writes_and_stop_at_step_on_the_chief_stops_both(clusters: dict[str, Any]) -> None:
    chief, other = reports(clusters, "files")
    out: Path = clusters["files"]["out"]
    assert (chief["error"], other["error"]) == (None, None), (chief, other)
    assert chief["stop_reason"].startswith("reached step")
    assert other["stop_source"] == "cluster"
    assert other["stop_reason"].startswith("worker-0: reached step")
    assert (chief["task"], other["task"]) == (["worker", 0], ["worker", 1])
    assert other["local_step"] <= other["step"]  # its own steps, and the shared global step
    # Examples count each worker's own runs (the other worker moves the shared step too): issue 48 item 3.
    for worker in (chief, other):
        assert worker["examples"] == worker["local_step"] * 8, worker
    assert chief["examples"] < chief["step"] * 8  # not the shared step's count
    # Chief-only sinks: files under w0 only.
    assert (out / "w0" / "metrics.csv").exists()
    assert list((out / "w0" / "tb" / "train").glob("events.out.tfevents.*"))
    assert (out / "w0" / "ckpt" / "checkpoint").exists()
    assert not (out / "w1").exists()
    assert sorted(p.name for p in out.glob("*.csv")) == ["each.worker-0.csv", "each.worker-1.csv"]
    rows = (out / "w0" / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("step,")
    assert int(rows[-1].split(",")[0]) >= 5


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_the_chief_sets_the_one_learning_rate_every_worker_trains_with(clusters: dict[str, Any]) -> None:
    """Issue 27, parameter-server training: the rate variable lives on the parameter server, so
    the chief's change is every worker's from the step it applied it at; worker 1's own request
    is dropped (with a warning): no worker ever trains with it."""
    chief, other = reports(clusters, "files")
    assert (chief["error"], other["error"]) == (None, None), (chief, other)
    [(applied, old, new, source)] = chief["changes"]
    assert applied >= 20
    assert (old, new, source) == (pytest.approx(0.01), pytest.approx(0.001), "Steer")
    assert other["changes"] == []
    assert len(other["dropped"]) == 1, other
    # The chief changed it between its own steps: every step it ran before used the old rate, after the new.
    assert all(r == pytest.approx(0.01 if s <= applied else 0.001) for s, r in chief["rates"]), chief["rates"]
    # Worker 1 trains with the one shared rate, never its own 0.5: the old one, then the new one
    # for good. The step applied is the global step read right after the assign (in the same run on
    # the parameter server): worker 1's runs that ended before the assign have steps up to it, those
    # that began after the read steps past it; only a run in flight at the assign, or one ending in
    # the moment between the assign and that read, can be either (two at most).
    rates = [r for _, r in other["rates"]]
    assert all(r == pytest.approx(0.01) or r == pytest.approx(0.001) for r in rates), rates
    switch = next((i for i, r in enumerate(rates) if r == pytest.approx(0.001)), len(rates))
    assert all(r == pytest.approx(0.001) for r in rates[switch:]), other["rates"]
    off = [(s, r) for s, r in other["rates"] if (r == pytest.approx(0.001)) != (s > applied)]
    assert len(off) <= 2, (applied, other["rates"])


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_nan_on_one_worker_stops_every_worker(clusters: dict[str, Any]) -> None:
    chief, other = reports(clusters, "nan")
    assert str(other["error"]).startswith("NonFiniteError: loss is non-finite"), other
    assert chief["error"] is None, chief
    assert chief["stop_source"] == "cluster"
    assert chief["stop_reason"].startswith("worker-1: NonFiniteError: loss is non-finite")
    assert chief["local"] - chief["stop_local_step"] <= 1  # it stopped at the step that saw it


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_an_early_stop_on_the_chief_stops_both_workers(clusters: dict[str, Any]) -> None:
    chief, other = reports(clusters, "early")
    assert (chief["error"], other["error"]) == (None, None), (chief, other)
    assert chief["stop_source"] == "EarlyStoppingSink"
    assert other["stop_source"] == "cluster"
    assert other["stop_reason"].startswith("worker-0: ")
    assert other["stop_reason"][len("worker-0: ") :] == chief["stop_reason"]
    # Issue 27: the rate is a schedule here: hookbus's multiplier lives on the parameter server, made
    # by whichever worker starts first; the chief's multiplier of 0.1 reaches worker 1's steps.
    [(applied, old, new, source)] = chief["changes"]
    assert (new / old, source) == (pytest.approx(0.1, rel=1e-4), "Steer")
    assert all(r == pytest.approx(0.01 if s <= applied else 0.001, rel=1e-4) for s, r in chief["rates"])
    off = [(s, r) for s, r in other["rates"] if (r == pytest.approx(0.001, rel=1e-4)) != (s > applied)]
    assert len(off) <= 2, (applied, other["rates"])
    assert other["changes"] == []


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_the_example_runs_a_local_cluster(tmp_path: Path) -> None:
    output = run_example("--local", "--dir", str(tmp_path), "--steps", "60")
    assert "worker-0: " in output
    assert "worker-1: " in output
    assert "stopped at global step" in output
    assert "worker-0: reached step" in output  # worker 1 was stopped by the chief's StopAtStepSink
    assert (tmp_path / "metrics.csv").exists()
    assert sorted(p.name for p in tmp_path.glob("workers*.csv")) == ["workers.worker-0.csv", "workers.worker-1.csv"]


def _checkpoints(directory: Path) -> list[str]:
    return sorted((str(p)[: -len(".index")] for p in directory.glob("model.ckpt-*.index")), key=step_of_prefix)


def step_of_prefix(prefix: str) -> int:
    return int(prefix.rsplit("-", 1)[1])


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_every_chief_checkpoint_is_named_after_the_global_step_it_holds(clusters: dict[str, Any]) -> None:
    """Other workers move the global step while the chief stops and saves: a checkpoint's name is
    still the step a fresh Saver restores from it, and its sink states sit beside it."""
    tf = pytest.importorskip("tensorflow")
    for scenario in SCENARIOS:
        chief, _ = reports(clusters, scenario)
        prefixes = _checkpoints(clusters[scenario]["out"] / "w0" / "ckpt")
        assert prefixes, scenario
        held = [int(tf.train.load_variable(p, "global_step")) for p in prefixes]
        assert held == [step_of_prefix(p) for p in prefixes], (scenario, prefixes)
        assert len(set(held)) == len(held)
        for prefix in prefixes:
            state = json.loads(Path(prefix + ".hookbus.json").read_text())
            assert state["step"] == step_of_prefix(prefix), prefix
        # The end's checkpoint holds at least the step of the chief's end event (read at the end;
        # the other worker may still add steps until it sees the stop).
        assert held[-1] >= chief["end_step"], (scenario, held, chief)


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_resume_from_the_chiefs_last_checkpoint_finds_the_saved_sink_state(
    clusters: dict[str, Any], tmp_path: Path
) -> None:
    tf = pytest.importorskip("tensorflow")
    from hookbus.sinks import EarlyStoppingSink

    ckpt = clusters["early"]["out"] / "w0" / "ckpt"
    restored: list[Any] = []
    with tf.Graph().as_default():
        # The chief's variables, on one machine: a Saver restores them by name.
        global_step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", initializer=5.0)
        flat = tf.identity(1.0 + 0.0 * w, name="flat")
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(tf.square(w - 1.0), global_step)
        bus = hookbus.EventBus()
        early = bus.attach(EarlyStoppingSink("flat", mode="min", patience=2, every_n_steps=5))
        bus.attach(CheckpointSink(ckpt, every_n_steps=20, every_n_secs=None))
        # Runs after the checkpoint sink has loaded the states (priority): what a resume sees.
        bus.on("session_created", lambda e: restored.append((e.step, e.restored, early.state)))
        hook = hookbus.EventBusHook(bus, {"flat": flat}, train_op=train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(ckpt)):
            pass
    ((step, was_restored, state),) = restored
    last = _checkpoints(ckpt)[-1]
    assert (step, was_restored) == (step_of_prefix(last), True)
    assert state.seen > 0  # early stopping's state came back
    assert state.best_step is not None


@pytest.mark.subprocess
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_an_evaluator_task_stops_the_cluster_and_ends_with_it(tmp_path: Path) -> None:
    """Estimator's layout: ps, chief and worker train; an evaluator outside the cluster evaluates
    the chief's checkpoints. Its early stopping stops every worker, and it ends when training ends."""
    ps, w0, w1 = (f"127.0.0.1:{port}" for port in free_ports(3))
    base = {"cluster": {"ps": [ps], "worker": [w0, w1]}, "scenario": "evaluator", "out": str(tmp_path)}
    server = start(CHILD, {**base, "type": "ps", "index": 0})
    workers = [start(CHILD, {**base, "type": "worker", "index": i}) for i in (0, 1)]
    evaluator = start(CHILD, {**base, "type": "evaluator", "index": 0})
    runs = {"evaluator": {"out": tmp_path, "workers": workers}}
    try:
        collect(runs, DEADLINE)
        code = evaluator.wait(timeout=60)
    finally:
        stop([server, *workers, evaluator])
    chief, other = reports(runs, "evaluator")
    out = (tmp_path / "evaluator0.out").read_text()
    err = (tmp_path / "evaluator0.err").read_text(errors="replace")[-3000:]
    assert code == 0, err
    lines = [line[len("REPORT ") :] for line in out.splitlines() if line.startswith("REPORT ")]
    assert lines, err
    evaluator_report = json.loads(lines[-1])
    # The evaluator's early stopping decided; the chief stopped on it, the worker through the flag.
    assert evaluator_report["stop_reason"].startswith("early stopping: eval/flat did not improve")
    assert chief["stop_source"] == "evaluator", chief
    assert chief["stop_reason"].startswith("evaluator: early stopping: eval/flat"), chief
    assert other["stop_source"] == "cluster", other
    assert other["stop_reason"].startswith("worker-0: evaluator: "), other
    assert chief["end_step"] < 20000  # not the cap
    # The evaluator ended with training: its last evaluation is the checkpoint training ended with.
    last = _checkpoints(tmp_path / "w0" / "ckpt")[-1]
    assert evaluator_report["evaluated"][-1] == step_of_prefix(last)
    assert evaluator_report["rounds"] == len(evaluator_report["evaluated"]) >= 3


LONE_WORKER = """
import sys, tensorflow as tf, hookbus
from hookbus.sinks import CSVSink
tf.compat.v1.disable_eager_execution()
ps, w0, w1 = sys.argv[1:4]
spec = tf.train.ClusterSpec({"ps": [ps], "worker": [w0, w1]})
tf.distribute.Server(spec, job_name="ps", task_index=0)
worker = tf.distribute.Server(spec, job_name="worker", task_index=1)
with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(worker_device="/job:worker/task:1", cluster=spec)):
    step = tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(tf.square(w), global_step=step)
bus = hookbus.EventBus()
bus.attach(CSVSink(sys.argv[4]))  # chief only: nothing of the bus runs on worker 1
hook = hookbus.EventBusHook(bus, {"loss": tf.square(w)}, train_op=train_op, task=hookbus.Task("worker", 1))
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:1"])
local = 0
with bus, hookbus.monitored_training_session(master=worker.target, is_chief=True, hooks=[hook], config=config) as s:
    while local < 25 and not s.should_stop():
        s.run(train_op)
        local += 1
print("trained", local, bus.step)
"""


@pytest.mark.subprocess
def test_a_worker_with_no_subscriber_of_its_own_trains_while_the_hook_learns_the_step_increment(
    tmp_path: Path,
) -> None:
    # Found by trying the start gate as a user: worker 1 with only chief-only sinks raised
    # KeyError: 'stop' at its first run (the run read the step alone, then the stop flag was looked up).
    pytest.importorskip("tensorflow")
    ps, w0, w1 = (f"127.0.0.1:{port}" for port in free_ports(3))
    done = subprocess.run(
        [sys.executable, "-c", LONE_WORKER, ps, w0, w1, str(tmp_path / "metrics.csv")],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["trained", "25", "25"]
