"""Work a Keras ``fit`` does once per run, not again at every ``fit`` (issue 30 item 6).

``bench/keras_overhead.py`` runs many short fits on one bus; what a fit repeats for nothing
weighs on every one of them. Counted here by the calls made, never by time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _keras_data import classifier, data

keras = pytest.importorskip("keras")

import hookbus  # noqa: E402 - after the importorskip
from hookbus._tf._checkpoint_tf1 import TensorFlowStore  # noqa: E402
from hookbus.sinks import CheckpointSink  # noqa: E402

X, Y = data(64, 0)


def _counting_problem(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every checkpoint whose files the store reads back whole (``TensorFlowStore.problem``)."""
    read: list[str] = []
    original = TensorFlowStore.problem

    def problem(self: TensorFlowStore, prefix: str) -> str | None:
        read.append(prefix)
        return original(self, prefix)

    monkeypatch.setattr(TensorFlowStore, "problem", problem)
    return read


def _fits(directory: Path, fits: int) -> CheckpointSink:
    """One run of ``fits`` fits of one epoch (4 steps) each of a new model, saving at each epoch end."""
    model = classifier(keras.optimizers.SGD(0.1))
    bus = hookbus.EventBus()
    sink = bus.attach(CheckpointSink(directory / "ckpt"))
    with bus:
        for _ in range(fits):
            model.fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    return sink


def test_the_latest_checkpoint_is_read_back_once_per_run_not_at_every_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fits(tmp_path, 1)  # a run that leaves checkpoints
    read = _counting_problem(monkeypatch)
    sink = _fits(tmp_path, 3)
    # The run's first fit checks what the earlier run left; the later fits find what this sink wrote
    # (step 4 was saved already, by the earlier run).
    assert [Path(p).name for p in read] == ["model.ckpt-4"]
    assert [Path(p).name for p in sink._kept] == ["model.ckpt-4", "model.ckpt-8", "model.ckpt-12"]
    read.clear()
    sink = _fits(tmp_path, 1)  # a new run checks again: another process may have written in between
    assert [Path(p).name for p in read] == ["model.ckpt-12"]
    assert [Path(p).name for p in sink._kept] == ["model.ckpt-4", "model.ckpt-8", "model.ckpt-12"]


def test_a_fit_that_failed_its_directory_check_checks_again_at_the_next_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fits(tmp_path, 1)
    data_file = tmp_path / "ckpt" / "model.ckpt-4.data-00000-of-00001"
    good = data_file.read_bytes()
    data_file.write_bytes(good[: len(good) // 2])  # the only checkpoint cut short: nothing can be restored
    model = classifier(keras.optimizers.SGD(0.1))
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(tmp_path / "ckpt"))
    with bus:
        for _ in range(2):  # the check holds at every fit until it passes, not only at the first
            with pytest.raises(RuntimeError, match="no checkpoint in"):
                model.fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])


def test_the_same_sink_checks_the_directory_again_in_its_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between two runs of one bus the sink lets go of the directory's lock: another process may
    # have written there, so the next run's first fit reads the latest back again (once).
    read = _counting_problem(monkeypatch)
    model = classifier(keras.optimizers.SGD(0.1))
    bus = hookbus.EventBus()
    sink = bus.attach(CheckpointSink(tmp_path / "ckpt"))
    for _ in range(2):
        with bus:
            for _ in range(2):
                model.fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    assert [Path(p).name for p in read] == ["model.ckpt-8"]
    assert [Path(p).name for p in sink._kept] == ["model.ckpt-4", "model.ckpt-8", "model.ckpt-12", "model.ckpt-16"]
