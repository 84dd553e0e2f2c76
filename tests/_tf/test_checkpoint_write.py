"""The TF2 checkpoint write traced once (hookbus/_tf/_checkpoint_write.py, issue 30 item 6): files equal to
an eager ``tf.train.Checkpoint.write``'s, a new trace when the checkpoint's objects change, an eager
write for a checkpoint that saves Python state, one trace for every fit of the same model."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _keras_data import data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from hookbus import EventBus, EventBusCallback  # noqa: E402 - after the importorskip
from hookbus._tf._checkpoint_write import CompiledWrite  # noqa: E402
from hookbus.sinks import CheckpointSink  # noqa: E402

X, Y = data(64, 0)


def model() -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    m.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def contents(prefix: str) -> dict[str, Any]:
    """Every tensor a checkpoint holds, by key (the object graph included, as its serialized proto)."""
    reader = tf.train.load_checkpoint(prefix)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def files(prefix: str) -> dict[str, bytes]:
    """A checkpoint's files by suffix (``.index``, ``.data-00000-of-00001``), with their bytes."""
    return {path[len(prefix) :]: Path(path).read_bytes() for path in glob.glob(prefix + ".*")}


def assert_same(ours: str, eager: str) -> None:
    """The same files as an eager write's, byte for byte (its one data file, its index)."""
    a, b = contents(ours), contents(eager)
    assert sorted(a) == sorted(b)
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    assert files(ours) == files(eager)


def test_the_traced_write_holds_what_an_eager_write_holds_at_every_save(tmp_path: Path) -> None:
    m = model()
    checkpoint = tf.train.Checkpoint(model=m, optimizer=m.optimizer)
    write = CompiledWrite(checkpoint)
    for i in range(3):
        m.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False)
        assert write(str(tmp_path / f"ours-{i}")) == str(tmp_path / f"ours-{i}")
        checkpoint.write(str(tmp_path / f"eager-{i}"))
        assert_same(str(tmp_path / f"ours-{i}"), str(tmp_path / f"eager-{i}"))  # the values after each fit
    assert write.traces == 1
    fresh = model()
    fresh.optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).read(str(tmp_path / "ours-2")).assert_consumed()
    assert all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), m.get_weights(), strict=True))
    assert int(fresh.optimizer.iterations.numpy()) == int(m.optimizer.iterations.numpy()) == 24


def test_a_change_of_the_checkpoints_objects_traces_again(tmp_path: Path) -> None:
    m = model()  # its optimizer is not built yet: no slots, no iterations
    checkpoint = tf.train.Checkpoint(model=m, optimizer=m.optimizer)
    write = CompiledWrite(checkpoint)
    write(str(tmp_path / "before"))
    m.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False)  # builds the optimizer's variables
    write(str(tmp_path / "after"))
    checkpoint.write(str(tmp_path / "eager"))
    assert write.traces == 2
    assert len(contents(str(tmp_path / "after"))) > len(contents(str(tmp_path / "before")))
    assert_same(str(tmp_path / "after"), str(tmp_path / "eager"))


class Counter(tf.train.experimental.PythonState):  # type: ignore[misc,name-defined]
    """Python state saved as a string: what a traced write would freeze at its trace."""

    def __init__(self) -> None:
        self.count = 0

    def serialize(self) -> str:
        return str(self.count)

    def deserialize(self, string_value: str) -> None:
        self.count = int(string_value)


def test_a_checkpoint_with_python_state_is_written_eagerly_with_its_current_value(tmp_path: Path) -> None:
    counter = Counter()
    checkpoint = tf.train.Checkpoint(counter=counter, v=tf.Variable(1.0))
    write = CompiledWrite(checkpoint)
    for count in (1, 2):
        counter.count = count
        checkpoint.v.assign(float(count))
        write(str(tmp_path / f"c-{count}"))
        back = Counter()
        tf.train.Checkpoint(counter=back, v=tf.Variable(0.0)).read(str(tmp_path / f"c-{count}")).assert_consumed()
        assert back.count == count
    assert write.traces == 0


def test_every_fit_of_the_same_model_saves_through_one_trace(tmp_path: Path) -> None:
    m = model()
    directory = tmp_path / "ckpt"
    bus = EventBus()
    bus.attach(CheckpointSink(str(directory), every_n_steps=8, every_n_secs=None, keep=10))
    callback = EventBusCallback(bus)
    backend: Any = callback.checkpoint_backend
    writes = []
    with bus:
        for _ in range(3):
            m.fit(X, Y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
            writes.append(backend._write)
    assert writes[0] is writes[1] is writes[2]
    assert writes[0].traces == 1
    latest = tf.train.latest_checkpoint(str(directory))
    assert latest is not None
    assert latest.endswith("-24"), os.listdir(directory)
    fresh = model()
    fresh.optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).read(latest).assert_consumed()
    assert all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), m.get_weights(), strict=True))
    assert int(fresh.optimizer.iterations.numpy()) == 24
