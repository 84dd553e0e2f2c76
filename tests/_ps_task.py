"""One task of a local parameter-server cluster, for the cluster test children
(``_tf/hook/_gate_child.py``, ``_watch/_watch_child.py``, ``reliability/_restart_child.py``):
TF_CONFIG, the task's server, the regression ``w -> 1`` placed on the parameter server, and the
non-chief's wait for the chief's session.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PSWorker", "ps_task", "training_session", "wait_for_chief"]


@dataclass(frozen=True)
class PSWorker:
    """A worker's part of the cluster: its server, its index and the graph it trains."""

    tf: Any
    server: Any
    index: int
    global_step: Any
    loss: Any
    train_op: Any
    session_config: Any  # this worker sees the parameter servers and itself only
    rate: Any  # the learning rate: a variable on the parameter server with ``rate_variable``, else 0.01


def ps_task(config: dict[str, Any], *, rate_variable: bool = False) -> PSWorker:
    """Start the task ``config`` names (``cluster``, ``type``, ``index``); a parameter server
    serves here until it is killed, a worker gets its graph built under the device setter (with
    ``rate_variable``, its learning rate a variable the sinks can steer)."""
    kind, index = config["type"], int(config["index"])
    # The hook reads this process's task from TF_CONFIG (the variable every TF cluster sets).
    os.environ["TF_CONFIG"] = json.dumps({"cluster": config["cluster"], "task": {"type": kind, "index": index}})
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    spec = tf.train.ClusterSpec(config["cluster"])
    server = tf.distribute.Server(spec, job_name=kind, task_index=index, start=True)
    if kind == "ps":
        server.join()
        raise SystemExit(0)
    setter = tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=spec)
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", initializer=5.0)
        loss = tf.square(w - 1.0)
        rate: Any = tf.compat.v1.get_variable("rate", initializer=0.01, trainable=False) if rate_variable else 0.01
        train_op = tf.compat.v1.train.GradientDescentOptimizer(rate).minimize(loss, global_step=global_step)
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    return PSWorker(tf, server, index, global_step, loss, train_op, session_config, rate)


def wait_for_chief(out: Path, index: int) -> None:
    """A non-chief waits for ``out/chief-ready`` (one that finds the model uninitialised sleeps 30 s)."""
    ready = out / "chief-ready"
    while index != 0 and not ready.exists():
        time.sleep(0.05)


def training_session(task: PSWorker, hooks: list[Any], checkpoint_dir: str | None = None) -> Any:
    """hookbus's ``MonitoredTrainingSession`` for ``task`` (worker 0 is the chief)."""
    import hookbus

    return hookbus.monitored_training_session(
        master=task.server.target,
        is_chief=task.index == 0,
        hooks=hooks,
        config=task.session_config,
        checkpoint_dir=checkpoint_dir,
    )
