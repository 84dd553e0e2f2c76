"""Sinks: independent subscribers that show, save and steer a run (import as ``hookbus.sinks``)."""

from .checkpoint.checkpoint import CheckpointSink
from .console.console import ConsoleSink
from .csv import CSVSink
from .early_stopping import EarlyStoppingSink
from .event_log import EventLogSink
from .export import ExportSink
from .learning_rate.learning_rate import LearningRateSchedulerSink, ReduceLROnPlateauSink
from .logging_values import LoggingSink
from .mlflow._names import mlflow_name
from .mlflow.mlflow import MLflowSink
from .nan_guard import NanGuardSink, NonFiniteError
from .profiler import ProfilerSink
from .stop_at_step import StopAtStepSink
from .tensorboard import TensorBoardSink
from .timeline import TimelineSink

__all__: list[str] = [
    "CSVSink",
    "CheckpointSink",
    "ConsoleSink",
    "EarlyStoppingSink",
    "EventLogSink",
    "ExportSink",
    "LearningRateSchedulerSink",
    "LoggingSink",
    "MLflowSink",
    "NanGuardSink",
    "NonFiniteError",
    "ProfilerSink",
    "ReduceLROnPlateauSink",
    "StopAtStepSink",
    "TensorBoardSink",
    "TimelineSink",
    "mlflow_name",
]

mlflow_name.__module__ = __name__  # help() names this package, not the private module that defines it
