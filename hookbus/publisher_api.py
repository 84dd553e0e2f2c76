"""Everything a publisher author needs, in one module: a framework's training loop on the bus.

A publisher counts steps and fetches values; :class:`PublisherCore` does the rest (keys,
schedules, planning, stops, signals, the checkpoint barrier). It hands out a :class:`Plan` for
each due step. What the publisher offers the sinks goes through the core's ``offer_*`` methods:
``offer_checkpoints`` takes a :class:`CheckpointBackend` (how the model is saved and restored)
and the :class:`CheckpointStore` that keeps its files (:class:`FileCheckpointStore` for a layout
of one's own; the TensorFlow publishers give TensorFlow's); ``offer_model`` a :class:`ModelView`
(one framework-free view of the model, whose members the publisher overrides where it can answer:
its weights in memory as a :class:`WeightsBackend`, its export for serving as a
:class:`ModelExport`, its variables, graph, configuration and summary, the training's parameters,
metric directions, and epochs with an :class:`EpochProgress`; every other member answers "not
offered"); ``offer_learning_rate`` a :class:`RateBackend` (read and set the rate it trains with);
``offer_profiler`` a :class:`ProfilerBackend` (raising :exc:`ProfilerBusy` when another profiler
runs), whose step markers the publisher sets through ``PublisherCore.profiling`` (a
:class:`Profiling`; a run it traces in full on a sink's request it hands over as a
:class:`RunTrace`). A publisher is a :class:`Publisher` (what the bus reads of it);
``PublisherCore.stops`` is the run's :class:`Stops`, what a transport of stops between workers
reads and requests through.
Evaluation's keys are published as ``EVAL_PREFIX + key``, a test evaluation's (``mode="test"``)
as ``TEST_PREFIX + key`` and Keras epochs' as ``EPOCH_PREFIX + key``; a fetch key may not be one
of :data:`RESERVED_KEYS`. Guide and a NumPy example without TensorFlow:
docs/guides/writing-a-publisher.md "Writing a publisher",
``examples/custom_publisher.py``.
"""

from __future__ import annotations

from hookbus._bus._keys import Publisher
from hookbus._bus._stops import Stops
from hookbus._checkpoints._backend import CheckpointBackend
from hookbus._checkpoints._store import CheckpointStore, FileCheckpointStore
from hookbus._contract._cluster import RUNS_ON, Task
from hookbus._contract._learning_rate import RateBackend
from hookbus._contract._model import EpochProgress, ModelExport, ModelView, WeightsBackend
from hookbus._contract._profiling import ProfileOptions, ProfilerBackend, ProfilerBusy, Profiling, RunTrace
from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX, RESERVED_KEYS, TEST_PREFIX
from hookbus._contract._system import MachineOffer
from hookbus._publishing._planner import Plan
from hookbus._publishing._publisher import PublisherCore
from hookbus._publishing._throughput import ExampleCounter, Throughput
from hookbus._rules._home import show_home

__all__ = [
    "EPOCH_PREFIX",
    "EVAL_PREFIX",
    "RESERVED_KEYS",
    "RUNS_ON",
    "TEST_PREFIX",
    "CheckpointBackend",
    "CheckpointStore",
    "EpochProgress",
    "ExampleCounter",
    "FileCheckpointStore",
    "MachineOffer",
    "ModelExport",
    "ModelView",
    "Plan",
    "ProfileOptions",
    "ProfilerBackend",
    "ProfilerBusy",
    "Profiling",
    "Publisher",
    "PublisherCore",
    "RateBackend",
    "RunTrace",
    "Stops",
    "Task",
    "Throughput",
    "WeightsBackend",
]

show_home(__name__, globals(), __all__)
