"""TensorBoard's event files for :class:`~hookbus.sinks.TensorBoardSink`: the files and the protos.

Making an event file whose name sorts after the others, flushing and closing a run's set of them,
and the events that are not plain scalars: histograms and a Keras model's configuration; and the
values as ``tf.summary`` writes them (tensors with their plugin's metadata), what Keras's
``TensorBoard`` callback leaves and ``layout="keras"`` writes.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event as EventProto
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DT_DOUBLE, DT_FLOAT, DT_STRING
from tensorboard.summary.writer.event_file_writer import EventFileWriter

__all__ = [
    "close_all",
    "flush_all",
    "histogram",
    "histogram_tensor",
    "keras_model_event",
    "new_event_file",
    "scalar_tensor",
    "text_tensor",
]

_EVENT_FILE_TIME = re.compile(r"tfevents\.(\d+)\.")


def histogram(array: np.ndarray[Any, Any], bins: int = 30) -> HistogramProto | None:
    """The histogram of an array's finite values in ``bins`` buckets (``None`` if it has none)."""
    values = np.asarray(array, dtype=np.float64).ravel() if array.dtype.kind in "biuf" else np.empty(0)
    values = values[np.isfinite(values)]  # np.histogram cannot bin NaN or inf
    if values.size == 0:
        return None
    counts, edges = np.histogram(values, bins=bins)
    return HistogramProto(
        min=float(values.min()),
        max=float(values.max()),
        num=float(values.size),
        sum=float(values.sum()),
        sum_squares=float(np.dot(values, values)),
        bucket_limit=edges[1:].tolist(),
        bucket=counts.astype(np.float64).tolist(),
    )


_SCALARS = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
_HISTOGRAMS = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="histograms"))


def scalar_tensor(tag: str, value: float) -> Summary.Value:
    """A scalar as ``tf.summary.scalar`` writes it under Keras: a float32 tensor of the scalars plugin."""
    tensor = TensorProto(dtype=DT_FLOAT, tensor_shape=TensorShapeProto(), float_val=[value])
    return Summary.Value(tag=tag, metadata=_SCALARS, tensor=tensor)


_TEXT = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))


def text_tensor(tag: str, text: str) -> Summary.Value:
    """A string as ``tf.summary.text`` writes it: a scalar string tensor of the text plugin."""
    tensor = TensorProto(dtype=DT_STRING, tensor_shape=TensorShapeProto(), string_val=[text.encode("utf-8")])
    return Summary.Value(tag=tag, metadata=_TEXT, tensor=tensor)


def histogram_tensor(tag: str, array: np.ndarray[Any, Any], bins: int = 30) -> Summary.Value:
    """A histogram as ``tf.summary.histogram`` writes it: a float64 ``[bins, 3]`` tensor of
    (left edge, right edge, count), the same buckets (equal widths from the minimum to the
    maximum, the last one closed; one value: every edge at it, the count in the last bucket).
    Counted in one pass (``np.bincount``), not through a one-hot matrix of the weights' size.
    Non-finite values are left out (TensorFlow's buckets cannot place them)."""
    values = np.asarray(array, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    rows = np.zeros((bins, 3))
    if values.size:
        low, high = float(values.min()), float(values.max())
        if high == low:
            rows[:, 0] = rows[:, 1] = low
            rows[-1, 2] = values.size
        else:
            width = (high - low) / bins
            index = np.minimum(np.floor((values - low) / width).astype(np.int64), bins - 1)
            edges = np.linspace(low, high, bins + 1)
            edges[-1] = high
            rows[:, 0], rows[:, 1] = edges[:-1], edges[1:]
            rows[:, 2] = np.bincount(index, minlength=bins)
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=bins), TensorShapeProto.Dim(size=3)])
    tensor = TensorProto(dtype=DT_DOUBLE, tensor_shape=shape, tensor_content=rows.astype("<f8").tobytes())
    return Summary.Value(tag=tag, metadata=_HISTOGRAMS, tensor=tensor)


def new_event_file(logdir: str, flush_secs: float, max_queue_size: int, suffix: str = ".hookbus") -> EventFileWriter:
    """An EventFileWriter whose file name sorts after every event file already in ``logdir`` and
    ends with ``suffix`` (hookbus's: ``.hookbus``; its HParams session's: ``.hookbus-hparams``).

    Names start ``events.out.tfevents.<whole seconds>.<host>.<pid>``: two files made in the
    same second sort by pid, not by age, and readers take files in name order. Waiting for the
    next second (only ever needed when a file was made this very second) keeps creation order.
    """
    stamps = [int(m.group(1)) for n in os.listdir(logdir) if (m := _EVENT_FILE_TIME.search(n))]
    while stamps and int(time.time()) <= max(stamps):
        time.sleep(max(stamps) + 1 - time.time())
    return EventFileWriter(logdir, max_queue_size=max_queue_size, flush_secs=flush_secs, filename_suffix=suffix)


def flush_all(writers: dict[str, EventFileWriter]) -> None:
    """Flush every event file of a run (blocking: the sink's kit runs it within the flush deadline)."""
    for writer in list(writers.values()):
        writer.flush()


def close_all(writers: dict[str, EventFileWriter]) -> None:
    """Close every event file, the others too when one fails (its error is raised after)."""
    failed: list[BaseException] = []
    for writer in writers.values():
        try:
            writer.close()
        except BaseException as error:  # raised once the others are closed
            failed.append(error)
    if failed:
        raise failed[0]


def keras_model_event(wall_time: float, config: str) -> EventProto:
    """A Keras model's configuration as Keras's ``TensorBoard(write_graph=True)`` writes it: tag
    ``keras`` at step 0, for the graph plugin's conceptual graph."""
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="graph_keras_model", content=b"1"))
    tensor = TensorProto(dtype=DT_STRING, tensor_shape=TensorShapeProto(), string_val=[config.encode()])
    value = Summary.Value(tag="keras", metadata=metadata, tensor=tensor)
    return EventProto(wall_time=wall_time, step=0, summary=Summary(value=[value]))
