"""A Keras ``fit`` with checkpoints at epoch ends and the best model exported, for the kill test
in tests/_sinks/test_export.py.

``python _export_child.py DIR``: fits :func:`_keras_data.classifier` (Adam 0.05, which overfits:
the validation loss falls, then rises) for ``EPOCHS`` epochs of ``STEPS`` batches with
validation, resuming (``restore=True``) from ``DIR/ckpt``, with ``CheckpointSink`` (each epoch
end) and ``ExportSink(DIR/export, monitor="eval/loss")``. It appends hookbus's log lines to
``DIR/log.txt`` and each evaluation, ``<step> <eval/loss>``, to ``DIR/evals.txt``, a line at a
time (what a SIGKILL leaves is on disk).

``HOOKBUS_TEST_KILL=phase:epoch`` makes the process SIGKILL itself at the 0-based ``epoch``:

- ``saving:e``: as the checkpoint of that epoch's end is about to be saved (``checkpoint_saving``):
  its export is written beside its target and not yet moved into place;
- ``epoch_end:e``: after the callback's ``on_epoch_end`` (the checkpoint saved, the export in place).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 4
EPOCHS = 6


def main() -> None:
    directory = Path(sys.argv[1])
    phase, _, epoch_text = os.environ.get("HOOKBUS_TEST_KILL", "").partition(":")
    kill_epoch = int(epoch_text) if epoch_text else -1

    import keras  # type: ignore[import-untyped]
    from _keras_data import classifier, data  # noqa: E402 - after the path

    import hookbus
    from hookbus.sinks import CheckpointSink, ExportSink

    handler = logging.FileHandler(directory / "log.txt")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("hookbus").addHandler(handler)
    logging.getLogger("hookbus").setLevel(logging.INFO)

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    class Killer(keras.callbacks.Callback):  # type: ignore[misc]
        """After the EventBusCallback in the list: its on_epoch_end has run when this one runs."""

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if phase == "epoch_end" and epoch == kill_epoch:
                die()

    model = classifier(keras.optimizers.Adam(0.05))
    bus = hookbus.EventBus()
    bus.attach(CheckpointSink(directory / "ckpt", keep=2))
    bus.attach(ExportSink(directory / "export", monitor="eval/loss", keep=EPOCHS))

    def record(event: hookbus.Event) -> None:
        with open(directory / "evals.txt", "a", encoding="utf-8") as file:
            file.write(f"{event.step} {event.values['eval/loss']!r}\n")

    bus.on("after_run", record, keys="eval/loss")
    if phase == "saving":
        bus.on("checkpoint_saving", lambda e: die() if e.step == (kill_epoch + 1) * STEPS else None)
    (x, y), validation = data(STEPS * 32, 0), data(64, 1)
    with bus:
        model.fit(
            x,
            y,
            batch_size=32,
            epochs=EPOCHS,
            shuffle=False,
            verbose=0,
            validation_data=validation,
            callbacks=[hookbus.EventBusCallback(bus, restore=True), Killer()],
        )
    print("done", flush=True)


if __name__ == "__main__":
    main()
