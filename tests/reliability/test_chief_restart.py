"""A parameter-server chief SIGKILLed and restarted with the same command while its worker trains on.

One real local cluster (a parameter server, the chief and one worker, each its own process on
127.0.0.1): the chief is killed between checkpoints, then inside a save (in the barrier, before the
states and the pointer are written), and started again each time. The worker never stops, so by the
time the restarted chief reads the global step, the worker has moved it on from the checkpoint
TensorFlow restored; and the restore moves the step back under the worker.

A restarted chief's session begins slowly (``_restart_child.py``: 2 s between TensorFlow's restore
and hookbus's restore mark), so the worker reads its step going back well before the mark. Every
row the worker published after that restore's resume point stays in its file, once (issue 45 item
3: the worker used to publish a resume point for its own step read, then another at the mark's
step, which cut the rows it had published on the restored timeline in between).
"""

from __future__ import annotations

import csv
import functools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _clusters import free_ports, task_env

pytestmark = pytest.mark.subprocess
pytest.importorskip("mlflow")  # the chief tracks its run (a dev dependency)

CHILD = Path(__file__).with_name("_restart_child.py")
LAST_STEP = 1400
DEADLINE = 150.0  # the whole cluster run, seconds (a hang fails, it does not block)


def _start(config: dict[str, Any], log: str) -> subprocess.Popen[bytes]:
    env = task_env()
    out = Path(config["out"])
    with (out / f"{log}.out").open("wb") as stdout, (out / f"{log}.err").open("wb") as stderr:
        return subprocess.Popen([sys.executable, str(CHILD), json.dumps(config)], stdout=stdout, stderr=stderr, env=env)


def _wait(what: str, ready: Callable[[], Any], procs: dict[str, subprocess.Popen[bytes]], out: Path) -> Any:
    """Poll ``ready`` until it gives something truthy; fail with the logs if a task died or time ran out."""
    end = time.monotonic() + 90
    while time.monotonic() < end:
        found = ready()
        if found:
            return found
        dead = [name for name, p in procs.items() if p.poll() is not None]
        if dead:
            break
        time.sleep(0.02)
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(out.glob("*.err")))
    pytest.fail(f"waiting for {what}: {'exited: ' + ', '.join(dead) if dead else 'timed out'}\n{logs}")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _latest(out: Path) -> int | None:
    """The step of the checkpoint the pointer names (what TensorFlow's session creator restores)."""
    pointer = out / "ckpt" / "checkpoint"
    if not pointer.exists():
        return None
    for line in pointer.read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            return int(line.split('"')[1].rsplit("-", 1)[1])
    return None


def _saved_beyond(out: Path, step: int) -> bool:
    return (_latest(out) or 0) >= step


def _sessions(out: Path, log: str) -> list[dict[str, Any]]:
    path = out / f"{log}.out"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [json.loads(line[len("SESSION ") :]) for line in lines if line.startswith("SESSION ")]


def _state_beside(out: Path, step: int, sink: str) -> dict[str, Any]:
    """The state of the sink named ``sink`` as the checkpoint at ``step`` saved it."""
    (state,) = (out / "ckpt").glob(f"*-{step}.hookbus.json")
    sinks = json.loads(state.read_text())["sinks"]
    (saved,) = [v for k, v in sinks.items() if sink in k]
    return dict(saved)


def _own_file(out: Path) -> Path:
    """Worker 1's own CSV (``runs_on="each"``)."""
    (own,) = [p for p in out.glob("each*.csv") if "1" in p.name]
    return own


def _published(out: Path, pid: int, since: float) -> tuple[int, list[int]]:
    """Worker 1's life ``pid`` after the wall time ``since``: its resume points, and the steps it
    published to its CSV's schedule after the first of them."""
    lines = [json.loads(line) for line in (out / "published-1.jsonl").read_text().splitlines()]
    mine = [line for line in lines if line["pid"] == pid and line["wall"] >= since]
    first = next(i for i, line in enumerate(mine) if line["resume"])
    resumes = sum(1 for line in mine if line["resume"])
    return resumes, [line["step"] for line in mine[first:] if not line["resume"]]


def _rows(path: Path) -> list[tuple[int, float]]:
    with path.open(newline="") as file:
        return [(int(row["step"]), float(row["wall_time"])) for row in csv.DictReader(file)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    ports = free_ports(3)
    spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    base = {"cluster": spec, "out": str(tmp_path), "last_step": LAST_STEP}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    run = {"base": base, "procs": procs, "out": tmp_path}
    try:
        yield run
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_restarted_chief_loads_the_restored_checkpoints_states_and_the_worker_replans(
    cluster: dict[str, Any],
) -> None:
    base, procs, out = cluster["base"], cluster["procs"], cluster["out"]

    def task(kind: str, index: int) -> dict[str, Any]:
        return {**base, "type": kind, "index": index}

    procs["ps"] = _start(task("ps", 0), "ps0")
    procs["chief"] = _start(task("worker", 0), "chief-1")
    procs["worker"] = _start(task("worker", 1), "worker1")

    # 1. Killed between checkpoints: just after the one at or past step 200 is complete.
    _wait("a checkpoint at step 200", lambda: (_latest(out) or 0) >= 200, procs, out)
    time.sleep(0.2)  # about 30 steps: the next checkpoint is 100 steps on
    _kill(procs.pop("chief"))
    time.sleep(1.0)  # the worker trains on alone
    restores = []
    for life, inside_save in ((2, False), (3, True)):
        restored = _latest(out)
        assert restored is not None
        began = time.time()
        (out / "chief-ready").unlink()  # the chief touches it again once its session has begun
        procs["chief"] = _start(task("worker", 0), f"chief-{life}")
        log = f"chief-{life}"
        (session,) = _wait(f"{log}'s session", functools.partial(_sessions, out, log), procs, out)
        restores.append((restored, session["step"], began))
        # The step read is the worker's by now, not the checkpoint's; the states are the checkpoint's.
        assert session["restored"] is True
        assert session["step"] >= restored
        assert session["early"] == _state_beside(out, restored, "EarlyStopping"), (restored, session)
        assert session["early"]["seen"] > 0
        assert session["plateau"] == _state_beside(out, restored, "ReduceLROnPlateau"), (restored, session)
        if inside_save:
            break
        # 2. Killed inside a save: held in the barrier of the next checkpoint, then killed there.
        _wait("two more checkpoints", functools.partial(_saved_beyond, out, restored + 200), procs, out)
        (out / "hold-save").touch()
        _wait("the chief inside a save", lambda: (out / "saving").exists(), procs, out)
        _kill(procs.pop("chief"))
        (out / "hold-save").unlink()
        time.sleep(1.0)

    # 3. The worker killed and started again: the cluster goes on. Killed once it trains on the
    # restored timeline: its file has a row past the restore written after the chief started, and
    # none of the rows the restore undid. (A row written after the chief's start alone is not
    # enough: the worker trains on the old timeline until it reads the chief's restore mark, seconds
    # later, and a worker killed before it read it leaves the undone rows, which no later process
    # can tell apart. A CI run killed it there.)
    last_restore, _, last_began = restores[-1]

    def on_the_restored_timeline() -> bool:
        rows = _rows(_own_file(out))
        return any(s > last_restore and t >= last_began for s, t in rows) and not any(
            s > last_restore and t < last_began for s, t in rows
        )

    _wait("the worker on the restored timeline", on_the_restored_timeline, procs, out)

    # The chief's session has begun (its restore mark written), and the worker has written a few
    # rows since: it has read the mark (it reads it at least every 10 of its steps), and the rows it
    # published up to the last of them are on disk (a SIGKILL loses only what its writer had not
    # flushed yet).
    _wait("the restarted chief's session", lambda: (out / "chief-ready").exists(), procs, out)
    marked = (out / "chief-ready").stat().st_mtime

    def restored_rows_on_disk() -> list[int]:
        return [s for s, t in _rows(_own_file(out)) if s > last_restore and t >= marked]

    _wait("rows of the restored timeline on disk", lambda: len(restored_rows_on_disk()) >= 5, procs, out)
    on_disk = max(restored_rows_on_disk())
    rows_before = len(_rows(_own_file(out)))
    first_life = procs["worker"].pid
    # The chief waits for the restarted worker's first rows: alone, it reached the last step before the
    # worker had started again on a busy machine (four test workers on two cores), and the worker's
    # file did not go on.
    (out / "hold-chief").touch()
    _kill(procs.pop("worker"))
    time.sleep(0.5)
    procs["worker"] = _start(task("worker", 1), "worker1-2")
    _wait("the restarted worker's rows", lambda: len(_rows(_own_file(out))) > rows_before, procs, out)
    (out / "hold-chief").unlink()

    # Every task ends by itself at the last step.
    for name, log in (("chief", "chief-3"), ("worker", "worker1-2")):
        try:
            assert procs[name].wait(timeout=DEADLINE) == 0, (out / f"{log}.err").read_text(errors="replace")
        except subprocess.TimeoutExpired:
            pytest.fail(f"the {name} did not end")
    reports = [
        json.loads(line[len("REPORT ") :])
        for log in ("chief-3", "worker1-2")
        for line in (out / f"{log}.out").read_text().splitlines()
        if line.startswith("REPORT ")
    ]
    assert [r["index"] for r in reports] == [0, 1]
    assert LAST_STEP <= reports[0]["end_step"] <= LAST_STEP + 20  # the worker's runs land beside the chief's

    # The chief's outputs: each step once, in order.
    chief_steps = [s for s, _ in _rows(out / "chief.csv")]
    assert chief_steps == sorted(set(chief_steps))
    logged = [
        r["step"]
        for r in map(json.loads, (out / "events.jsonl").read_text().splitlines())
        if r["record"] == "step" and r.get("mode") == "train" and not r.get("final")
    ]
    assert logged
    assert logged == sorted(set(logged))

    from mlflow.tracking import MlflowClient  # the tracker's run, as its client reads it

    client = MlflowClient(f"sqlite:///{out / 'mlflow' / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    (run,) = client.search_runs([experiment.experiment_id])
    tracked = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert len(tracked) == len(set(tracked)) > 0
    assert run.info.status == "FINISHED"

    # The worker's own file: after each rewind, the rows are the restored timeline's (written after
    # the restart), each step once in order, up to the end.
    rows = _rows(_own_file(out))
    assert len(rows) > rows_before  # the restarted worker's file goes on
    steps = [s for s, _ in rows]
    assert steps == sorted(set(steps))
    stale = [(s, t) for s, t in rows if s > last_restore and t < last_began]
    assert not stale, f"rows of the timeline the restore at step {last_restore} undid: {stale[:5]}"
    # What the worker published on the restored timeline, after the restore's resume point, stays
    # (up to the last row on disk when it was killed).
    resumes, published = _published(out, first_life, last_began)
    published = [s for s in published if s <= on_disk]
    assert published
    cut = sorted(set(published) - set(steps))
    assert not cut, f"rows worker 1 published after the resume point of the restore at {last_restore}, cut: {cut}"
    assert resumes == 1, f"worker 1 resumed {resumes} times for the one restore at {last_restore}"
    assert steps[-1] >= LAST_STEP - 60, steps[-10:]
    print("restores (checkpoint step, step read, +moved):", [(c, s, s - c) for c, s, _ in restores])
