r"""Multi-worker training with hookbus, on one or several machines: parameter servers or mirrored.

Two kinds of multi-worker training, chosen with ``--strategy``:

- ``ps`` (default): parameter-server training with MonitoredTrainingSession and one
  :class:`hookbus.EventBusHook` per worker;
- ``mirrored``: synchronous training under ``tf.distribute.MultiWorkerMirroredStrategy``, a
  custom loop published by :class:`hookbus.LoopPublisher` (``strategy=``).

Every task runs this same script; ``TF_CONFIG`` says which task it is. On several machines
(here a parameter server ``ps0`` and two workers ``w0``, ``w1``; ``--dir`` a shared or a local
directory, only the chief writes the chief-only files)::

    # the same on every machine:
    export CLUSTER='"cluster": {"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]}'
    # on ps0, on w0 (the chief: worker 0) and on w1 respectively:
    export TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"ps\", \"index\": 0}}"
    export TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}"
    export TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 1}}"
    # then, on each machine:
    .venv/bin/python examples/distributed.py --dir runs/dist --steps 500

The workers stop together when the chief reaches ``--steps`` (or any worker's NaN guard fires):
the stop travels through a flag on the parameter server. Stop the parameter server yourself
(Ctrl-C) when the workers are done; it serves until killed.

For a quick try on one machine, ``.venv/bin/python examples/distributed.py --local`` starts the three
tasks as processes on 127.0.0.1 (ports chosen free) and stops the parameter server at the end.

Mirrored: no parameter server; every worker runs the same steps in lockstep. Only the chief
writes the CSV and TensorBoard files; every worker saves each checkpoint (TensorFlow's rule),
the non-chiefs into a scratch directory that is removed, so ``--dir`` must be a directory every
machine shares (each worker restores from it). A stop any worker asks for is agreed by all of
them at the next multiple of 10 steps::

    export CLUSTER='"cluster": {"worker": ["w0:2222", "w1:2222"]}'
    export TF_CONFIG="{$CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}"   # on w0; index 1 on w1
    .venv/bin/python examples/distributed.py --strategy mirrored --dir /shared/runs/mirrored --steps 500

``.venv/bin/python examples/distributed.py --strategy mirrored --local`` runs both workers on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def train(directory: Path, steps: int, ready_file: Path | None) -> None:
    """Run the task ``TF_CONFIG`` names: serve (ps) or train (worker)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink, NanGuardSink, StopAtStepSink, TensorBoardSink

    tf.compat.v1.disable_eager_execution()
    config = json.loads(os.environ["TF_CONFIG"])
    kind, index = config["task"]["type"], int(config["task"]["index"])
    cluster = tf.train.ClusterSpec(config["cluster"])
    server = tf.distribute.Server(cluster, job_name=kind, task_index=index)
    if kind == "ps":
        server.join()  # serves the variables until killed
        return

    task = hookbus.Task.from_tf_config()  # what EventBusHook does by default; here for is_chief
    assert task is not None
    setter = tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x = tf.random.uniform([64, 1])
        y = 3.0 * x + 1.0
        w = tf.compat.v1.get_variable("w", initializer=0.0)
        b = tf.compat.v1.get_variable("b", initializer=0.0)
        loss = tf.reduce_mean(tf.square(w * x + b - y))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)

    bus = hookbus.EventBus()
    bus.attach(NanGuardSink("loss"))  # every worker; a NaN anywhere stops the cluster
    stop = bus.attach(StopAtStepSink(last_step=steps))
    stop.runs_on = "chief"  # the chief decides; the others follow through the shared flag
    bus.attach(CSVSink(directory / "metrics.csv", every_n_steps=20))  # chief only (default)
    bus.attach(TensorBoardSink(directory / "tb", every_n_steps=20))  # chief only (default)
    bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=200, every_n_secs=None))  # chief only
    bus.attach(CSVSink(directory / "workers.csv", every_n_steps=20, runs_on="each"))  # workers.worker-<i>.csv
    hook = hookbus.EventBusHook(bus, {"loss": loss, "w": w, "b": b}, train_op=train_op)

    # Device filters: a worker talks to the parameter servers and itself, never waits for the others.
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    if ready_file is not None and not task.is_chief:
        while not ready_file.exists():  # (--local) skip TF's 30 s wait for the chief's initialisation
            time.sleep(0.1)
    local = 0
    with (
        bus,
        hookbus.monitored_training_session(
            master=server.target,
            is_chief=bool(task.is_chief),
            hooks=[hook],
            config=session_config,
            checkpoint_dir=str(directory / "ckpt") if task.is_chief else None,
        ) as sess,
    ):
        if ready_file is not None and task.is_chief:
            ready_file.touch()
        while not sess.should_stop():
            sess.run(train_op)
            local += 1
    print(f"{task.suffix}: {local} local steps, stopped at global step {bus.step}: {bus.stop_reason}", flush=True)


def train_mirrored(directory: Path, steps: int) -> None:
    """Train as the worker ``TF_CONFIG`` names under MultiWorkerMirroredStrategy (a custom loop)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    import hookbus
    from hookbus.sinks import CheckpointSink, CSVSink, NanGuardSink, StopAtStepSink, TensorBoardSink

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    # Each worker draws its own batches (a real job shards its files by worker).
    task_id = strategy.cluster_resolver.task_id or 0
    x = tf.random.stateless_uniform([4096, 1], seed=[task_id, 0])
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, 3.0 * x + 1.0)).repeat().batch(64).with_options(options)
    batches = iter(strategy.experimental_distribute_dataset(data))

    @tf.function
    def train_step(iterator: object) -> dict[str, tf.Tensor]:
        def replica_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb) - yb)) / strategy.num_replicas_in_sync
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        # Reduced across workers, so every worker's sinks see (and decide on) the same loss.
        return {"loss": strategy.reduce("SUM", strategy.run(replica_step, args=next(iterator)), axis=None)}

    bus = hookbus.EventBus()
    bus.attach(NanGuardSink("loss"))
    bus.attach(StopAtStepSink(last_step=steps))  # every worker (the default): all ask at the same step
    bus.attach(CSVSink(directory / "metrics.csv", every_n_steps=20))  # chief only (default)
    bus.attach(TensorBoardSink(directory / "tb", every_n_steps=20))  # chief only (default)
    # Every worker saves (non-chiefs into a removed scratch directory): steps only, no time schedule.
    bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=200, every_n_secs=None))
    bus.attach(CSVSink(directory / "workers.csv", every_n_steps=20, runs_on="each"))
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    loop = hookbus.LoopPublisher(
        bus, ["loss"], step_counter=optimizer.iterations, checkpoint=checkpoint, restore=True, strategy=strategy
    )
    with bus, loop:
        while not loop.should_stop:
            loop.step(train_step(batches))
    task = bus.task.suffix if bus.task is not None else "worker-0"
    print(f"{task}: {bus.local_step} local steps, stopped at global step {bus.step}: {bus.stop_reason}", flush=True)


def run_local(directory: Path, steps: int, strategy: str = "ps", timeout: float = 180.0) -> int:
    """Start the cluster's tasks on 127.0.0.1 (a parameter server only for ``ps``); return the
    workers' worst exit code."""
    jobs = ["ps", "worker", "worker"] if strategy == "ps" else ["worker", "worker"]
    sockets = [socket.socket() for _ in jobs]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    cluster: dict[str, list[str]] = {}
    for job, s in zip(jobs, sockets, strict=True):
        cluster.setdefault(job, []).append(f"127.0.0.1:{s.getsockname()[1]}")
    for s in sockets:
        s.close()
    directory.mkdir(parents=True, exist_ok=True)
    ready = directory / ".chief-ready"
    ready.unlink(missing_ok=True)

    def start(kind: str, index: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})}
        args = [
            sys.executable,
            __file__,
            "--dir",
            str(directory),
            "--steps",
            str(steps),
            "--ready-file",
            str(ready),
            "--strategy",
            strategy,
        ]
        return subprocess.Popen(args, env=env)

    servers = [start("ps", 0)] if strategy == "ps" else []
    workers = [start("worker", i) for i in (0, 1)]
    deadline = time.monotonic() + timeout
    try:
        codes = [w.wait(timeout=max(0.1, deadline - time.monotonic())) for w in workers]
    finally:
        for proc in (*workers, *servers):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        ready.unlink(missing_ok=True)
    return max(codes, key=abs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dir", type=Path, default=None, help="output directory (default runs/distributed, runs/distributed-mirrored)"
    )
    parser.add_argument("--steps", type=int, default=500, help="global step to stop at (default 500)")
    parser.add_argument(
        "--strategy",
        choices=("ps", "mirrored"),
        default="ps",
        help="parameter servers (default) or MultiWorkerMirroredStrategy",
    )
    parser.add_argument("--local", action="store_true", help="start a 2-worker cluster (+1 ps) on 127.0.0.1")
    parser.add_argument("--ready-file", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be a positive number of steps (got {args.steps})")
    if args.dir is None:  # one per strategy: a mirrored run cannot restore a ps run's checkpoints
        args.dir = Path("runs/distributed" if args.strategy == "ps" else "runs/distributed-mirrored")
    if args.local:
        return run_local(args.dir, args.steps, args.strategy)
    if not os.environ.get("TF_CONFIG"):
        parser.error("set TF_CONFIG for this task (see the instructions above), or pass --local")
    if args.strategy == "mirrored":
        train_mirrored(args.dir, args.steps)
    else:
        train(args.dir, args.steps, args.ready_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
