"""A training process for the reliability suite: the seed model with every file-writing sink.

``python _train_child.py DIR LAST_STEP GEN MODE``; trains (resuming from ``DIR/ckpt``) to
``LAST_STEP`` with CSVSink, TensorBoardSink, CheckpointSink, EarlyStoppingSink and
StopAtStepSink, and appends what the test compares to ``DIR/log.jsonl``.

``HOOKBUS_TEST_KILL=phase:n`` makes the process SIGKILL itself:

- ``step:n``: on the training thread, once step n reached every subscriber;
- ``shipped:n``: on the training thread at step n, once MLflowSink's run holds a point
  (``HOOKBUS_TEST_MLFLOW``);
- ``timer:ms``: from another thread, ms milliseconds after the session starts (anywhere);
- ``checkpoint:n``: inside the checkpoint barrier of the first save at step >= n, after the
  sinks' state file is written and before the model is saved;
- ``csv_flush:n``: inside the CSV writer's flush (on its thread) once step n is reached;
- ``tb_flush:n``: inside the TensorBoard sink's flush at the first barrier from step n;
- ``prune:n``: at the first save from step n that prunes, after the pointer names the new
  checkpoint and before the one beyond ``keep`` is deleted.

``HOOKBUS_TEST_EVENT_LOG=1`` adds an EventLogSink (``DIR/events.jsonl``), and with
``HOOKBUS_TEST_EVENT_LOG_EVERY=n`` a second one on its own schedule (``every_n_steps=n``,
``DIR/events.every-<n>.jsonl``; ``test_event_log_kill.py``).

``HOOKBUS_TEST_MLFLOW="URI EXPERIMENT"`` adds an MLflowSink logging every step there
(``test_mlflow_kill.py``).

``MODE`` ``signal`` (for the SIGINT/SIGTERM/exception tests) adds a ConsoleSink, prints
``marker`` at step 30 and keeps training slowly; ``exception`` raises ``ValueError`` at step 30.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

CKPT_EVERY = 25
EVAL_EVERY = 5


def main() -> None:
    directory, last_step, gen, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    phase, _, at = os.environ.get("HOOKBUS_TEST_KILL", "").partition(":")
    at_step = int(at) if at else 0
    if mode != "train":  # Ctrl-C must raise KeyboardInterrupt even if our parent ignores SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)

    import tensorflow as tf

    import hookbus
    from hookbus._checkpoints._store import step_of
    from hookbus._cli._demo import build_linear_regression
    from hookbus._tf import _checkpoint_tf1 as files
    from hookbus.sinks import CheckpointSink, ConsoleSink, CSVSink, EarlyStoppingSink, StopAtStepSink, TensorBoardSink

    log = open(os.path.join(directory, "log.jsonl"), "a")  # noqa: SIM115 - open until the process ends

    def record(**entry: Any) -> None:
        log.write(json.dumps({"gen": gen, **entry}) + "\n")
        log.flush()

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        early = EarlyStoppingSink("loss", patience=10**9, every_n_steps=EVAL_EVERY)
        csv_sink = CSVSink(os.path.join(directory, "metrics.csv"), every_n_steps=1, flush_secs=0.05)
        tb = TensorBoardSink(os.path.join(directory, "tb"), every_n_steps=1, flush_secs=0.05)
        sinks: list[hookbus.sink_api.Sink] = [
            early,
            CheckpointSink(os.path.join(directory, "ckpt"), every_n_steps=CKPT_EVERY, every_n_secs=None, keep=3),
            csv_sink,
            tb,
            StopAtStepSink(last_step=last_step),
        ]
        if mode != "train":
            sinks.append(ConsoleSink(run_name="child", refresh_per_second=20, plain_every_n_secs=0))
        if os.environ.get("HOOKBUS_TEST_EVENT_LOG"):  # the event-log kill test (test_event_log_kill.py)
            from hookbus.sinks import EventLogSink

            sinks.append(EventLogSink(os.path.join(directory, "events.jsonl"), flush_secs=0.05))
            every = os.environ.get("HOOKBUS_TEST_EVENT_LOG_EVERY")  # and one on its own schedule
            if every:
                path = os.path.join(directory, f"events.every-{every}.jsonl")
                sinks.append(EventLogSink(path, every_n_steps=int(every), flush_secs=0.05, name=f"every {every}"))
        if os.environ.get("HOOKBUS_TEST_MLFLOW"):  # the MLflow kill test (test_mlflow_kill.py): URI, experiment
            from hookbus.sinks import MLflowSink

            uri, experiment = os.environ["HOOKBUS_TEST_MLFLOW"].split(" ", 1)
            tracker = MLflowSink(uri, experiment=experiment, every_n_steps=1, flush_secs=0.05)
            sinks.append(tracker)
        for sink in sinks:
            bus.attach(sink)
            real_close = sink.close

            def close(sink: hookbus.sink_api.Sink = sink, real_close: Any = real_close) -> None:
                real_close()
                record(event="closed", sink=sink.name)

            sink.close = close  # type: ignore[method-assign]
        bus.on("session_created", lambda e: record(event="session", step=e.step, state=early.state_dict()))
        bus.on("checkpoint_saved", lambda e: record(event="checkpoint", step=e.step, state=early.state_dict()))
        bus.on("exception", lambda e: record(event="exception", step=e.step, error=repr(e.error)))
        bus.on("stop_requested", lambda e: record(event="stop", step=e.step, reason=e.reason))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss, "accuracy": model.accuracy}, train_op=model.train_op)

        if phase == "step":
            bus.on("after_run", lambda e: die() if e.step >= at_step else None)
        elif phase == "shipped":  # HOOKBUS_TEST_MLFLOW only

            def die_once_shipped(event: hookbus.Event) -> None:
                if event.step < at_step:
                    return
                until = time.monotonic() + 60
                while (tracker.run is None or tracker.run.shipped["train"] < 1) and time.monotonic() < until:
                    time.sleep(0.01)  # the training thread waits: no step, no checkpoint, meanwhile
                die()

            bus.on("after_run", die_once_shipped)
        elif phase == "timer":
            timer = threading.Timer(at_step / 1000, die)
            timer.daemon = True
            bus.on("session_created", lambda e: timer.start() if not timer.is_alive() else None)
        elif phase == "checkpoint":
            backend = hook.checkpoint_backend
            assert backend is not None
            real_save = backend.save

            def save(path: str) -> str:
                if (step_of(path) or 0) >= at_step:
                    die()  # the state file beside it is written, the model is not
                return real_save(path)

            backend.save = save  # type: ignore[method-assign]
        elif phase == "csv_flush":
            real_flush_files = csv_sink._flush_files

            def flush_files() -> None:
                if bus.step >= at_step:
                    die()  # rows are written to the file object, not yet handed to the OS
                real_flush_files()

            csv_sink._flush_files = flush_files  # type: ignore[method-assign]
        elif phase == "prune":
            real_remove = files.TensorFlowStore.remove

            def remove_checkpoint(store: files.TensorFlowStore, path: str) -> None:
                if bus.step >= at_step:
                    die()  # the pointer no longer names ``path``; its files are all still there
                real_remove(store, path)

            files.TensorFlowStore.remove = remove_checkpoint  # type: ignore[method-assign,assignment]
        elif phase == "tb_flush":
            real_tb_flush = tb.flush

            def tb_flush() -> None:
                if bus.step >= at_step:
                    die()  # the CSV is flushed for this barrier, TensorBoard's queue is not
                real_tb_flush()

            tb.flush = tb_flush  # type: ignore[method-assign]
        if mode != "train":
            # Past rich's redirect: a Ctrl-C landing inside rich's own write can cost the final frame.
            bus.on("after_run", lambda e: os.write(1, b"marker\n") if e.step == 30 else None)

        ckpt = os.path.join(directory, "ckpt")
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as sess:
            while not sess.should_stop():
                sess.run(model.train_op)
                if mode != "train" and bus.step >= 30:
                    if mode == "exception":
                        raise ValueError(f"training code failed at step {bus.step}")
                    time.sleep(0.01)  # a signal arrives while steps run
        record(event="done", step=bus.step, state=early.state_dict(), stop_reason=bus.stop_reason)
    print(f"done at step {bus.step}", flush=True)


if __name__ == "__main__":
    main()
