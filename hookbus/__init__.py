"""hookbus: TensorFlow training observable and controllable through one event bus."""

from hookbus._bus import EventBus, UnknownKeyError
from hookbus._cluster import RUNS_ON, Task
from hookbus._context import PeerReport, SinkContext
from hookbus._evaluator import evaluate_checkpoints
from hookbus._events import CheckpointSaved, Event, ExceptionRaised, StopRequest, SubscriberError
from hookbus._hook import EventBusHook
from hookbus._keras import EventBusCallback
from hookbus._loop import LoopPublisher
from hookbus._publisher import PublisherCore
from hookbus._schedule import Schedule
from hookbus._session import monitored_training_session
from hookbus._stats import BusStats, SubscriberStats, WriterStats
from hookbus._subscriber import (
    PRIORITY_CHECKPOINT,
    PRIORITY_DEFAULT,
    PRIORITY_EARLY_STOPPING,
    PRIORITY_NAN_GUARD,
    PRIORITY_STOP_AT_STEP,
    SIGNALS,
    Sink,
    Subscription,
)
from hookbus._train_eval import train_and_evaluate

__version__ = "0.1.0"

__all__ = [
    "PRIORITY_CHECKPOINT",
    "PRIORITY_DEFAULT",
    "PRIORITY_EARLY_STOPPING",
    "PRIORITY_NAN_GUARD",
    "PRIORITY_STOP_AT_STEP",
    "RUNS_ON",
    "SIGNALS",
    "BusStats",
    "CheckpointSaved",
    "Event",
    "EventBus",
    "EventBusCallback",
    "EventBusHook",
    "ExceptionRaised",
    "LoopPublisher",
    "PeerReport",
    "PublisherCore",
    "Schedule",
    "Sink",
    "SinkContext",
    "StopRequest",
    "SubscriberError",
    "SubscriberStats",
    "Subscription",
    "Task",
    "UnknownKeyError",
    "WriterStats",
    "__version__",
    "evaluate_checkpoints",
    "monitored_training_session",
    "train_and_evaluate",
]
