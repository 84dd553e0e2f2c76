"""A ``fit`` that raised: Keras calls no ``on_train_end``, so ``EventBusCallback`` learns it otherwise.

What a user does next in a notebook after an interrupted or failed ``fit``: ``model.evaluate`` with the
same callback (a test evaluation, published once, as after a completed ``fit``), or another ``fit``
without hookbus (trained with the plain learning-rate schedule, not the multiplier a reduction left
installed). The callback learns that its ``fit`` is over when the run closes (``with bus:`` left with
the error, ``bus.close()``) or when Keras starts its next call with it (``set_params``).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from _keras_data import classifier, data  # noqa: E402

import hookbus  # noqa: E402
from hookbus.sinks import CSVSink, ReduceLROnPlateauSink  # noqa: E402

TRAIN, VAL, TEST = data(64, 0), data(32, 1), data(32, 2)
BATCH = 16  # 4 steps an epoch


class Boom(RuntimeError):
    pass


class RaiseAtEpochEnd(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """A user's callback that fails at the end of epoch ``epoch`` (0-based), after its validation."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch == self.epoch:
            raise Boom(f"failed at the end of epoch {epoch}")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("where", ["with bus", "no with bus"])
def test_an_evaluate_after_a_fit_that_raised_is_a_test_evaluation(tmp_path: Path, where: str) -> None:
    """fit raises at the end of epoch 2 (step 8); the evaluate after it is published once as a test
    evaluation at step 8, as after a completed fit. Before, the callback still believed it was in
    ``fit`` and took the evaluate for fit's validation: nothing was published."""
    bus = hookbus.EventBus()
    sink = CSVSink(tmp_path / "metrics.csv", every_n_steps=4)
    bus.attach(sink)
    cb = hookbus.EventBusCallback(bus, keys=["loss", "accuracy"])
    m = classifier(keras.optimizers.SGD(0.1), ["accuracy"])

    def train() -> None:
        m.fit(*TRAIN, validation_data=VAL, epochs=3, batch_size=BATCH, verbose=0, callbacks=[cb, RaiseAtEpochEnd(1)])

    if where == "with bus":
        with pytest.raises(Boom), bus:
            train()
    else:
        with pytest.raises(Boom):
            train()
    result = m.evaluate(*TEST, batch_size=BATCH, verbose=0, callbacks=[cb], return_dict=True)
    bus.close()
    tested = rows(tmp_path / "metrics.test.csv")
    assert [int(r["step"]) for r in tested] == [8]
    assert float(tested[0]["loss"]) == pytest.approx(result["loss"], rel=1e-6)
    assert float(tested[0]["accuracy"]) == pytest.approx(result["accuracy"], rel=1e-6)
    assert [int(r["step"]) for r in rows(tmp_path / "metrics.eval.csv")] == [4, 8]  # fit's validation kept


def test_a_plain_fit_after_a_fit_that_raised_trains_with_the_plain_schedule() -> None:
    """A reduction halved a scheduled rate; the fit then raised inside ``with bus:``. A later ``fit``
    without hookbus trains with the schedule's own rate, as Keras alone would: the override hookbus
    installed on the optimizer is gone with the run."""
    schedule = keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=4, decay_rate=0.9)
    m = classifier(keras.optimizers.SGD(schedule), ["accuracy"])
    bus = hookbus.EventBus()
    bus.attach(ReduceLROnPlateauSink(monitor="eval/loss", patience=0, factor=0.5, min_delta=10.0))
    cb = hookbus.EventBusCallback(bus, keys=["loss"])
    with pytest.raises(Boom), bus:
        m.fit(*TRAIN, validation_data=VAL, epochs=3, batch_size=BATCH, verbose=0, callbacks=[cb, RaiseAtEpochEnd(1)])
    iterations = int(m.optimizer.iterations.numpy())
    assert iterations == 8
    assert float(m.optimizer.learning_rate.numpy()) == pytest.approx(float(schedule(iterations)), rel=1e-6)
    m.fit(*TRAIN, epochs=1, batch_size=BATCH, verbose=0)
    assert float(m.optimizer.learning_rate.numpy()) == pytest.approx(float(schedule(12)), rel=1e-6)


def test_an_evaluate_called_inside_fit_with_the_callback_is_still_fits() -> None:
    """A user's callback that evaluates with the bus's callback inside ``fit``: ``fit`` is not over,
    so the evaluate is taken as the ignored one inside fit, and fit goes on publishing."""
    bus = hookbus.EventBus()
    seen: list[tuple[str, int]] = []
    bus.on("after_run", lambda event: seen.append((event.mode, event.step)), every_n_steps=1)
    cb = hookbus.EventBusCallback(bus, keys=["loss"])

    class EvaluateInside(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.model.evaluate(*TEST, batch_size=BATCH, verbose=0, callbacks=[cb])

    m = classifier(keras.optimizers.SGD(0.1))
    with bus:
        m.fit(*TRAIN, epochs=2, batch_size=BATCH, verbose=0, callbacks=[cb, EvaluateInside()])
    assert [s for mode, s in seen if mode == "test"] == []
    assert [s for mode, s in seen if mode == "train"] == list(range(1, 9))
