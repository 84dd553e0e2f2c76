"""A writer that hits a real file-size limit mid-run never stops training (the checkpoint barrier).

The child process sets ``RLIMIT_FSIZE`` so that the CSV and the TensorBoard event file grow past
it while checkpoints (smaller) still fit, and ignores ``SIGXFSZ`` so a write past the limit fails
with ``EFBIG``, as on a full disk. Both writers fail; at the next checkpoint the bus disables
them, reports that their output lost the exactly-once promise, and saves the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.reliability, pytest.mark.subprocess]

CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    import tensorflow as tf
    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import CheckpointSink, CSVSink, StopAtStepSink, TensorBoardSink

    out = sys.argv[1]
    tf.compat.v1.disable_eager_execution()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    with tf.Graph().as_default():
        model = build_linear_regression()
        # The largest checkpoint file is the meta graph: leave it room, then outgrow the limit
        # with ~40-byte CSV rows and ~60-byte TensorBoard events, one per step.
        meta = len(tf.compat.v1.train.export_meta_graph().SerializeToString())
        limit = max(65536, 2 * meta)
        every = (limit // 40 + 600) // 4
        last = 4 * every
        bus = hookbus.EventBus()
        bus.attach(CSVSink(os.path.join(out, "metrics.csv"), every_n_steps=1))
        bus.attach(TensorBoardSink(os.path.join(out, "tb"), every_n_steps=1))
        bus.attach(CheckpointSink(os.path.join(out, "ckpt"), every_n_steps=every, every_n_secs=None, keep=10))
        bus.attach(StopAtStepSink(last_step=last))
        errors, saved = [], []
        bus.on("subscriber_error", lambda e: errors.append([e.subscriber, e.signal, e.step, str(e.error)]))
        bus.on("checkpoint_saved", lambda e: saved.append(e.step))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        ckpt = os.path.join(out, "ckpt")
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=ckpt) as session:
            while not session.should_stop():
                session.run(model.train_op)
    print(json.dumps({"step": bus.step, "last": last, "every": every, "limit": limit,
                      "errors": errors, "saved": saved}))
    """
)


def test_a_writer_past_a_file_size_limit_is_disabled_and_training_keeps_its_checkpoints(tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env, timeout=240, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    last, every = report["last"], report["every"]
    assert report["step"] == last
    # Every scheduled checkpoint was saved, also those after the writers failed.
    assert report["saved"] == list(range(every, last + 1, every))
    assert (tmp_path / "ckpt" / f"model.ckpt-{last}.index").exists()
    pointer = (tmp_path / "ckpt" / "checkpoint").read_text()
    assert f'model_checkpoint_path: "model.ckpt-{last}"' in pointer
    # Both writers really hit the limit, and were disabled at a barrier with a report.
    assert os.path.getsize(tmp_path / "metrics.csv") == report["limit"]
    flush_failures = {name for name, signal, _, _ in report["errors"] if signal == "flush"}
    assert flush_failures == {"CSVSink", "TensorBoardSink"}, report["errors"]
    for name in ("CSVSink", "TensorBoardSink"):
        assert f"subscriber {name!r} could not flush for the checkpoint" in result.stderr
    assert "lost the exactly-once promise" in result.stderr
    # The report counts the rows lost exactly: every step up to the barrier that disabled the
    # sink gave it a row (every_n_steps=1), and what is not a complete line in the file is lost
    # (rows buffered when the flush failed, the torn last one, those refused after the failure).
    (step, message), *_ = [(e[2], e[3]) for e in report["errors"] if e[:2] == ["CSVSink", "flush"]]
    found = re.search(r"(\d+) rows? not written", message)
    assert found, message
    complete = (tmp_path / "metrics.csv").read_text().count("\n") - 1  # less the header
    assert int(found.group(1)) == step - complete > 0, (message, step, complete)
    # The states saved beside later checkpoints leave the disabled writers out.
    state = json.loads((tmp_path / "ckpt" / f"model.ckpt-{last}.hookbus.json").read_text())
    assert "CSVSink" not in state["sinks"]
