"""Argument mistakes a Keras user makes, on real Keras models: each fails naming what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from hookbus import EventBus, EventBusCallback, LoopPublisher, UnknownKeyError  # noqa: E402 - after the importorskip
from hookbus.publisher_api import PublisherCore  # noqa: E402
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink  # noqa: E402


def _model(compiled: bool = True) -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    if compiled:
        m.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return m


def _data() -> tuple[Any, Any]:
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def test_keys_as_one_string_is_one_key_on_every_path(tmp_path: Path) -> None:
    bus = EventBus()
    callback = EventBusCallback(bus, keys="loss")
    assert callback.keys == ("loss",)
    assert {"loss", "eval/loss", "epoch/loss", "epoch/val_loss"} <= bus.known_keys
    assert not {"l", "o", "s", "eval/l", "epoch/l"} & bus.known_keys  # never its characters
    bus.attach(CSVSink(tmp_path / "epochs.csv", epochs=True))
    x, y = _data()
    with bus:
        _model().fit(x, y, validation_data=(x, y), epochs=2, batch_size=8, callbacks=[callback], verbose=0)
    header = (tmp_path / "epochs.csv").read_text().splitlines()[0]
    assert {"epoch", "loss", "val_loss"} <= set(header.split(","))
    assert not {"l", "o", "s"} & set(header.split(","))


def test_an_uncompiled_model_fails_naming_compile_as_keras_does() -> None:
    """An optimizer set by hand is not a compiled model (a hand-written loop driving Keras callbacks)."""
    m = _model(compiled=False)
    m.optimizer = keras.optimizers.SGD(0.01)
    callbacks = keras.callbacks.CallbackList([EventBusCallback(EventBus())], model=m, epochs=2, steps=4, verbose=0)
    message = (
        r"^EventBusCallback needs a compiled model \(model.compile\(optimizer=...\)\); "
        r"got Sequential '.*' not compiled$"
    )
    with pytest.raises(ValueError, match=message):
        callbacks.on_train_begin()
    with pytest.raises(ValueError, match=r"You must call `compile\(\)`"):  # Keras's own fit says the same
        _model(compiled=False).fit(*_data(), callbacks=[EventBusCallback(EventBus())], verbose=0)


def test_a_compiled_model_driven_by_a_callback_list_without_params_runs() -> None:
    """A hand-written loop's ``CallbackList(callbacks, model=m)`` gives the callback no params."""
    m = _model()
    bus = EventBus()
    steps: list[int] = []
    bus.on("after_run", lambda event: steps.append(event.step))
    callbacks = keras.callbacks.CallbackList([EventBusCallback(bus)], model=m)
    x, y = _data()
    with bus:
        callbacks.on_train_begin()
        for batch in range(2):
            logs = m.train_on_batch(x, y, return_dict=True)
            callbacks.on_train_batch_end(batch, logs)
        callbacks.on_train_end()
    assert steps == [1, 2]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda tmp: EarlyStoppingSink(monitor="val_loss"),
            r"subscriber 'EarlyStoppingSink' needs key 'val_loss', which no publisher attached to this bus provides "
            r"\(did you mean 'eval/loss' or .*\? Keras's 'val_loss' is 'eval/loss' on the bus\); known keys: ",
        ),
        (lambda tmp: EarlyStoppingSink(monitor="eval/los"), r"needs key 'eval/los', .* \(did you mean 'eval/loss'"),
        (
            lambda tmp: CheckpointSink(tmp / "c", keep_best=1, monitor="val_loss", mode="min"),
            r"CheckpointSink monitors 'val_loss', which no publisher attached to this bus provides \(did you mean "
            r"'eval/loss' or .*\? Keras's 'val_loss' is 'eval/loss' on the bus\); known keys: ",
        ),
    ],
    ids=["early stopping on val_loss", "a close spelling", "best checkpoints on val_loss"],
)
def test_a_keras_metric_name_is_answered_with_the_bus_name(tmp_path: Path, make: Any, message: str) -> None:
    bus = EventBus()
    bus.attach(make(tmp_path))
    callback = EventBusCallback(bus)
    batches: list[int] = []
    bus.on("after_run", lambda event: batches.append(event.step))
    x, y = _data()
    with pytest.raises(UnknownKeyError, match=message), bus:
        _model().fit(x, y, validation_data=(x, y), epochs=1, batch_size=8, callbacks=[callback], verbose=0)
    assert batches == []  # before the first batch


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            ["loss", "val_loss"],
            r"\['val_loss'\] are not in Keras's batch logs \['loss'\] \('val_loss' is a validation "
            r"value: declare 'loss', published as 'eval/loss'\)",
        ),
        (["los"], r"\['los'\] are not in Keras's batch logs \['loss'\] \(did you mean 'loss'\?\)"),
    ],
    ids=["val_loss declared", "a close spelling"],
)
def test_callback_keys_keras_does_not_log_get_the_name_to_use(keys: list[str], message: str) -> None:
    bus = EventBus()
    bus.on("after_run", lambda event: None)
    callback = EventBusCallback(bus, keys=keys)
    x, y = _data()
    with pytest.raises(ValueError, match=message), bus:
        _model().fit(x, y, validation_data=(x, y), epochs=1, batch_size=8, callbacks=[callback], verbose=0)


@pytest.mark.parametrize("keys", [None, 5], ids=["None", "an int"])
@pytest.mark.parametrize(
    ("publisher", "argument"),
    [
        (lambda bus, keys: EventBusCallback(bus, keys=keys), "keys"),
        (lambda bus, keys: LoopPublisher(bus, keys=keys), "keys"),
        (lambda bus, keys: LoopPublisher(bus, keys="loss", eval_keys=keys), "eval_keys"),
        (lambda bus, keys: PublisherCore(bus, keys), "keys"),
    ],
    ids=["EventBusCallback", "LoopPublisher", "LoopPublisher eval_keys", "PublisherCore"],
)
def test_publisher_keys_that_are_not_keys_fail_naming_the_argument(publisher: Any, argument: str, keys: Any) -> None:
    """Before: ``TypeError: 'NoneType' object is not iterable``, naming neither the argument nor what it takes."""
    with pytest.raises(ValueError, match=rf"^{argument} must be a key or a list of keys \(got {keys!r}\)$"):
        publisher(EventBus(), keys)


def test_callback_keys_keras_does_not_log_fail_at_the_first_batch_also_when_no_step_is_due() -> None:
    """Only an evaluation subscriber (no train step is ever due): before, ``keys=["los"]`` trained
    every epoch while early stopping on ``eval/los`` waited for a value Keras never logs, with a
    warning that pointed at fit's validation data."""
    bus = EventBus()
    bus.attach(EarlyStoppingSink("eval/los", patience=1, mode="min"))
    callback = EventBusCallback(bus, keys=["los"])
    batches: list[int] = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batches.append(batch))
    x, y = _data()
    message = r"\['los'\] are not in Keras's batch logs \['loss'\] \(did you mean 'loss'\?\)"
    with pytest.raises(ValueError, match=message), bus:
        _model().fit(x, y, validation_data=(x, y), epochs=3, batch_size=8, callbacks=[callback, counter], verbose=0)
    assert batches == []  # the first batch's end, before any other callback saw it


def test_an_unknown_key_under_fit_is_answered_in_the_callbacks_terms(tmp_path: Path) -> None:
    # 'accuracy' is a metric the model logs but the callback does not declare: the advice is
    # EventBusCallback's keys=, not the TF1 hook's "before the first session starts".
    bus = EventBus()
    bus.attach(CSVSink(tmp_path / "m.csv", keys=["accuracy"]))
    callback = EventBusCallback(bus)
    x, y = _data()
    with pytest.raises(UnknownKeyError) as raised, bus:
        _model().fit(x, y, epochs=1, batch_size=8, callbacks=[callback], verbose=0)
    message = str(raised.value)
    assert "needs key 'accuracy'" in message
    assert message.endswith(
        "EventBusCallback provides the Keras log names its keys= declares, e.g. EventBusCallback(bus, "
        "keys=['loss', 'accuracy']): each on training steps, as eval/<name> from the validation (Keras's "
        "val_<name>), as test/<name> from evaluate outside fit, as epoch/<name> in epoch events."
    )
    assert "session" not in message
    assert "EventBusHook" not in message


def test_an_unknown_key_under_a_loop_is_answered_in_the_loops_terms(tmp_path: Path) -> None:
    bus = EventBus()
    bus.attach(CSVSink(tmp_path / "m.csv", keys=["accuracy"]))
    publisher = LoopPublisher(bus, keys=["loss"])
    with pytest.raises(UnknownKeyError) as raised, bus:
        publisher.begin()
    assert str(raised.value).endswith(
        "LoopPublisher provides the keys it is given: keys= on training steps, eval_keys= as eval/<key>."
    )
