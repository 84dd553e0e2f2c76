"""A training process for tests/_watch/test_watch_live.py: what ``hookbus watch`` watches.

Usage: ``python tests/_watch/_watch_child.py '<json>'`` with ``out`` (a directory), ``steps`` (the last
step), ``delay`` (seconds per step) and, for a parameter-server cluster, ``cluster``, ``type``
(``ps`` or ``worker``) and ``index``; a worker with ``local_steps`` ends its own loop after that
many runs (its log closes while the other worker trains on), the chief trains until ``out/stop``
exists. One process: the seed's regression under MonitoredTrainingSession with a checkpoint
every 20 steps, a CSV row and an event-log record every step; run again, it resumes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path: tests/ in its place, for the helpers
# the children share.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from _ps_task import ps_task, training_session, wait_for_chief  # noqa: E402 - after the path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def single(config: dict[str, Any]) -> None:
    import tensorflow as tf

    import hookbus
    from hookbus._cli._demo import build_demo_regression
    from hookbus.sinks import CheckpointSink, CSVSink, EventLogSink, StopAtStepSink

    tf.compat.v1.disable_eager_execution()
    tf.get_logger().setLevel("ERROR")
    out = Path(config["out"])
    with tf.Graph().as_default():
        model = build_demo_regression()
        bus = hookbus.EventBus()
        bus.attach(CSVSink(out / "metrics.csv", every_n_steps=1))
        bus.attach(CheckpointSink(out / "ckpt", every_n_steps=20, every_n_secs=None, keep=3))
        bus.attach(StopAtStepSink(last_step=int(config["steps"])))
        bus.attach(EventLogSink(out / "events.jsonl", flush_secs=0.1))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(out / "ckpt")) as sess:
            while not sess.should_stop():
                sess.run(model.train_op)
                time.sleep(float(config["delay"]))


def cluster(config: dict[str, Any]) -> None:
    out = Path(config["out"])
    task = ps_task(config)
    index, loss, train_op = task.index, task.loss, task.train_op

    import hookbus
    from hookbus.sinks import EventLogSink

    bus = hookbus.EventBus(system_metrics=float(config.get("system_metrics", 10.0)))
    bus.attach(EventLogSink(out / "events.jsonl", runs_on="each", flush_secs=0.1))
    bus.on("after_run", every_n_steps=1)(lambda event: None)  # every step is due: every step is recorded
    hook = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op)
    wait_for_chief(out, index)
    local_steps = config.get("local_steps")
    local = 0
    with (
        bus,
        training_session(task, [hook]) as sess,
    ):
        (out / "chief-ready").touch()
        while not sess.should_stop() and not (out / "stop").exists():
            if local_steps is not None and local >= int(local_steps):
                break
            sess.run(train_op)
            local += 1
            time.sleep(float(config["delay"]))


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    (cluster if "cluster" in settings else single)(settings)
