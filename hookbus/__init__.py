"""hookbus: TensorFlow training observable and controllable through one event bus.

This module is for people who train. Sink authors' names live in :mod:`hookbus.sink_api`,
publisher authors' in :mod:`hookbus.publisher_api` (argument checks in :mod:`hookbus.validate`,
a scripted bus for tests in :mod:`hookbus.testing`); the ones exported here too stay importable
from ``hookbus`` for compatibility.
"""

from hookbus import publisher_api as publisher_api  # the publisher authors' names
from hookbus import sink_api as sink_api  # the sink authors' names
from hookbus._bus import EventBus, Subscription, UnknownKeyError
from hookbus._checkpoint import CheckpointBackend
from hookbus._checkpoint_seam import Checkpoints
from hookbus._cluster import RUNS_ON, Task
from hookbus._context import EpochProgress, PeerReport, SinkContext
from hookbus._evaluator import evaluate_checkpoints
from hookbus._event_log import event_log_line, read_event_log
from hookbus._events import CheckpointSaved, Event, ExceptionRaised, StopRequest, SubscriberError, WaitForStep
from hookbus._gate import staggered_start
from hookbus._hook import EventBusHook
from hookbus._keras import EventBusCallback
from hookbus._lock import OutputInUseError, OutputLock
from hookbus._loop import LoopPublisher
from hookbus._own_thread_writer import OwnThreadWriter
from hookbus._publisher import PublisherCore
from hookbus._replay import ReplayResult, replay
from hookbus._schedule import Schedule
from hookbus._session import monitored_training_session
from hookbus._sink import (
    PRIORITY_CHECKPOINT,
    PRIORITY_DEFAULT,
    PRIORITY_EARLY_STOPPING,
    PRIORITY_NAN_GUARD,
    PRIORITY_STOP_AT_STEP,
    SIGNALS,
    Sink,
)
from hookbus._stats import BusStats, SubscriberStats, WriterStats
from hookbus._store import CheckpointStore, FileCheckpointStore
from hookbus._train_eval import train_and_evaluate
from hookbus._writer import (
    DEFAULT_FLUSH_DEADLINE,
    BackgroundWriter,
    FlushDeadline,
    WriterError,
    WriterStalled,
    WriterWarning,
    check_writable_dir,
    write_atomically,
)
from hookbus._writer_kit import WriterKit

__version__ = "0.1.0"

for _public in (
    EventBus, Subscription, UnknownKeyError, Task, EventBusHook, EventBusCallback, LoopPublisher, ReplayResult,
    BusStats, SubscriberStats,
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
