"""Everything a publisher author needs, in one module: a framework's training loop on the bus.

A publisher counts steps and fetches values; :class:`PublisherCore` does the rest (keys,
schedules, planning, stops, signals, the checkpoint barrier). It hands out a :class:`Plan` for
each due step. What the publisher offers the sinks goes through the core's ``offer_*`` methods:
``offer_checkpoints`` takes a :class:`CheckpointBackend` (how the model is saved and restored)
and the :class:`CheckpointStore` that keeps its files (:class:`FileCheckpointStore` for a layout
of one's own; the TensorFlow publishers give TensorFlow's); ``offer_weights`` takes a :class:`WeightsBackend` (the
weights in memory); ``offer_learning_rate`` a :class:`RateBackend` (read and set the rate it
trains with); ``offer_graph`` a :data:`GraphOffer` and ``offer_model_config`` a
:data:`ModelConfigOffer`; ``offer_variables`` a :data:`VariablesOffer` (the variables by name, for
histograms) and ``offer_export`` a :class:`ModelExport` (writes the model for serving);
``offer_progress`` a callable returning an :class:`EpochProgress`;
``offer_profiler`` a :class:`ProfilerBackend` (raising :exc:`ProfilerBusy` when another profiler
runs), whose step markers the publisher sets through ``PublisherCore.profiling`` (a
:class:`Profiling`). A publisher is a :class:`Publisher` (what the bus reads of it);
``PublisherCore.stops`` is the run's :class:`Stops`, what a transport of stops between workers
reads and requests through.
Evaluation's keys are published as ``EVAL_PREFIX + key`` and Keras epochs' as
``EPOCH_PREFIX + key``; a fetch key may not be one of :data:`RESERVED_KEYS`. Guide and a
NumPy example without TensorFlow: examples/README.md "Writing a publisher",
``examples/custom_publisher.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from hookbus._bus._keys import Publisher
from hookbus._bus._stops import Stops
from hookbus._checkpoints._backend import CheckpointBackend
from hookbus._checkpoints._store import CheckpointStore, FileCheckpointStore
from hookbus._contract._cluster import RUNS_ON, Task
from hookbus._contract._context import EpochProgress
from hookbus._contract._learning_rate import RateBackend
from hookbus._contract._model import ModelExport, VariablesOffer
from hookbus._contract._profiling import ProfileOptions, ProfilerBackend, ProfilerBusy, Profiling
from hookbus._contract._publisher_keys import EPOCH_PREFIX, EVAL_PREFIX, RESERVED_KEYS
from hookbus._contract._weights import WeightsBackend
from hookbus._publishing._planner import Plan
from hookbus._publishing._publisher import PublisherCore
from hookbus._rules._home import show_home

__all__ = [
    "EPOCH_PREFIX",
    "EVAL_PREFIX",
    "RESERVED_KEYS",
    "RUNS_ON",
    "CheckpointBackend",
    "CheckpointStore",
    "EpochProgress",
    "FileCheckpointStore",
    "GraphOffer",
    "ModelConfigOffer",
    "ModelExport",
    "Plan",
    "ProfileOptions",
    "ProfilerBackend",
    "ProfilerBusy",
    "Profiling",
    "Publisher",
    "PublisherCore",
    "RateBackend",
    "Stops",
    "Task",
    "VariablesOffer",
    "WeightsBackend",
]

#: What ``PublisherCore.offer_graph`` takes: returns the training graph serialized (a ``GraphDef``), or ``None``.
GraphOffer: TypeAlias = Callable[[], bytes | None]
#: What ``PublisherCore.offer_model_config`` takes: returns the model's JSON configuration, or ``None``.
ModelConfigOffer: TypeAlias = Callable[[], str | None]

show_home(__name__, globals(), __all__)
