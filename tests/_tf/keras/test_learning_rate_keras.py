"""The learning-rate sinks beside Keras's own callbacks on the same ``fit``: ReduceLROnPlateauSink as
``ReduceLROnPlateau``, LearningRateSchedulerSink as ``LearningRateScheduler`` and as a
``LearningRateSchedule`` per step; and the plateau reduction as a multiplier on a schedule."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest
from _keras_data import KERAS_NP_ARRAY, classifier, data

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus.sinks import CSVSink, LearningRateSchedulerSink, ReduceLROnPlateauSink  # noqa: E402

pytestmark = KERAS_NP_ARRAY  # Keras's callbacks read the rate with np.array(variable)

TRAIN, VAL = data(128, 0), data(64, 1)
STEPS_PER_EPOCH = 4  # 128 examples in batches of 32
FIT = {"batch_size": 32, "verbose": 0, "shuffle": False}


class Plateau(TypedDict, total=False):
    """The arguments Keras's ReduceLROnPlateau and ReduceLROnPlateauSink share: one dict, given to both."""

    factor: float
    patience: int
    min_delta: float
    cooldown: int
    min_lr: float


def model(optimizer: Any) -> Any:
    return classifier(optimizer)


class Rates(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """The rate each epoch and each batch trains with, and each batch's loss."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[float] = []
        self.batches: list[float] = []
        self.losses: list[float] = []

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epochs.append(float(self.model.optimizer.learning_rate))

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.batches.append(float(self.model.optimizer.learning_rate))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.losses.append(float(logs["loss"]))

    def on_train_end(self, logs: Any = None) -> None:
        self.epochs.append(float(self.model.optimizer.learning_rate))  # after the last epoch's end


def _columns(path: Path) -> dict[str, list[float]]:
    """A CSV file's columns of numbers, in order, each cell read by Python's ``float``."""
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    return {name: [float(row[name]) for row in rows] for name in (rows[0] if rows else {})}


def fit(m: Any, callbacks: list[Any], epochs: int = 10) -> Rates:
    rates = Rates()
    m.fit(*TRAIN, validation_data=VAL, epochs=epochs, callbacks=[*callbacks, rates], **FIT)
    return rates


def with_bus(m: Any, *sinks: hookbus.sink_api.Sink, epochs: int = 10) -> tuple[Rates, list[Any], dict[int, float]]:
    """Fit under a bus with ``sinks``; the rates, the changes published and ``learning_rate`` by step."""
    bus = hookbus.EventBus()
    for sink in sinks:
        bus.attach(sink)
    changes: list[Any] = []
    published: dict[int, float] = {}
    bus.on("learning_rate_changed", changes.append)
    bus.on("after_run", lambda e: published.__setitem__(e.step, e.values["learning_rate"]), keys="learning_rate")
    with bus:
        rates = fit(m, [hookbus.EventBusCallback(bus, keys=["loss", "learning_rate"])], epochs)
    assert bus.stop_reason is None, f"the fit stopped after {len(rates.epochs) - 1} of {epochs} epochs"
    return rates, changes, published


def test_plateau_sink_reduces_at_the_epochs_and_to_the_rates_keras_reduce_lr_on_plateau_does() -> None:
    settings: Plateau = {"factor": 0.5, "patience": 1, "min_delta": 0.01, "cooldown": 2, "min_lr": 0.01}
    theirs = fit(model(keras.optimizers.SGD(0.5)), [keras.callbacks.ReduceLROnPlateau(monitor="val_loss", **settings)])
    sink = ReduceLROnPlateauSink(monitor="eval/loss", **settings)
    ours, changes, published = with_bus(model(keras.optimizers.SGD(0.5)), sink)

    reduced = [e for e in range(1, 11) if theirs.epochs[e] != theirs.epochs[e - 1]]
    assert len(reduced) >= 3  # the plateau fires, more than once, and reaches min_lr
    assert ours.epochs == theirs.epochs
    assert ours.batches == theirs.batches
    assert ours.losses == theirs.losses  # the same training, batch for batch
    assert [c.step for c in changes] == [e * STEPS_PER_EPOCH for e in reduced]  # applied before the epoch's first step
    # Each step publishes the rate that trained it.
    assert [published[s] for s in range(1, 10 * STEPS_PER_EPOCH + 1)] == ours.batches
    assert sink.status().startswith(f"lr {changes[-1].old:.3g} → {changes[-1].new:.3g} at step {changes[-1].step}: ")
    assert "eval/loss did not improve for 1 evaluation" in sink.status()


@pytest.mark.parametrize("start", [0.005, 0.05], ids=["starting-at-min_lr", "reduced-to-min_lr"])
def test_a_rate_at_min_lr_stays_there_without_a_warning_as_keras_reduce_lr_on_plateau_keeps_it(
    start: float, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 36, item 5: the float32 rate read back (0.004999999888) is min_lr (0.005), not below
    it: no "min_lr 0.005 is above the learning rate in effect (0.005)" warning, and no reduction
    below it, as Keras's ReduceLROnPlateau (which compares with np.float32(min_lr))."""
    # min_delta so large that only the first evaluation improves: patience=1 reduces at epoch 1's end.
    settings: Plateau = {"factor": 0.1, "patience": 1, "min_delta": 1e9, "min_lr": 0.005}
    keras_model = model(keras.optimizers.SGD(start))
    theirs = fit(keras_model, [keras.callbacks.ReduceLROnPlateau(monitor="val_loss", **settings)], epochs=5)
    with caplog.at_level(logging.WARNING, "hookbus"):
        ours, changes, _ = with_bus(
            model(keras.optimizers.SGD(start)), ReduceLROnPlateauSink(monitor="eval/loss", **settings), epochs=5
        )
    assert [r.getMessage() for r in caplog.records if "min_lr" in r.getMessage()] == []
    at_min = float(np.float32(0.005))
    expected = [float(np.float32(start))] * 2 + [at_min] * 3 if start > 0.005 else [at_min] * 5
    assert keras_model.history.history["learning_rate"] == expected  # the rate each epoch trained with
    assert theirs.epochs == [*expected, at_min]  # the same at each epoch's begin, then at train end
    assert ours.epochs == theirs.epochs
    assert ours.losses == theirs.losses  # the same training, batch for batch
    assert [(c.step, c.new) for c in changes] == ([(2 * STEPS_PER_EPOCH, at_min)] if start > 0.005 else [])


def test_scheduler_sink_per_epoch_sets_the_rates_keras_learning_rate_scheduler_does() -> None:
    def schedule(epoch: int, lr: float) -> float:
        return lr if epoch < 2 else lr * 0.7

    theirs = fit(model(keras.optimizers.SGD(0.2)), [keras.callbacks.LearningRateScheduler(schedule)], epochs=6)
    ours, changes, _ = with_bus(model(keras.optimizers.SGD(0.2)), LearningRateSchedulerSink(schedule), epochs=6)
    assert ours.epochs == theirs.epochs
    assert ours.losses == theirs.losses
    assert [c.step for c in changes] == [e * STEPS_PER_EPOCH for e in range(2, 6)]


def test_scheduler_sink_per_step_trains_as_a_keras_learning_rate_schedule() -> None:
    boundaries, values = [5, 13], [0.3, 0.1, 0.02]
    keras_schedule = keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, values)
    theirs = fit(model(keras.optimizers.SGD(keras_schedule)), [], epochs=5)

    def schedule(step: int, lr: float) -> float:  # step: the steps completed, as a schedule sees iterations
        return values[sum(step > b for b in boundaries)]

    sink = LearningRateSchedulerSink(schedule, per="step")
    ours, changes, published = with_bus(model(keras.optimizers.SGD(0.3)), sink, epochs=5)
    assert ours.losses == theirs.losses
    assert [c.step for c in changes] == [b + 1 for b in boundaries]
    expected = [values[sum(s - 1 > b for b in boundaries)] for s in range(1, 21)]
    assert [published[s] for s in range(1, 21)] == pytest.approx(expected, rel=1e-7)


def test_on_a_learning_rate_schedule_the_plateau_reduction_is_a_multiplier_on_top_of_it() -> None:
    schedule = keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=4, decay_rate=0.9)
    m = model(keras.optimizers.SGD(schedule))
    with pytest.raises(TypeError):  # Keras's own callback cannot
        fit(m, [keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_delta=0.01)], 6)

    sink = ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=1, min_delta=0.01)
    _, changes, published = with_bus(model(keras.optimizers.SGD(schedule)), sink, epochs=10)
    assert len(changes) >= 2, "the plateau fired less than twice"
    assert [c.multiplier for c in changes] == pytest.approx([0.5 ** (i + 1) for i in range(len(changes))])
    multiplier, waiting = 1.0, list(changes)
    for step in range(1, 41):  # each step trains with the schedule's value times the multiplier then
        while waiting and waiting[0].step < step:
            multiplier = waiting.pop(0).multiplier
        assert published[step] == pytest.approx(float(schedule(step - 1)) * multiplier, rel=1e-6)


def test_the_final_event_publishes_the_rate_that_trained_the_last_step_not_a_reduction_decided_after_it() -> None:
    # min_delta so large that only the first evaluation improves: patience=1 reduces at epoch 2's
    # end, after the last step trained; the at-end event of that step must still carry its rate.
    sink = ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=1, min_delta=1e9)
    bus = hookbus.EventBus()
    bus.attach(sink)
    changes: list[Any] = []
    final: list[tuple[int, float]] = []
    bus.on("learning_rate_changed", changes.append)

    def at_end(event: Any) -> None:
        if event.final:
            final.append((event.step, event.values["learning_rate"]))

    bus.on("after_run", at_end, keys="learning_rate", every_n_steps=1000, at_end=True)
    callback = hookbus.EventBusCallback(bus, keys=["loss", "learning_rate"])
    with bus:
        rates = fit(model(keras.optimizers.SGD(0.5)), [callback], epochs=2)
    assert [(c.step, c.old, c.new) for c in changes] == [(2 * STEPS_PER_EPOCH, 0.5, 0.25)]
    assert rates.batches[-1] == 0.5
    assert final == [(2 * STEPS_PER_EPOCH, 0.5)]  # step 8 trained with 0.5; 0.25 trains from a next fit's first step


@pytest.mark.parametrize("peer", ["plateau", "scheduler"])
def test_the_rate_a_sink_steers_is_in_history_and_in_the_logs_of_the_callbacks_after_hookbus_as_keras_puts_it(
    peer: str, tmp_path: Path
) -> None:
    """Issue 38, item 3: Keras's ReduceLROnPlateau and LearningRateScheduler put ``learning_rate``
    (the rate the epoch trained with) into the epoch logs: ``history`` has it, and so has a later
    ``CSVLogger``. With hookbus's sinks in their place, the same columns, the same values."""

    def schedule(epoch: int, lr: float) -> float:
        return lr if epoch < 2 else lr * 0.7

    settings: Plateau = {"factor": 0.5, "patience": 1, "min_delta": 0.01, "cooldown": 1, "min_lr": 0.01}
    if peer == "plateau":
        keras_rate: Any = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", **settings)
        sink: hookbus.sink_api.Sink = ReduceLROnPlateauSink(monitor="eval/loss", **settings)
    else:
        keras_rate, sink = keras.callbacks.LearningRateScheduler(schedule), LearningRateSchedulerSink(schedule)
    theirs = model(keras.optimizers.SGD(0.5))
    theirs.fit(
        *TRAIN,
        validation_data=VAL,
        epochs=6,
        callbacks=[keras_rate, keras.callbacks.CSVLogger(str(tmp_path / "theirs.csv"))],
        **FIT,
    )

    bus = hookbus.EventBus()
    bus.attach(sink)
    bus.attach(CSVSink(tmp_path / "ours.csv", epochs=True))
    ours = model(keras.optimizers.SGD(0.5))
    with bus:
        ours.fit(
            *TRAIN,
            validation_data=VAL,
            epochs=6,
            callbacks=[hookbus.EventBusCallback(bus), keras.callbacks.CSVLogger(str(tmp_path / "after.csv"))],
            **FIT,
        )

    rates = theirs.history.history["learning_rate"]
    assert len(set(rates)) >= 2  # the rate changed during the fit
    assert ours.history.history == theirs.history.history
    # Read with Python's float (exact); older pandas's default parser may land one ulp off the value written.
    after, keras_csv = _columns(tmp_path / "after.csv"), _columns(tmp_path / "theirs.csv")
    assert list(after) == list(keras_csv)
    assert after["learning_rate"] == keras_csv["learning_rate"]
    assert _columns(tmp_path / "ours.csv")["learning_rate"] == rates  # CSVSink(epochs=True) has the column too
