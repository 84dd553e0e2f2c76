"""The HParams session of a :class:`~hookbus.sinks.TensorBoardSink` logdir: one training, one session.

TensorBoard's HParams plugin takes a run directory holding a session start (the hyper-parameters)
as a session, and every run below it as one of its metric groups: with the start at the logdir's
root, as ``hp.KerasCallback(logdir, hparams)`` writes it beside Keras's ``TensorBoard(logdir)``,
the training run (``train``) and the evaluation runs (``eval``, ``test``; Keras's ``validation``)
are the session's, so validation metrics are columns. The plugin reads a run's session start and
session end from their tags' metadata, and keeps the *first* it sees of each: a second start or
end in the same directory is never shown. So the root holds one session file at a time, which
hookbus alone writes (its own suffix, so no other writer's file is ever touched):

- a run's first training session writes a new session file with this run's hyper-parameters and
  then removes the earlier ones; a training that goes on from where the logdir's stood (restored
  from a checkpoint, or a second ``fit`` of the same model: its first step is past 0) keeps the
  session's start time, so a kill and a resume, or a stop by signal and a resume, are one
  session whose end is the last run's; a training that starts again from step 0 is a new session
  (its restart marker at step 1 replaces the old curves in the same way);
- the run's end appends the session's end with the run's status, from the one word of
  :func:`hookbus.sink_api.how_ended` (:data:`STATUS`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from tensorboard.compat.proto.event_pb2 import Event as EventProto
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.tensorflow_stub import errors as record_errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_v2

from hookbus.sink_api import ENDINGS

__all__ = ["SESSION_SUFFIX", "STATUS", "earlier_sessions", "session_end", "session_start"]

HParamValue = bool | int | float | str

#: The file-name suffix of hookbus's session files (its training files end ``.hookbus``).
SESSION_SUFFIX = ".hookbus-hparams"

_FINISHED, _STOPPED, _CRASHED = ENDINGS
#: The HParams session status for each way a run ends. TensorBoard's statuses are unknown,
#: success, failure and running: finished is a success, crashed a failure; stopped (a signal,
#: Ctrl-C: preempted, resumable) is neither, and no run is running any more, so it is unknown
#: (the session's end time says when it stopped; a resume replaces it with the resumed run's end).
STATUS: Mapping[str, int] = {
    _FINISHED: api_pb2.STATUS_SUCCESS,
    _STOPPED: api_pb2.STATUS_UNKNOWN,
    _CRASHED: api_pb2.STATUS_FAILURE,
}


def earlier_sessions(root: str) -> list[str]:
    """hookbus's session files at ``root``, oldest first (names sort by creation)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted(
        os.path.join(root, n) for n in names if n.startswith("events.out.tfevents.") and n.endswith(SESSION_SUFFIX)
    )


def _start_time(path: str) -> float | None:
    """The start time of the session file ``path``'s session (``None``: it has none, or it is
    unreadable: a truncated record ends the file, as TensorBoard's readers take it)."""
    try:
        reader = PyRecordReader_New(path)
    except record_errors.NotFoundError:
        return None
    with contextlib.closing(reader.file_handle):
        while True:
            try:
                reader.GetNext()
            except (record_errors.OutOfRangeError, record_errors.DataLossError):
                return None
            event = EventProto.FromString(reader.record())
            for value in event.summary.value:
                if value.tag == metadata.SESSION_START_INFO_TAG:
                    content = value.metadata.plugin_data.content
                    return float(metadata.parse_session_start_info_plugin_data(content).start_time_secs)


def session_start(
    hparams: Mapping[str, HParamValue], wall_time: float, earlier: list[str], goes_on: bool
) -> EventProto:
    """The session start a training writes at its first session, as ``hp.KerasCallback`` writes it
    (tag ``_hparams_/session_start_info`` at step 0, the group named by the hyper-parameters).

    Args:
        hparams: This run's hyper-parameters.
        wall_time: The session's wall time.
        earlier: The session files already at the root (:func:`earlier_sessions`).
        goes_on: Whether the training goes on from where the logdir stood (restored, or past
            step 0): the session keeps the newest earlier start time it can read.
    """
    started = next((t for p in reversed(earlier) if (t := _start_time(p)) is not None), None) if goes_on else None
    summary = hparams_v2.hparams_pb(dict(hparams), start_time_secs=wall_time if started is None else started)
    return EventProto(wall_time=wall_time, step=0, summary=summary)


def session_end(ended: str, wall_time: float) -> EventProto:
    """The session end for a run that ended ``ended`` (one of :data:`hookbus.sink_api.ENDINGS`),
    as ``hp.KerasCallback`` writes it (tag ``_hparams_/session_end_info`` at step 0; TensorBoard's
    ``session_end_pb`` needs TensorFlow, this does not)."""
    end = plugin_data_pb2.SessionEndInfo(status=STATUS[ended], end_time_secs=wall_time)
    info = metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(session_end_info=end))
    value = Summary.Value(tag=metadata.SESSION_END_INFO_TAG, metadata=info, tensor=metadata.NULL_TENSOR)
    return EventProto(wall_time=wall_time, step=0, summary=Summary(value=[value]))
