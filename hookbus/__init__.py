"""hookbus: TensorFlow training observable and controllable through one event bus.

This module is for people who train. Sink authors' names live in :mod:`hookbus.sink_api`,
publisher authors' in :mod:`hookbus.publisher_api` (argument checks in :mod:`hookbus.validate`,
a scripted bus for tests in :mod:`hookbus.testing`); the ones exported here too stay importable
from ``hookbus`` for compatibility.
"""

from hookbus import publisher_api as publisher_api  # the publisher authors' names
from hookbus import sink_api as sink_api  # the sink authors' names
from hookbus._bus._bus import EventBus, Subscription
from hookbus._bus._keys import UnknownKeyError
from hookbus._bus._subscriber_view import SubscriberView
from hookbus._checkpoints._backend import CheckpointBackend
from hookbus._checkpoints._store import CheckpointStore, FileCheckpointStore
from hookbus._contract._checkpoint_seam import Checkpoints
from hookbus._contract._cluster import RUNS_ON, Task
from hookbus._contract._context import PeerReport, SinkContext
from hookbus._contract._event_log import event_log_line, read_event_log
from hookbus._contract._events import CheckpointSaved, Event, ExceptionRaised, StopRequest, SubscriberError, WaitForStep
from hookbus._contract._model import EpochProgress
from hookbus._contract._schedule import Schedule
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
from hookbus._publishing._publisher import PublisherCore
from hookbus._publishing._replay import ReplayResult, replay
from hookbus._rules._files import check_writable_dir, write_atomically
from hookbus._tf.hook._evaluator import evaluate_checkpoints
from hookbus._tf.hook._gate import staggered_start
from hookbus._tf.hook._hook import EventBusHook
from hookbus._tf.hook._session import monitored_training_session
from hookbus._tf.hook._train_eval import train_and_evaluate
from hookbus._tf.keras._callback import EventBusCallback
from hookbus._tf.loop._loop import LoopPublisher
from hookbus._writers._deadline import DEFAULT_FLUSH_DEADLINE, FlushDeadline, WriterError, WriterStalled
from hookbus._writers._kit import WriterKit
from hookbus._writers._lock import OutputInUseError, OutputLock
from hookbus._writers._own_thread import OwnThreadWriter
from hookbus._writers._writer import BackgroundWriter, WriterWarning

__version__ = "0.1.0"

for _public in (
    EventBus,
    Subscription,
    UnknownKeyError,
    Task,
    EventBusHook,
    EventBusCallback,
    LoopPublisher,
    ReplayResult,
    BusStats,
    SubscriberStats,
    SubscriberView,
):
    _public.__module__ = __name__  # repr and help name the public path, not the private module
del _public


__all__ = [
    "DEFAULT_FLUSH_DEADLINE",
    "PRIORITY_CHECKPOINT",
    "PRIORITY_DEFAULT",
    "PRIORITY_EARLY_STOPPING",
    "PRIORITY_NAN_GUARD",
    "PRIORITY_STOP_AT_STEP",
    "RUNS_ON",
    "SIGNALS",
    "BackgroundWriter",
    "BusStats",
    "CheckpointBackend",
    "CheckpointSaved",
    "CheckpointStore",
    "Checkpoints",
    "EpochProgress",
    "Event",
    "EventBus",
    "EventBusCallback",
    "EventBusHook",
    "ExceptionRaised",
    "FileCheckpointStore",
    "FlushDeadline",
    "LoopPublisher",
    "OutputInUseError",
    "OutputLock",
    "OwnThreadWriter",
    "PeerReport",
    "PublisherCore",
    "ReplayResult",
    "Schedule",
    "Sink",
    "SinkContext",
    "StopRequest",
    "SubscriberError",
    "SubscriberStats",
    "SubscriberView",
    "Subscription",
    "Task",
    "UnknownKeyError",
    "WriterError",
    "WriterKit",
    "WriterStalled",
    "WriterStats",
    "WaitForStep",
    "WriterWarning",
    "__version__",
    "check_writable_dir",
    "evaluate_checkpoints",
    "event_log_line",
    "monitored_training_session",
    "read_event_log",
    "replay",
    "staggered_start",
    "train_and_evaluate",
    "write_atomically",
]
