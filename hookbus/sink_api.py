"""Everything a sink author needs, in one module: every built-in sink is written on it alone.

Example (a sink that prints the loss every 100 steps; ``help(Sink)`` is the reference)::

    from hookbus.sink_api import Event, Priority, Schedule, Sink

    class PrintLoss(Sink):
        default_schedule = Schedule(every_n_steps=100)
        priority = Priority.DEFAULT

        def __init__(self, **kwargs):
            super().__init__(keys=["loss"], **kwargs)

        def on_after_run(self, event: Event) -> None:
            print(event.step, event.values["loss"])

What it holds:

- the interface: :class:`Sink`, the :class:`SinkContext` its ``begin`` receives (with
  :class:`PeerReport`, the checkpoint seam :class:`Checkpoints`, the profiling seam
  :class:`Profiler` with its :class:`ProfileWindow`, :class:`ProfileOptions`, :class:`ProfileResult`,
  :class:`RunTrace`,
  and the model seam :class:`ModelView` with its :class:`WeightsBackend`, :class:`ModelExport` and
  :class:`EpochProgress`),
  :class:`Schedule`, :class:`Priority` (its values also as ``PRIORITY_*``), the signals' names :data:`SIGNALS`;
- the events: :class:`Event`, :class:`CheckpointSaved`, :class:`ExceptionRaised`,
  :class:`StopRequest`, :class:`SubscriberError`, :class:`LearningRateChange`, :class:`WaitForStep`,
  :class:`ModelExported`, and :exc:`UnknownKeyError` for a key no publisher provides (with
  :func:`did_you_mean` for its message);
- the writer kit (docs/guides/sinks/checkpoints.md "One writer per file"): :class:`WriterKit`,
  :class:`BackgroundWriter`, :class:`OwnThreadWriter`, :class:`OutputLock`, :class:`FlushDeadline`,
  :func:`write_atomically`, :func:`check_writable_dir` and their errors and stats;
- the rules sinks share: :func:`better_direction` (which way is better for a metric),
  :data:`EVAL_PREFIX`, :data:`TEST_PREFIX` and :data:`EPOCH_PREFIX` (validation's, a test
  evaluation's and Keras epochs' keys),
  :func:`is_real_dtype` (which values are numbers), :func:`step_of` and :func:`recover`
  (a checkpoint's step, and what a checkpoint directory keeps as a run starts), and the event
  log's line format :func:`event_log_line` (:func:`event_log_record` and :func:`encode_record`, its two
  halves), the summary kept beside it (:class:`RunSummary`, :func:`run_summary_path`,
  :func:`read_run_summary`), and how a run ended in one word, :func:`how_ended`
  (:data:`ENDINGS`, :data:`DEAD` for a run killed without a word, a tracker's :data:`TRACKER_STATUS`);
- the machine's samples (the ``system`` signal, :meth:`Sink.on_system`): :data:`SYSTEM_MODE`,
  :data:`SYSTEM_PREFIX`, :data:`SYSTEM_NOTICE_KEY` (why no GPU is sampled, said once),
  :func:`system_gpu_key` and :func:`system_gpu_of` (a GPU's keys, by TensorFlow's index);
- the learning rate (``SinkContext.learning_rate``): :class:`LearningRate` (read it, request a
  new one), :func:`require_learning_rate` (fails before step 1 naming what to pass where no
  publisher offers one), :data:`LEARNING_RATE_KEY`.

The argument checks with hookbus's messages are in :mod:`hookbus.validate`; a bus driven by a
script, to test a sink, is in :mod:`hookbus.testing`; what publishers offer (the checkpoint store
among it) is in :mod:`hookbus.publisher_api`. Names that people who train use too (``Event``,
``BusStats``, ``UnknownKeyError``, ...) show ``hookbus`` as their home; the others show this module
(``repr(Sink)`` is ``<class 'hookbus.sink_api.Sink'>``).
"""

from __future__ import annotations

from typing import Final

from hookbus._bus._keys import UnknownKeyError, did_you_mean
from hookbus._checkpoints._store import CheckpointStore, FileCheckpointStore, recover, step_of
from hookbus._contract._checkpoint_seam import Checkpoints
from hookbus._contract._context import PeerReport, SinkContext, require_learning_rate
from hookbus._contract._ending import DEAD, ENDINGS, TRACKER_STATUS, how_ended
from hookbus._contract._event_log import encode_record, event_log_line, event_log_record
from hookbus._contract._events import (
    CheckpointSaved,
    Event,
    ExceptionRaised,
    ModelExported,
    StopRequest,
    SubscriberError,
    WaitForStep,
)
from hookbus._contract._learning_rate import LEARNING_RATE_KEY, LearningRate, LearningRateChange, RateRequest
from hookbus._contract._model import EpochProgress, ModelExport, ModelView, WeightsBackend
from hookbus._contract._profiling import ProfileOptions, Profiler, ProfileResult, ProfileWindow, RunTrace
from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX, TEST_PREFIX
from hookbus._contract._run_summary import RunSummary, read_run_summary, run_summary_path
from hookbus._contract._schedule import Schedule, ScheduleTimer
from hookbus._contract._sink import (
    PRIORITY_CHECKPOINT,
    PRIORITY_DEFAULT,
    PRIORITY_EARLY_STOPPING,
    PRIORITY_NAN_GUARD,
    PRIORITY_STOP_AT_STEP,
    SIGNALS,
    Sink,
)
from hookbus._contract._stats import BusStats, SubscriberStats, WriterStats
from hookbus._contract._system import (
    SYSTEM_MODE,
    SYSTEM_NOTICE_KEY,
    SYSTEM_PREFIX,
    system_gpu_key,
    system_gpu_of,
)
from hookbus._rules._direction import better_direction
from hookbus._rules._files import check_writable_dir, write_atomically
from hookbus._rules._home import show_home
from hookbus._rules._values import is_real_dtype
from hookbus._writers._deadline import DEFAULT_FLUSH_DEADLINE, FlushDeadline, WriterError, WriterStalled
from hookbus._writers._kit import WriterKit
from hookbus._writers._lock import OutputInUseError, OutputLock
from hookbus._writers._own_thread import OwnThreadWriter
from hookbus._writers._writer import BackgroundWriter, WriterWarning

__all__ = [
    "DEAD",
    "DEFAULT_FLUSH_DEADLINE",
    "ENDINGS",
    "EPOCH_PREFIX",
    "EVAL_PREFIX",
    "LEARNING_RATE_KEY",
    "PRIORITY_CHECKPOINT",
    "PRIORITY_DEFAULT",
    "PRIORITY_EARLY_STOPPING",
    "PRIORITY_NAN_GUARD",
    "PRIORITY_STOP_AT_STEP",
    "SIGNALS",
    "SYSTEM_MODE",
    "SYSTEM_NOTICE_KEY",
    "SYSTEM_PREFIX",
    "TEST_PREFIX",
    "TRACKER_STATUS",
    "BackgroundWriter",
    "BusStats",
    "CheckpointSaved",
    "CheckpointStore",
    "Checkpoints",
    "EpochProgress",
    "Event",
    "ExceptionRaised",
    "FileCheckpointStore",
    "FlushDeadline",
    "LearningRate",
    "LearningRateChange",
    "ModelExport",
    "ModelExported",
    "ModelView",
    "OutputInUseError",
    "OutputLock",
    "OwnThreadWriter",
    "PeerReport",
    "Priority",
    "ProfileOptions",
    "ProfileResult",
    "ProfileWindow",
    "Profiler",
    "RateRequest",
    "RunSummary",
    "RunTrace",
    "Schedule",
    "ScheduleTimer",
    "Sink",
    "SinkContext",
    "StopRequest",
    "SubscriberError",
    "SubscriberStats",
    "UnknownKeyError",
    "WaitForStep",
    "WeightsBackend",
    "WriterError",
    "WriterKit",
    "WriterStalled",
    "WriterStats",
    "WriterWarning",
    "better_direction",
    "check_writable_dir",
    "did_you_mean",
    "encode_record",
    "event_log_line",
    "event_log_record",
    "read_run_summary",
    "run_summary_path",
    "how_ended",
    "is_real_dtype",
    "recover",
    "require_learning_rate",
    "step_of",
    "system_gpu_key",
    "system_gpu_of",
    "write_atomically",
]


class Priority:
    """A sink's ``priority``, as one name: lower runs first, on every signal.

    The control sinks run before the checkpoint, which runs before the rest, so a checkpoint
    saved at a step sees that step's stop requests, and a dashboard sees the checkpoint. The
    values are this module's ``PRIORITY_*`` integers; any int is a priority.
    """

    NAN_GUARD: Final = PRIORITY_NAN_GUARD
    EARLY_STOPPING: Final = PRIORITY_EARLY_STOPPING
    STOP_AT_STEP: Final = PRIORITY_STOP_AT_STEP
    CHECKPOINT: Final = PRIORITY_CHECKPOINT
    DEFAULT: Final = PRIORITY_DEFAULT


show_home(__name__, globals(), __all__)
