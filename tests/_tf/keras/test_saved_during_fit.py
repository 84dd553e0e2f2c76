"""A model saved during ``fit`` loads without hookbus and names the user's optimizer (issue 45 item 1).

A differential with Keras alone. The same seeded ``fit`` runs twice: with Keras's
``ModelCheckpoint`` alone, and with ``ModelCheckpoint`` beside ``EventBusCallback`` and an
``ExportSink``. Every file either wrote is loaded with ``keras.saving.load_model`` in a fresh
process where importing hookbus fails. The files must load, predict as their twins, and carry
Keras's ``compile_config``. Three optimizers: a plain rate, a ``LearningRateSchedule``, and a
schedule that a plateau sink reduces (its multiplier steers training, and the saved configuration
is still the user's schedule). Before the fix, hookbus swapped the schedule for a wrapper of its
own while ``fit`` ran, and every file saved meanwhile named it: ``Could not locate class
'ScaledSchedule'``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from _keras_data import KERAS_NP_ARRAY, classifier, data, keras_np_array_ignored

import hookbus
from hookbus.sinks import ExportSink, ReduceLROnPlateauSink

keras = pytest.importorskip("keras")

pytestmark = [pytest.mark.subprocess, KERAS_NP_ARRAY]

EPOCHS, STEPS = 4, 4

# Loads each file given in a process where hookbus cannot be imported; prints, per file, the
# predictions on held-out data and the loaded optimizer's schedule class.
LOADER = textwrap.dedent(
    """
    import json, sys

    class NoHookbus:
        def find_spec(self, name, path=None, target=None):
            if name == "hookbus" or name.startswith("hookbus."):
                raise ImportError("hookbus is not installed here")
            return None

    sys.meta_path.insert(0, NoHookbus())
    import numpy as np
    import keras

    probe = np.asarray(json.loads(sys.argv[1]), dtype="float32")
    out = {}
    for path in sys.argv[2:]:
        model = keras.saving.load_model(path)
        rate = model.optimizer._learning_rate
        out[path] = {"predictions": model.predict(probe, verbose=0).tolist(), "rate": type(rate).__name__}
    assert not any(m == "hookbus" or m.startswith("hookbus.") for m in sys.modules)
    print(json.dumps(out))
    """
)


def _optimizer(case: str) -> Any:
    if case == "plain":
        return keras.optimizers.SGD(0.1)
    return keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.3, decay_steps=4, decay_rate=0.8))


def _fit(case: str, directory: Path, *, with_bus: bool) -> tuple[Any, list[float]]:
    """One seeded fit saving each epoch with ModelCheckpoint in ``directory``; with hookbus's
    callback and an ExportSink too (and a plateau sink reducing the rate in the "reduced" case)."""
    keras.backend.clear_session()  # the same layer and optimizer names in both fits
    model = classifier(_optimizer(case))
    checkpoint = keras.callbacks.ModelCheckpoint(str(directory / "keras" / "e{epoch}.keras"))
    seen: list[str] = []

    class Configs(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        """What Keras serialises of the model at each epoch's end (TensorBoard's model config too)."""

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            seen.append(self.model.to_json())

    callbacks: list[Any] = [checkpoint, Configs()]
    changes: list[float] = []
    if with_bus:
        bus = hookbus.EventBus()
        bus.attach(ExportSink(directory / "export", monitor="epoch/loss", keep=EPOCHS))
        if case == "reduced":  # min_delta so large that every evaluation after the first is a plateau
            bus.attach(ReduceLROnPlateauSink(monitor="eval/loss", factor=0.5, patience=0, min_delta=1e9))
        bus.on("learning_rate_changed", lambda change: changes.append(change.multiplier))
        callbacks.insert(0, hookbus.EventBusCallback(bus))
        with bus:
            _train(model, callbacks)
    else:
        _train(model, callbacks)
    assert seen
    assert not any("hookbus" in text or "Scaled" in text for text in seen)
    return model, changes


def _train(model: Any, callbacks: list[Any]) -> None:
    model.fit(
        *data(STEPS * 32, 0),
        batch_size=32,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        validation_data=data(64, 1),
        callbacks=callbacks,
    )


def _compile_config(path: Path) -> Any:
    """The ``compile_config`` a ``.keras`` file carries, as Keras wrote it."""
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json"))["compile_config"]


def _load_elsewhere(paths: list[Path], probe: Any) -> dict[str, Any]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, "-c", LOADER, json.dumps(probe.tolist()), *map(str, paths)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    loaded: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


CASES = ("plain", "schedule", "reduced")
PROBE = data(50, 7)[0]


class Case(NamedTuple):
    """One case's two fits: the files each wrote, what the bus steered, the models' predictions
    on ``PROBE`` as they ended, and every file as the fresh process loaded it."""

    theirs: list[Path]
    mine: list[Path]
    exported: dict[int, Path]
    changes: list[float]
    alone_predicts: Any
    ours_predicts: Any
    loaded: dict[str, Any]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """Each case's two fits, then every file of every case loaded in one fresh process without
    hookbus (one TensorFlow start for the three cases: a file's loading does not depend on the
    files loaded before it, and each is reported by its own path)."""
    fitted: dict[str, tuple[list[Path], list[Path], dict[int, Path], list[float], Any, Any]] = {}
    for case in CASES:
        root = tmp_path_factory.mktemp(case)
        with keras_np_array_ignored():
            alone, _ = _fit(case, root / "alone", with_bus=False)
            alone_predicts = alone.predict(PROBE, verbose=0)
            ours, changes = _fit(case, root / "ours", with_bus=True)
        theirs = [root / "alone" / "keras" / f"e{e}.keras" for e in range(1, EPOCHS + 1)]
        mine = [root / "ours" / "keras" / f"e{e}.keras" for e in range(1, EPOCHS + 1)]
        # An export at each epoch whose training loss improved: step e * STEPS is epoch e's end.
        exported = {int(p.stem) // STEPS: p for p in (root / "ours" / "export").glob("*.keras")}
        fitted[case] = (theirs, mine, exported, changes, alone_predicts, ours.predict(PROBE, verbose=0))
    files = [path for theirs, mine, exported, *_ in fitted.values() for path in theirs + mine + list(exported.values())]
    loaded = _load_elsewhere(files, PROBE)
    out = {}
    for case, (theirs, mine, exported, changes, alone_predicts, ours_predicts) in fitted.items():
        own = {str(path) for path in theirs + mine + list(exported.values())}
        case_loaded = {path: entry for path, entry in loaded.items() if path in own}
        out[case] = Case(theirs, mine, exported, changes, alone_predicts, ours_predicts, case_loaded)
    return out


@pytest.mark.parametrize("case", CASES)
def test_files_saved_during_fit_load_without_hookbus_as_keras_alone_saves_them(
    cases: dict[str, Case], case: str
) -> None:
    theirs, mine, exported, changes, alone_predicts, ours_predicts, loaded = cases[case]
    assert len(exported) >= 2, sorted(exported)
    assert 1 in exported, sorted(exported)
    exports = list(exported.values())
    if case == "reduced":
        assert changes == pytest.approx([0.5 ** (i + 1) for i in range(EPOCHS - 1)])  # it steered training
    else:
        assert changes == []

    expected = _compile_config(theirs[0])  # Keras's own: the user's optimizer, schedule and all
    if case != "plain":
        schedule = expected["optimizer"]["config"]["learning_rate"]
        assert (schedule["module"], schedule["class_name"]) == ("keras.optimizers.schedules", "ExponentialDecay")
    for path in mine + exports:
        assert _compile_config(path) == expected, path

    assert sorted(loaded) == sorted(map(str, theirs + mine + exports))  # each of them loaded
    rate = "ExponentialDecay" if case != "plain" else "Variable"
    assert {entry["rate"] for entry in loaded.values()} == {rate}
    predictions = {path: np.asarray(entry["predictions"]) for path, entry in loaded.items()}
    for epoch, export in exported.items():
        # hookbus's export and Keras's ModelCheckpoint beside it hold the same model at that epoch.
        np.testing.assert_array_equal(predictions[str(export)], predictions[str(mine[epoch - 1])])
    for epoch in range(EPOCHS):
        if case != "reduced":  # the bus changes nothing in training: Keras alone trained the same
            np.testing.assert_array_equal(predictions[str(mine[epoch])], predictions[str(theirs[epoch])])
    np.testing.assert_allclose(predictions[str(mine[-1])], ours_predicts, rtol=1e-6, atol=1e-7)
    if case == "reduced":  # the reduced rate trained: the model moved apart from Keras alone's
        assert not np.allclose(predictions[str(mine[-1])], predictions[str(theirs[-1])])
    else:
        np.testing.assert_array_equal(ours_predicts, alone_predicts)
