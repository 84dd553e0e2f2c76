"""A latest checkpoint whose damage is inside a tensor's bytes (hookbus/_tf/_checkpoint_tf1.py
``restore_failed``, issue 39 item 3).

The check before a restore reads only the index and the data files' sizes, so a damaged byte
inside a tensor passes it; TensorFlow's restore then fails on that tensor's checksum. The start
fails naming the checkpoint and the damage, sets it aside with the pointer on the previous one,
and the next start resumes from that one with its sinks' states, every CSV row once. Real
training, real files; the TF1 session and the Keras callback (the TF2 publishers' restore).
"""

from __future__ import annotations

import csv
import glob
import os
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus._cli._demo import build_linear_regression  # noqa: E402
from hookbus._tf._checkpoint_index import data_file, parse_index  # noqa: E402
from hookbus._tf._checkpoint_tf1 import checkpoint_problem, read_problem  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, StopAtStepSink  # noqa: E402

DAMAGED = "Bytes inside a tensor are damaged"


def _damage_a_tensor(prefix: str) -> None:
    """Flip every bit of the largest numeric tensor's bytes in place: the files keep their sizes."""
    bundle = parse_index(Path(prefix + ".index").read_bytes())
    entry = max((e for e in bundle.entries.values() if not e.string and not e.sliced), key=lambda e: e.size)
    path = data_file(prefix, entry.shard, bundle.num_shards)
    with open(path, "r+b") as f:
        f.seek(entry.offset)
        flipped = bytes(b ^ 0xFF for b in f.read(entry.size))
        f.seek(entry.offset)
        f.write(flipped)
    assert checkpoint_problem(prefix) is None  # the index and the sizes are whole: the check cannot see it
    assert read_problem(prefix) is not None  # reading the tensors back can


def _steps(path: Path) -> list[int]:
    with path.open(newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def _train_tf1(directory: Path, last_step: int) -> int:
    """One process's worth of TF1 training; the step the session started from."""
    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=5, keep=3))
        bus.attach(CSVSink(directory / "m.csv", every_n_steps=1))
        bus.attach(StopAtStepSink(last_step=last_step))
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook], checkpoint_dir=str(directory / "ckpt")) as s:
            first = bus.step
            while not s.should_stop():
                s.run(model.train_op)
    return first


def test_tf1_a_damaged_tensor_fails_the_start_sets_it_aside_and_the_next_start_resumes_before_it(
    tmp_path: Path,
) -> None:
    _train_tf1(tmp_path, 15)
    latest, previous = str(tmp_path / "ckpt" / "model.ckpt-15"), str(tmp_path / "ckpt" / "model.ckpt-10")
    _damage_a_tensor(latest)
    with pytest.raises(RuntimeError, match=DAMAGED) as raised:
        _train_tf1(tmp_path, 20)
    message = str(raised.value)
    assert f"cannot restore checkpoint {latest}: DataLossError: " in message
    assert "Checksum does not match" in message  # TensorFlow's own line, not its traceback
    assert f"moved to {tmp_path / 'ckpt' / 'unreadable' / 'model.ckpt-15'}" in message
    assert f"the previous checkpoint {previous} (step 10)" in message
    assert isinstance(raised.value.__cause__, tf.errors.DataLossError)
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) == previous
    assert sorted(os.listdir(tmp_path / "ckpt" / "unreadable")) == [
        "model.ckpt-15.data-00000-of-00001",
        "model.ckpt-15.hookbus.json",
        "model.ckpt-15.index",
        "model.ckpt-15.meta",
    ]
    assert _train_tf1(tmp_path, 20) == 10  # the next start resumes from the previous checkpoint
    assert _steps(tmp_path / "m.csv") == list(range(1, 21))  # every row exactly once
    assert checkpoint_problem(latest) is None
    assert read_problem(latest) is None  # step 15 was trained and saved again, whole


BATCH, STEPS_PER_EPOCH = 32, 4


def _fit(directory: Path, epochs: int, *, restore: bool, hidden: tuple[int, ...] = (8,)) -> hookbus.EventBusCallback:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH * STEPS_PER_EPOCH, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(units, activation="relu") for units in hidden]
    model = keras.Sequential([keras.Input((4,)), *layers, keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(directory / "ckpt", every_n_steps=STEPS_PER_EPOCH, keep=3))
    bus.attach(CSVSink(directory / "m.csv", every_n_steps=1))
    callback = hookbus.EventBusCallback(bus, keys=["loss"], restore=restore)
    with bus:
        model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[callback])
    return callback


def test_keras_a_damaged_tensor_fails_the_fit_sets_it_aside_and_the_next_fit_resumes_before_it(
    tmp_path: Path,
) -> None:
    _fit(tmp_path, 3, restore=False)
    latest, previous = str(tmp_path / "ckpt" / "model.ckpt-12"), str(tmp_path / "ckpt" / "model.ckpt-8")
    _damage_a_tensor(latest)
    with pytest.raises(RuntimeError, match=DAMAGED) as raised:
        _fit(tmp_path, 5, restore=True)
    assert f"cannot restore checkpoint {latest}: DataLossError: " in str(raised.value)
    assert f"the previous checkpoint {previous} (step 8)" in str(raised.value)
    assert glob.glob(str(tmp_path / "ckpt" / "unreadable" / "model.ckpt-12.*"))
    callback = _fit(tmp_path, 5, restore=True)
    assert callback.restored_from == previous
    assert _steps(tmp_path / "m.csv") == list(range(1, 21))
    assert read_problem(latest) is None  # trained and saved again


def test_the_only_checkpoint_damaged_inside_is_named_and_left_in_place(tmp_path: Path) -> None:
    _fit(tmp_path, 1, restore=False)
    only = str(tmp_path / "ckpt" / "model.ckpt-4")
    _damage_a_tensor(only)
    with pytest.raises(RuntimeError, match="no earlier checkpoint is kept: move it away") as raised:
        _fit(tmp_path, 2, restore=True)
    assert only in str(raised.value)
    assert not os.path.exists(tmp_path / "ckpt" / "unreadable")  # nothing moved: a person decides
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) == only


@pytest.mark.parametrize(("hidden", "error"), [((16,), "ValueError"), ((8, 2), "AssertionError")])
def test_a_checkpoint_of_another_model_is_not_called_damaged(
    tmp_path: Path, hidden: tuple[int, ...], error: str
) -> None:
    # The script changed its model (wider; or one more layer, on top of the saved ones) and resumes
    # from the old directory: the checkpoint is whole, the model differs. Nothing is moved or damaged.
    _fit(tmp_path, 2, restore=False)
    latest = str(tmp_path / "ckpt" / "model.ckpt-8")
    with pytest.raises(RuntimeError) as raised:
        _fit(tmp_path, 3, restore=True, hidden=hidden)
    message = str(raised.value)
    assert message.startswith(f"cannot restore checkpoint {latest} into this model: {error}: "), message
    assert "saved from a model whose variables differ from this one's" in message
    assert "another checkpoint directory" in message
    for wrong in ("damaged", "move it away", "previous checkpoint"):
        assert wrong not in message
    assert not os.path.exists(tmp_path / "ckpt" / "unreadable")
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) == latest
    assert read_problem(latest) is None
