"""A model export without TensorFlow, for ExportSink's bookkeeping on a scripted bus (and the sinks
that ship its exports on): a ``.keras``-named file holding the step it was written at."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import hookbus
from hookbus.publisher_api import ModelView
from hookbus.testing import ScriptedPublisher

__all__ = ["FileExport", "scale_module", "scripted"]


class FileExport:
    """What a training publisher offers ExportSink (:class:`hookbus.sink_api.ModelExport`), as a text file."""

    suffix = ".keras"
    kind = "a test file"
    ready = True

    def __init__(self, pub: ScriptedPublisher) -> None:
        self.pub = pub
        self.written: list[int] = []

    def export(self, path: str) -> None:
        assert not os.path.exists(path)
        Path(path).write_text(str(self.pub.step))
        self.written.append(self.pub.step)


def scripted(bus: hookbus.EventBus) -> tuple[ScriptedPublisher, ScriptedPublisher, FileExport]:
    """A training publisher offering a :class:`FileExport`, and an evaluation publisher, on ``bus``."""
    train, evaluation = ScriptedPublisher(bus, ["loss"]), ScriptedPublisher(bus, ["loss"], mode="eval")
    export = FileExport(train)
    train.core.offer_model(_Exports(export))
    return train, evaluation, export


class _Exports(ModelView):
    """A model view answering only :meth:`export`."""

    def __init__(self, export: FileExport) -> None:
        self._export = export

    def export(self) -> FileExport:
        return self._export


def scale_module() -> Any:
    """A ``tf.Module`` for ``LoopPublisher(serving=...)``: ``{"y": x * w}``, ``w`` a variable (1.0)
    the test sets; TensorFlow imported here, through importorskip."""
    tf = pytest.importorskip("tensorflow")

    class Scale(tf.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(1.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])  # type: ignore[untyped-decorator]
        def __call__(self, x: Any) -> Any:
            return {"y": x * self.w}

    return Scale()
