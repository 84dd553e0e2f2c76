"""One task of a local parameter-server cluster, for tests/_tf/hook/test_distributed.py.

Usage: ``python tests/_tf/hook/_cluster_child.py '<json>'`` with ``cluster`` (the cluster spec), ``type``
(``ps`` or ``worker``), ``index``, ``scenario`` (``files``, ``nan`` or ``early``) and ``out`` (a
directory). A parameter server serves until it is killed; a worker trains until hookbus stops it
and prints one JSON line (``REPORT {...}``) saying how it ended. In ``files`` the rate is a
variable on the parameter server: the chief asks for a tenth of it at step 20, worker 1 for 0.5
at step 10 (dropped: only the chief sets the rate), and each reports the rate of every step.
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 8  # the batch size each worker declares: its examples are its own runs times it


def main(config: dict[str, Any]) -> None:
    # If the test is about to kill a hung worker, say where it hung.
    faulthandler.dump_traceback_later(float(config.get("dump_after", 120)), exit=False)
    kind, index, scenario = config["type"], int(config["index"]), config["scenario"]
    out = Path(config["out"])
    # The hook reads this process's task from TF_CONFIG (the variable every TF cluster sets).
    os.environ["TF_CONFIG"] = json.dumps({"cluster": config["cluster"], "task": {"type": kind, "index": index}})
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    if kind == "evaluator":  # not a cluster member: it reads the chief's checkpoints
        evaluate(tf, out)
        return
    spec = tf.train.ClusterSpec(config["cluster"])
    server = tf.distribute.Server(spec, job_name=kind, task_index=index, start=True)
    if kind == "ps":
        server.join()
        return

    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink, NanGuardSink, StopAtStepSink, TensorBoardSink

    is_chief = index == 0
    setter = tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=spec)
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", initializer=5.0)
        loss = tf.square(w - 1.0)
        # Added to the reported loss only, so a NaN on one worker does not reach the shared weights.
        poison = tf.compat.v1.placeholder_with_default(0.0, [], name="poison")
        flat = tf.identity(1.0 + 0.0 * w, name="flat")  # never improves: early stopping's monitor
        if scenario == "early":  # a rate tensor (a schedule): hookbus's multiplier on the parameter server
            rate: Any = tf.compat.v1.train.exponential_decay(0.01, global_step, 10**6, 0.5)
        else:
            rate = tf.compat.v1.get_variable("rate", initializer=0.01, trainable=False)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(rate).minimize(loss, global_step=global_step)

    own = out / f"w{index}"
    bus = hookbus.EventBus()
    bus.attach(NanGuardSink("loss"))
    bus.attach(CSVSink(own / "metrics.csv", every_n_steps=5))
    bus.attach(TensorBoardSink(own / "tb", every_n_steps=5))
    bus.attach(CheckpointSink(own / "ckpt", every_n_steps=20, every_n_secs=None))
    bus.attach(CSVSink(out / "each.csv", every_n_steps=5, runs_on="each"))
    steer: Any = None
    if scenario == "files":
        bus.attach(StopAtStepSink(last_step=60)).runs_on = "chief"  # attribute: sinks without the argument
        steer = bus.attach(_steer(index))
    if scenario == "early":
        early = bus.attach(EarlyStoppingSink("flat", mode="min", patience=2, every_n_steps=5))
        early.runs_on = "chief"
        steer = bus.attach(_steer(index, chief_at=5, multiplier=True))
    if scenario == "evaluator":  # only a cap: the evaluator's early stopping ends the run
        bus.attach(StopAtStepSink(last_step=20000)).runs_on = "chief"
    seen: dict[str, Any] = {}

    @bus.on("session_created")
    def joined(event: Any) -> None:
        seen.update(task=[event.task_type, event.task_index])  # also for a worker that runs no step

    @bus.on("after_run")
    def record(event: Any) -> None:
        seen.update(
            task=[event.task_type, event.task_index],
            step=event.step,
            local_step=event.local_step,
            examples=event.examples,
        )

    @bus.on("stop_requested")
    def stopped(request: Any) -> None:
        seen.setdefault("stop_source", request.source)
        seen.setdefault("stop_local_step", bus.local_step)

    hook = hookbus.EventBusHook(
        bus, {"loss": loss + poison, "flat": flat}, train_op=train_op, learning_rate=rate, batch_size=BATCH
    )
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    ready = out / "chief-ready"
    if not is_chief:
        # A non-chief whose first readiness check fails sleeps 30 s (TF's recovery_wait_secs).
        while not ready.exists():
            time.sleep(0.05)
    local, error = 0, None
    try:
        with (
            bus,
            hookbus.monitored_training_session(
                master=server.target,
                is_chief=is_chief,
                hooks=[hook],
                config=session_config,
                checkpoint_dir=str(own / "ckpt") if is_chief else None,
            ) as sess,
        ):
            if is_chief:
                ready.touch()
            while not sess.should_stop():
                if is_chief and local == 1:
                    # Let worker 1 join before the chief can finish the run alone: on a slow or
                    # loaded machine its session may take longer to start than the chief needs
                    # for all its steps, and then it would run none.
                    until = time.monotonic() + 60
                    while not (out / "w1-joined").exists() and time.monotonic() < until:
                        time.sleep(0.01)
                nan = scenario == "nan" and index == 1 and local >= 5
                sess.run(train_op, feed_dict={poison: math.nan} if nan else None)
                local += 1
                if index == 1 and local == 1:
                    (out / "w1-joined").touch()
                time.sleep(0.002)  # keeps the files small while the other worker starts
    except Exception as caught:  # the NaN guard raises on the worker that saw the NaN
        error = f"{type(caught).__name__}: {caught}"
    report = {
        "index": index,
        "local": local,
        "stop_reason": bus.stop_reason,
        "error": error,
        "end_step": bus.step,
        **seen,
    }
    if steer is not None:
        report.update(rates=steer.seen, changes=steer.changes, dropped=steer.dropped)
    print("REPORT " + json.dumps(report), flush=True)


def _steer(index: int, chief_at: int = 20, multiplier: bool = False) -> Any:
    """Records the published rate at every step; the chief asks for a tenth of it at its first step
    from ``chief_at`` on (``multiplier``: as a multiplier of 0.1 on the schedule), worker 1 for
    0.5 at its first step from 10 on (dropped, with a warning)."""
    import logging

    from hookbus.sink_api import Schedule, Sink, require_learning_rate

    class Steer(Sink):
        default_schedule = Schedule(every_n_steps=1)

        def __init__(self) -> None:
            super().__init__(keys=["learning_rate"], on_error="raise")
            self.seen: list[list[float]] = []
            self.changes: list[list[Any]] = []
            self.dropped: list[str] = []
            self.asked = False
            parent = self

            class Dropped(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    if "is dropped" in record.getMessage():
                        parent.dropped.append(record.getMessage())

            logging.getLogger("hookbus").addHandler(Dropped())

        def setup(self, context: Any) -> None:
            super().setup(context)
            self.rate = require_learning_rate(context, "Steer")

        def on_after_run(self, event: Any) -> None:
            self.seen.append([event.step, event.values["learning_rate"]])
            if not self.asked and event.step >= (chief_at if index == 0 else 10):
                self.asked = True
                why = f"worker {index} at step {event.step}"
                if index == 0 and multiplier:
                    self.rate.request(multiplier=0.1, reason=why)
                else:
                    self.rate.request(rate=self.rate.rate / 10 if index == 0 else 0.5, reason=why)

        def on_learning_rate_changed(self, event: Any) -> None:
            self.changes.append([event.step, event.old, event.new, event.source])

    return Steer()


def evaluate(tf: Any, out: Path) -> None:
    """The evaluator task: early stopping on ``eval/flat`` (never improves) over the chief's checkpoints."""
    import hookbus
    from hookbus.sinks import EarlyStoppingSink

    tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", initializer=5.0)
    flat = tf.identity(1.0 + 0.0 * w, name="flat")
    bus = hookbus.EventBus()
    bus.attach(EarlyStoppingSink("eval/flat", mode="min", patience=1))
    steps: list[int] = []
    bus.on("after_run", lambda event: steps.append(event.step))
    hook = hookbus.EventBusHook(bus, {"flat": flat}, mode="eval")
    with bus:
        rounds = hookbus.evaluate_checkpoints(
            bus,
            eval_fetches=flat,
            checkpoint_dir=str(out / "w0" / "ckpt"),
            eval_hooks=[hook],
            eval_steps=1,
            poll_secs=0.1,
            timeout_secs=120,
        )
    report = {"rounds": rounds, "evaluated": steps, "stop_reason": bus.stop_reason}
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
