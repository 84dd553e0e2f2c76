"""TimelineSink: Chrome traces of single training runs (``ProfilerHook``'s ``timeline-<step>.json``)."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from tensorboard.compat.proto.event_pb2 import Event as EventProto
from tensorboard.compat.proto.event_pb2 import TaggedRunMetadata

from hookbus.sink_api import OutputLock, Sink, check_writable_dir, write_atomically
from hookbus.validate import flag, non_empty_path

from ._event_files import new_event_file

if TYPE_CHECKING:
    from hookbus.sink_api import Event, SinkContext

__all__ = ["TimelineSink"]

logger = logging.getLogger("hookbus")


class TimelineSink(Sink):
    """Traces single training runs in full and writes each as ``<output_dir>/timeline-<step>.json``.

    What ``tf.compat.v1.train.ProfilerHook`` writes, for the TF1 hook's sessions: at each due step
    the run is made with ``RunOptions(trace_level=FULL_TRACE)`` and its step stats are written in
    Chrome trace format (open it in ``chrome://tracing`` or Perfetto), named after the global step
    the run reached; the run's metadata also goes to an event file in ``output_dir``, tagged
    ``step_<step>``, where TensorBoard's graph tab shows it (compute time and memory per node).
    Only a due run is traced: it asks for the trace from its ``before_run`` handler and takes it in
    ``after_run``, so it fetches nothing (``keys`` is empty) and costs nothing on other steps.

    Windows of many steps in the profile plugin's format are :class:`~hookbus.sinks.ProfilerSink`'s;
    this sink is the timeline of one run, under the publishers that trace single runs
    (:class:`hookbus.EventBusHook`; under others it writes nothing and says so once).

    Args:
        output_dir: Where the timelines and the event file go (made if missing).
        every_n_steps: The schedule (default: every 1000 steps). A session's
            first run is never traced (it builds and loads, as ``ProfilerHook`` knows): a step due
            then writes nothing.
        every_n_secs: With ``every_n_steps``, above.
        show_dataflow: Flow events between the producers and consumers of tensors (default
            ``True``, as the hook).
        show_memory: Tensors' sizes and lifetimes (default ``False``, as the hook).
        name: Name in reports (default the class name).

    One run writes a directory's timelines at a time: a second one fails as it begins, naming
    the first (a lock file ``.timeline.lock`` in ``output_dir``).

    Raises:
        ValueError: for an empty ``output_dir``, one that cannot be written, or a schedule
            argument that is not valid.
        TypeError: for a flag that is not ``True`` or ``False``.
    """

    default_runs_on = "chief"

    def __init__(
        self,
        output_dir: str | os.PathLike[str],
        *,
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        show_dataflow: bool = True,
        show_memory: bool = False,
        name: str | None = None,
    ) -> None:
        if every_n_steps is None and every_n_secs is None:
            every_n_steps = 1000
        super().__init__(every_n_steps=every_n_steps, every_n_secs=every_n_secs, name=name)
        self.keys = frozenset()  # the step alone: the trace comes from the run itself
        self.output_dir = non_empty_path("output_dir", output_dir)
        check_writable_dir(self.output_dir, "output_dir")
        self.show_dataflow = bool(flag("show_dataflow", show_dataflow))
        self.show_memory = bool(flag("show_memory", show_memory))
        self._events: Any = None
        self._said = False
        # One writer of a directory's timelines: their names are known only as the steps come.
        timelines = os.path.join(self.output_dir, "timeline-<step>.json")
        self._lock = OutputLock(timelines, self.name, "the timelines", os.path.join(self.output_dir, ".timeline.lock"))
        #: The timelines written in this run, in order.
        self.written: list[str] = []

    def setup(self, context: SinkContext) -> None:
        super().setup(context)
        self.written, self._said = [], False

    def on_begin(self, event: Event) -> None:
        if event.mode == "train":
            self._lock.acquire()  # before step 1: a second run writing these timelines fails naming the first

    def on_before_run(self, event: Event) -> None:
        profiler = self.context.profiler
        if event.mode != "train":
            return
        if profiler.run_traces_offered:
            profiler.trace_run()
        elif not self._said:
            self._said = True
            logger.warning("%s: the training publisher traces no single run; no timeline is written", self.name)

    def on_after_run(self, event: Event) -> None:
        if event.mode != "train" or event.final:
            return
        trace = self.context.profiler.run_trace()
        if trace is None or trace.step != event.step:
            return  # this run was not traced (planned for another step, or no publisher traces runs)
        os.makedirs(self.output_dir, exist_ok=True)
        path = os.path.join(self.output_dir, f"timeline-{trace.step}.json")
        write_atomically(path, trace.chrome_trace(show_dataflow=self.show_dataflow, show_memory=self.show_memory))
        self.written.append(path)
        if self._events is None:
            self._events = new_event_file(self.output_dir, flush_secs=5.0, max_queue_size=10)
        tagged = TaggedRunMetadata(tag=f"step_{trace.step}", run_metadata=trace.serialized())
        self._events.add_event(EventProto(wall_time=time.time(), step=trace.step, tagged_run_metadata=tagged))

    def flush(self) -> None:
        if self._events is not None:
            self._events.flush()

    def close(self) -> None:
        events, self._events = self._events, None
        try:
            if events is not None:
                events.close()
        finally:
            self._lock.release()
