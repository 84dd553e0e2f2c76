"""The dashboard under Keras ``fit`` knows epochs: a real ``fit`` in a real pty, read with pyte.

As Keras's progress bar does, the header shows the epoch (``epoch 3/12``), the total steps
(``epochs × steps_per_epoch``), the progress bar and the ETA; the header's step is never behind
the evaluation the frame shows; the train table's "best" says it is the best of what the
dashboard was sent.
"""

from __future__ import annotations

import io
import re
import sys
import textwrap
from pathlib import Path

import pytest
from _pty import run_in_pty

keras = pytest.importorskip("keras")

EPOCHS, STEPS_PER_EPOCH = 12, 16

_SCRIPT = """
import os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras, numpy as np
import hookbus
from hookbus.sinks import CSVSink, ConsoleSink, EarlyStoppingSink

rng = np.random.default_rng(0)
x = rng.normal(size=({n}, 8)).astype("float32")
y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.Adam(0.01),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
bus = hookbus.EventBus()
bus.attach(ConsoleSink(run_name="keras", refresh_per_second=20))
bus.attach(CSVSink({csv!r}, epochs=True))
bus.attach(EarlyStoppingSink(monitor="eval/loss", patience={patience}, min_delta={min_delta}))
# Slow steps, slower in the third epoch: a frame comes in it however busy the machine.
epoch = [0]
slow = keras.callbacks.LambdaCallback(
    on_epoch_begin=lambda index, logs: epoch.__setitem__(0, index),
    on_train_batch_end=lambda batch, logs: time.sleep(0.1 if epoch[0] == 2 else 0.01),
)
with bus:
    model.fit(x, y, batch_size=32, epochs={epochs}, validation_data=(x[:64], y[:64]), verbose=0,
              callbacks=[hookbus.EventBusCallback(bus, keys=["loss", "accuracy"]), slow])
print("fit ended at step", int(model.optimizer.iterations.numpy()))
"""


def _script(tmp_path: Path, *, patience: int, min_delta: float = 0.0) -> list[str]:
    path = tmp_path / "fit.py"
    csv = str(tmp_path / "epochs.csv")
    text = _SCRIPT.format(n=32 * STEPS_PER_EPOCH, csv=csv, patience=patience, min_delta=min_delta, epochs=EPOCHS)
    path.write_text(textwrap.dedent(text))
    return [sys.executable, str(path)]


_HEADER = re.compile(
    r"(?:train|eval)(?: \((?P<phase>\w+)\))?\s+epoch (?P<epoch>\d+)/(?P<epochs>\d+)"
    r"\s+step (?P<step>[\d,]+)/(?P<total>[\d,]+)"
)


def _header(text: str) -> dict[str, str] | None:
    found = _HEADER.search(text)
    return None if found is None else found.groupdict()


def _eval_step(text: str) -> int | None:
    found = re.search(r"evaluation at step ([\d,]+)", text)
    return None if found is None else int(found.group(1).replace(",", ""))


def _lags(text: str) -> bool:
    """The frame shows an evaluation of a step after the header's step."""
    header, evaluated = _header(text), _eval_step(text)
    return header is not None and evaluated is not None and int(header["step"].replace(",", "")) < evaluated


@pytest.mark.subprocess
def test_under_fit_the_header_shows_epoch_total_steps_progress_and_eta(tmp_path: Path) -> None:
    result = run_in_pty(
        _script(tmp_path, patience=EPOCHS),  # no early stop
        cols=100,
        rows=30,
        timeout=180,
        moments={
            "epoch 3": lambda t: (h := _header(t)) is not None and h["epoch"] == "3" and "sinks:" in t,
            "lag": _lags,  # checked at every screen state
        },
    )
    text = "\n".join(result.scrolled)
    assert result.returncode == 0, text
    assert "lag" not in result.moments, "\n".join(result.moments["lag"])
    frame = "\n".join(result.moments["epoch 3"])
    header = _header(frame)
    assert header is not None, frame
    total = EPOCHS * STEPS_PER_EPOCH
    assert (header["epoch"], header["epochs"], header["total"]) == ("3", str(EPOCHS), f"{total:,}")
    step = int(header["step"].replace(",", ""))
    assert 2 * STEPS_PER_EPOCH <= step <= 3 * STEPS_PER_EPOCH  # a step of the third epoch (or its end)
    bar = next(line for line in result.moments["epoch 3"] if "ETA" in line)
    percent = int(re.search(r"(\d+)%", bar).group(1))  # type: ignore[union-attr]
    assert percent == round(100 * step / total)
    assert "best seen" in frame  # the train table's best is over the steps the dashboard was sent
    # The final frame: the last epoch, every step, no ETA once finished.
    final = _header(result.text)
    assert final is not None, result.text
    assert "train (finished)" in result.text  # not "eval": the last validation belongs to the last epoch
    assert (final["phase"], final["epoch"], final["epochs"]) == ("finished", "12", "12")
    assert final["step"] == final["total"] == f"{total:,}"
    assert f"fit ended at step {total}" in result.text


@pytest.mark.subprocess
def test_after_an_early_stop_the_final_frame_names_the_epoch_it_stopped_in(tmp_path: Path) -> None:
    # No improvement counts (min_delta 10): the stop comes at the third epoch's end.
    script = _script(tmp_path, patience=1, min_delta=10.0)
    result = run_in_pty(script, cols=100, rows=30, timeout=180, moments={"lag": _lags})
    text = result.text
    assert result.returncode == 0, text
    assert "lag" not in result.moments, "\n".join(result.moments["lag"])
    ended = int(text.split("fit ended at step ")[1].split()[0])
    final = _header(text)
    assert final is not None, text
    assert final["phase"] == "finished"  # early stopping did what it was asked: one word for the end
    assert int(final["step"].replace(",", "")) == ended < EPOCHS * STEPS_PER_EPOCH
    assert ended == 2 * STEPS_PER_EPOCH  # the second evaluation did not improve: patience 1 is used up
    assert final["epoch"] == "2"  # the epoch it stopped in, not one after it
    assert "stop at step 32: early stopping" in text


def test_plain_lines_and_the_summary_name_the_epoch_under_fit(tmp_path: Path) -> None:
    import numpy as np
    from rich.console import Console

    import hookbus
    from hookbus.sinks import ConsoleSink

    screen = io.StringIO()
    bus = hookbus.EventBus()
    console = Console(file=screen, width=200)
    bus.attach(ConsoleSink(console, run_name="fit", live=False, plain_every_n_secs=0, every_n_steps=4))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32")
    with bus:
        model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    lines = screen.getvalue().splitlines()
    progress = [line.split(" | ")[:2] for line in lines if line.startswith("epoch ")]
    # 4 steps per epoch, the dashboard sent every 4th step: one line at each epoch's last step.
    assert progress == [["epoch 1/3", "step 4/12"], ["epoch 2/3", "step 8/12"], ["epoch 3/3", "step 12/12"]], lines
    assert any(line.startswith("fit: finished at step 12 (epoch 3/3) after ") for line in lines), lines
    assert "  loss: last 0, best seen (min) 0 at step 4" in lines


@pytest.mark.parametrize("second", ["fit", "initial_epoch"])
def test_the_header_total_is_the_step_the_fit_ends_at(second: str) -> None:
    """A notebook's second ``fit`` of a model in memory (``iterations`` at 12) and a ``fit`` given
    ``initial_epoch`` end at the step Keras ends them at, which the header's total says: before,
    both read ``epochs × steps_per_epoch`` (``step 16/12`` after the first fit's 12 steps)."""
    import numpy as np
    from rich.console import Console

    import hookbus
    from hookbus.sinks import ConsoleSink

    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=200), live=False, plain_every_n_secs=0, every_n_steps=4))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32")
    callback = hookbus.EventBusCallback(bus)
    if second == "fit":  # the first fit of the model: 3 epochs of 4 steps
        with bus:
            model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[callback])
    start = int(model.optimizer.iterations.numpy())
    screen.seek(0)
    screen.truncate()
    with bus:
        model.fit(
            x, y, batch_size=16, epochs=3, initial_epoch=0 if second == "fit" else 1, verbose=0, callbacks=[callback]
        )
    ended = int(model.optimizer.iterations.numpy())  # where Keras ended this fit
    lines = screen.getvalue().splitlines()
    progress = [line.split(" | ")[:2] for line in lines if line.startswith("epoch ")]
    if second == "fit":
        assert (start, ended) == (12, 24)
        expected = [["epoch 1/3", "step 16/24"], ["epoch 2/3", "step 20/24"], ["epoch 3/3", "step 24/24"]]
    else:
        assert (start, ended) == (0, 8)
        expected = [["epoch 2/3", "step 4/8"], ["epoch 3/3", "step 8/8"]]
    assert progress == expected, lines
