"""A second run on one bus is a new run, not a resume (README "Guarantees", Keras parity): its sinks start
clean unless their state is restored from a checkpoint, and the dashboard says "resumed" only then.

Keras's own ``EarlyStopping`` resets its best and wait in ``on_train_begin`` (keras-team/keras#20256):
two ``fit`` calls each train at least ``patience`` epochs past their first.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

import hookbus
from hookbus.sinks import CheckpointSink, ConsoleSink, EarlyStoppingSink, NanGuardSink, StopAtStepSink
from hookbus.testing import FakeClock, ScriptedPublisher

# -- every stateful sink, scripted -----------------------------------------------------------------


def test_every_sink_with_state_starts_a_second_run_clean(clock: FakeClock) -> None:
    bus = hookbus.EventBus(clock=clock)
    early = EarlyStoppingSink("eval/loss", patience=2)
    guard = NanGuardSink("loss", on_nan="stop")
    budget = StopAtStepSink(last_step=100, max_seconds=50.0, clock=clock)
    out = io.StringIO()
    console = ConsoleSink(Console(file=out, width=120), clock=clock, live=False, plain_every_n_secs=0)
    for sink in (early, guard, budget, console):
        bus.attach(sink)
    train = ScriptedPublisher(bus, ["loss"])
    evaluate = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        train.begin()
        train.session(0)
        for step, value in enumerate([0.5, 0.9, 0.8], start=1):
            clock.advance(20.0)  # 60 s of the 50 s budget spent
            train.advance({"loss": value if step < 3 else float("nan")})
            evaluate.evaluate({"loss": value}, step=train.step)
    assert early.state.seen == 3
    # One tuple: after `assert early.stopped_at == 3` mypy holds it an int and skips the rest as unreachable.
    assert (early.stopped_at, guard.nonfinite_step) == (3, 3)
    first_stop = bus.stop_reason
    assert first_stop is not None
    # A second run of the same model in memory (nothing restored from a checkpoint).
    with bus:
        train.begin()
        train.session(3, restored=False)
        assert early.state_dict() == EarlyStoppingSink("eval/loss", patience=2).state_dict()
        assert early.stopped_at is None
        assert guard.nonfinite_step is None
        assert guard.checkpoint_veto(4) is None
        assert console.state_dict() == {"train": {}, "eval": {}}
        clock.advance(1.0)
        stopped = train.advance({"loss": 0.4})  # this run's budget is its own: 1 s of 50 spent
        evaluate.evaluate({"loss": 0.4}, step=train.step)
    assert not stopped
    assert bus.stop_reason is None
    assert early.state.seen == 1
    assert early.state.best == pytest.approx(0.4)
    assert "resumed from step" not in out.getvalue()


# -- two real Keras fits on one bus, beside Keras's EarlyStopping ------------------------------------

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

BATCH, PATIENCE = 32, 2


def _data(n: int, seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = ((x[:, 0] + rng.normal(scale=0.8, size=n)) > 0).astype("int32")
    return x, y


def _model() -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    m.compile(optimizer=keras.optimizers.Adam(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_two_fits_on_one_bus_each_stop_where_keras_early_stopping_stops(tmp_path: Path) -> None:
    """Both stoppers watch the same two fits: whichever stopped, the other must have decided the same."""
    x, y = _data(128, 0)
    validation = _data(64, 1)
    model = _model()
    bus = hookbus.EventBus()
    sink = EarlyStoppingSink("eval/loss", patience=PATIENCE)
    bus.attach(sink)
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=4))  # saved states exist, none is restored
    output = io.StringIO()
    bus.attach(ConsoleSink(Console(file=output, width=120), live=False, plain_every_n_secs=0))
    callback = hookbus.EventBusCallback(bus, keys=["loss"])
    trained = []
    for _ in range(2):
        keras_stop = keras.callbacks.EarlyStopping("val_loss", patience=PATIENCE)
        with bus:
            history = model.fit(
                x,
                y,
                batch_size=BATCH,
                epochs=40,
                validation_data=validation,
                verbose=0,
                callbacks=[callback, keras_stop],
            )
        epochs = len(history.history["loss"])
        trained.append(epochs)
        assert epochs > PATIENCE  # Keras: each fit trains at least patience epochs past its first
        assert epochs < 40, "the differential needs a fit that stops early"
        assert keras_stop.stopped_epoch == epochs - 1  # Keras decided to stop at this epoch too
        assert sink.stopped_at == callback.step  # and so did the sink, at the same epoch
    assert "resumed from step" not in output.getvalue()  # nothing was restored: no resume to announce


def test_a_second_fit_that_restores_its_checkpoint_is_a_resume(tmp_path: Path) -> None:
    """The other half of the rule: states restored from a checkpoint carry over, in a second run too."""
    x, y = _data(128, 0)
    validation = _data(64, 1)
    model = _model()
    bus = hookbus.EventBus()
    sink = EarlyStoppingSink("eval/loss", patience=PATIENCE)
    bus.attach(sink)
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=4))
    output = io.StringIO()
    bus.attach(ConsoleSink(Console(file=output, width=120), live=False, plain_every_n_secs=0))
    with bus:
        model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=40,
            validation_data=validation,
            verbose=0,
            callbacks=[hookbus.EventBusCallback(bus, keys=["loss"])],
        )
    stopped_at, reason = sink.stopped_at, bus.stop_reason
    assert stopped_at is not None
    assert reason is not None
    resumed = hookbus.EventBusCallback(bus, keys=["loss"], restore=True)
    with bus:
        history = model.fit(
            x, y, batch_size=BATCH, epochs=40, validation_data=validation, verbose=0, callbacks=[resumed]
        )
    assert resumed.restored_from is not None
    assert resumed.restored_from.endswith(f"-{stopped_at}")
    assert history.history == {}  # patience ran out before the checkpoint: no further epoch
    assert bus.stop_reason == f"{reason} (before the restart)"
    assert f"resumed from step {stopped_at:,}" in output.getvalue()
