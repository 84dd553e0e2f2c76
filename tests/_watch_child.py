"""A training process for tests/test_watch_live.py: what ``hookbus watch`` watches.

Usage: ``python tests/_watch_child.py '<json>'`` with ``out`` (a directory), ``steps`` (the last
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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def single(config: dict[str, Any]) -> None:
    import tensorflow as tf

    import hookbus
    from hookbus._demo import build_demo_regression
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
    kind, index = config["type"], int(config["index"])
    out = Path(config["out"])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": config["cluster"], "task": {"type": kind, "index": index}})
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    spec = tf.train.ClusterSpec(config["cluster"])
    server = tf.distribute.Server(spec, job_name=kind, task_index=index, start=True)
    if kind == "ps":
        server.join()
        return

    import hookbus
    from hookbus.sinks import EventLogSink

    setter = tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=spec)
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", initializer=5.0)
        loss = tf.square(w - 1.0)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)
    bus = hookbus.EventBus()
    bus.attach(EventLogSink(out / "events.jsonl", runs_on="each", flush_secs=0.1))
    bus.on("after_run", every_n_steps=1)(lambda event: None)  # every step is due: every step is recorded
    hook = hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op)
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    ready = out / "chief-ready"
    while index != 0 and not ready.exists():  # a non-chief whose first check fails sleeps 30 s
        time.sleep(0.05)
    local_steps = config.get("local_steps")
    local = 0
    with bus, hookbus.monitored_training_session(
        master=server.target, is_chief=index == 0, hooks=[hook], config=session_config,
    ) as sess:  # fmt: skip
        ready.touch()
        while not sess.should_stop() and not (out / "stop").exists():
            if local_steps is not None and local >= int(local_steps):
                break
            sess.run(train_op)
            local += 1
            time.sleep(float(config["delay"]))


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    (cluster if "cluster" in settings else single)(settings)
