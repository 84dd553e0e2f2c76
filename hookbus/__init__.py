"""hookbus: TensorFlow training observable and controllable through one event bus.

This module is for people who train. Make an :class:`EventBus`, attach sinks from
:mod:`hookbus.sinks` (``bus.attach``) and plain functions (``@bus.on("after_run", every_n_steps=100)``,
which receive an :class:`Event`), and give your training one publisher:

- :class:`EventBusHook` for a TF1 ``MonitoredTrainingSession`` (:func:`monitored_training_session`;
  :func:`from_hooks` turns a list of ``tf.compat.v1.train`` hooks into one, with its sinks;
  :func:`train_and_evaluate`, :func:`evaluate_checkpoints`; :class:`Task` and :func:`staggered_start`
  on a cluster);
- :class:`EventBusCallback` for Keras ``fit`` (:func:`from_keras` turns a Keras callback list into one,
  with its sinks);
- :class:`LoopPublisher` for a loop of your own (eager or ``tf.function``).

``bus.stats()`` says what each subscriber costs (:class:`BusStats`); :func:`read_event_log` and
:func:`replay` read back what ``EventLogSink`` recorded, :func:`read_run_summary` a run's row
(:class:`RunSummary`: its hyper-parameters, state, steps, the latest and best of each key) from the
summary kept beside the log. The command line is ``hookbus`` (or
``python -m hookbus``): ``demo``, ``watch``, ``replay``.

Writing a sink: :mod:`hookbus.sink_api`. Writing a publisher: :mod:`hookbus.publisher_api`. Their
argument checks: :mod:`hookbus.validate`; a bus driven by a script, to test them: :mod:`hookbus.testing`.
"""

from hookbus import publisher_api as publisher_api  # the publisher authors' names
from hookbus import sink_api as sink_api  # the sink authors' names
from hookbus._bus._bus import EventBus, Subscription
from hookbus._bus._keys import UnknownKeyError
from hookbus._bus._subscriber_view import SubscriberView
from hookbus._contract._cluster import Task
from hookbus._contract._event_log import read_event_log
from hookbus._contract._events import Event
from hookbus._contract._run_summary import RunSummary, read_run_summary
from hookbus._contract._stats import BusStats, SubscriberStats, WriterStats
from hookbus._convert._hooks import from_hooks  # builds sinks: they need only the faces imported above
from hookbus._convert._keras import from_keras
from hookbus._publishing._replay import ReplayResult, replay
from hookbus._rules._home import show_home
from hookbus._tf.hook._evaluator import evaluate_checkpoints
from hookbus._tf.hook._gate import staggered_start
from hookbus._tf.hook._hook import EventBusHook
from hookbus._tf.hook._session import monitored_training_session
from hookbus._tf.hook._train_eval import train_and_evaluate
from hookbus._tf.keras._callback import EventBusCallback
from hookbus._tf.loop._loop import LoopPublisher
from hookbus._writers._lock import OutputInUseError

__version__ = "0.1.0"


__all__ = [
    "BusStats",
    "Event",
    "EventBus",
    "EventBusCallback",
    "EventBusHook",
    "LoopPublisher",
    "OutputInUseError",
    "ReplayResult",
    "RunSummary",
    "SubscriberStats",
    "SubscriberView",
    "Subscription",
    "Task",
    "UnknownKeyError",
    "WriterStats",
    "__version__",
    "evaluate_checkpoints",
    "from_hooks",
    "from_keras",
    "monitored_training_session",
    "read_event_log",
    "read_run_summary",
    "replay",
    "staggered_start",
    "train_and_evaluate",
]

show_home(__name__, globals(), __all__)  # repr and help name hookbus, not the private modules
