"""One task of a local parameter-server cluster whose chief the test kills and restarts, for
tests/reliability/test_chief_restart.py.

Usage: ``python tests/reliability/_restart_child.py '<json>'`` with ``cluster``, ``type`` (``ps`` or
``worker``), ``index``, ``out`` and ``last_step``. Every worker runs the same script (the command a
restart repeats): the chief (worker 0) keeps checkpoints, early stopping, a plateau sink steering
the rate (a variable on the parameter server), CSV, an event log and MLflow; every worker keeps its
own CSV (``runs_on="each"``). The chief prints one ``SESSION {...}`` line per session (the step it
read, whether it restored, the stateful sinks' states as loaded); a worker that ends prints
``REPORT {...}``. While ``out/hold-save`` exists, the chief's barrier (inside a save: before the
states and the pointer are written) touches ``out/saving`` and waits. A restarted chief's session
begins slowly: a hook before hookbus's sleeps ``MARK_DELAY`` seconds between TensorFlow's restore
and hookbus's restore mark, while the workers already read the restored step. Each worker writes
what it published to its CSV's schedule, and its resume points, to ``out/published-<index>.jsonl``
(``{"pid", "wall", "step", "resume"}``): the rows its files must keep.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run as a script, this file's folder comes first on sys.path: tests/ in its place, for the helpers
# the children share.
sys.path[0] = str(Path(__file__).resolve().parents[1])

MARK_DELAY = 2.0

from _ps_task import ps_task, training_session, wait_for_chief  # noqa: E402 - after the path


def main(config: dict[str, Any]) -> None:
    faulthandler.dump_traceback_later(120, exit=False)
    out = Path(config["out"])
    task = ps_task(config, rate_variable=True)  # a parameter server serves here until it is killed
    tf, index = task.tf, task.index

    import hookbus
    from hookbus.sink_api import Sink
    from hookbus.sinks import (
        CheckpointSink,
        CSVSink,
        EarlyStoppingSink,
        EventLogSink,
        MLflowSink,
        ReduceLROnPlateauSink,
        StopAtStepSink,
    )

    class HeldSave(Sink):
        """Holds the chief inside the barrier while ``out/hold-save`` exists (the test kills it there)."""

        def flush(self) -> None:
            if (out / "hold-save").exists():
                (out / "saving").touch()
                time.sleep(30)

    flat = tf.identity(1.0 + 0.0 * task.loss, name="flat")  # never improves: early stopping only counts
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(out / "ckpt", every_n_steps=100, every_n_secs=None))
    early = bus.attach(EarlyStoppingSink("flat", mode="min", patience=10**6, every_n_steps=10))
    early.runs_on = "chief"
    plateau = bus.attach(ReduceLROnPlateauSink("flat", mode="min", patience=3, factor=0.9, min_lr=1e-4))
    plateau.runs_on = "chief"
    bus.attach(CSVSink(out / "chief.csv", every_n_steps=10))
    bus.attach(EventLogSink(out / "events.jsonl", every_n_steps=10, flush_secs=0.2))
    bus.attach(MLflowSink(directory=out / "mlflow", every_n_steps=10, flush_secs=0.2))
    bus.attach(CSVSink(out / "each.csv", every_n_steps=10, runs_on="each", flush_secs=0.2))
    bus.attach(StopAtStepSink(last_step=int(config["last_step"]))).runs_on = "chief"
    bus.attach(HeldSave()).runs_on = "chief"

    @bus.on("after_run", every_n_steps=10, runs_on="chief")
    def held(event: Any) -> None:  # while ``out/hold-chief`` exists (the test restarts the worker)
        while (out / "hold-chief").exists():
            time.sleep(0.05)

    @bus.on("session_created", runs_on="chief")
    def session(event: Any) -> None:  # after the checkpoint sink (attached first) loaded the states
        line = {"step": event.step, "restored": event.restored, "wall": time.time()}
        line.update(early=early.state_dict(), plateau=plateau.state_dict())
        print("SESSION " + json.dumps(line), flush=True)

    published = (out / f"published-{index}.jsonl").open("a", buffering=1)

    def note(event: Any, resume: bool) -> None:
        line = {"pid": os.getpid(), "wall": time.time(), "step": event.step, "resume": resume}
        published.write(json.dumps(line) + "\n")

    bus.on("after_run", lambda event: note(event, False), every_n_steps=10, runs_on="all")  # each.csv's
    bus.on("session_created", lambda event: note(event, True), runs_on="all")

    class SlowRestoredSession(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc,name-defined]
        """Between TensorFlow's restore and hookbus's mark, as other hooks' work before it can be."""

        def after_create_session(self, session: Any, coord: Any) -> None:
            if index == 0 and int(session.run(task.global_step)) > 0:
                time.sleep(MARK_DELAY)

    hook = hookbus.EventBusHook(bus, {"loss": task.loss, "flat": flat}, train_op=task.train_op, learning_rate=task.rate)
    wait_for_chief(out, index)
    local = 0
    with (
        bus,
        training_session(task, [SlowRestoredSession(), hook], str(out / "ckpt") if index == 0 else None) as sess,
    ):
        if index == 0:
            (out / "chief-ready").touch()
        while not sess.should_stop():
            sess.run(task.train_op)
            local += 1
            time.sleep(0.01)  # both tasks at about the same pace; the worker's alone is slower
    report = {"index": index, "local": local, "end_step": bus.step, "stop_reason": bus.stop_reason}
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
