"""TensorFlow's profiler behind the profiling seam: what the TensorFlow publishers offer.

TensorFlow saves a trace as ``<logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb``:
two windows in one second, or two workers on one host, write the same file and one trace is
lost. :class:`TFProfiler` traces into a directory of its own under the logdir and then moves
the files into a run directory it claims with ``mkdir`` (atomic: a name another process took
gets a suffix), named by the profiler sink after the window's steps and the task.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from hookbus._contract._profiling import ProfileOptions, ProfilerBusy
from hookbus._tf._import import require_tensorflow, require_timeline

__all__ = ["RunMetadataTrace", "TFProfiler", "claim_run_directory"]

#: Where TensorBoard's profile plugin looks for runs, under a logdir.
PROFILE_DIR = os.path.join("plugins", "profile")


def claim_run_directory(root: str, run: str) -> str:
    """Make ``root/run`` (or ``root/run_2``, ``run_3``, ... where taken) and return it: ``mkdir``
    fails on a name that exists, so two processes never claim the same directory."""
    os.makedirs(root, exist_ok=True)
    candidate, n = run, 1
    while True:
        path = os.path.join(root, candidate)
        try:
            os.mkdir(path)
        except FileExistsError:
            n += 1
            candidate = f"{run}_{n}"
            continue
        return path


class TFProfiler:
    """``tf.profiler.experimental`` start, stop and step markers, one trace at a time."""

    _warmed = False  # whether this process's profiler was warmed up

    def __init__(self) -> None:
        self._tf: Any = None
        self._trace: Any = None
        self._scratch: str | None = None

    def start(self, logdir: str, options: ProfileOptions) -> None:
        tf = self._tf = require_tensorflow("ProfilerSink")
        os.makedirs(logdir, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".hookbus-profile-", dir=logdir)  # same filesystem: moves are renames
        tf_options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=options.host_tracer_level,
            python_tracer_level=options.python_tracer_level,
            device_tracer_level=options.device_tracer_level,
        )
        try:
            if not TFProfiler._warmed:
                # As Keras's TensorBoard(profile_batch=...): a first session loads the tracers, so
                # that the window's first step is not timed with that (a start, a stop, nothing saved).
                tf.profiler.experimental.start("", options=tf_options)
                tf.profiler.experimental.stop(save=False)
                TFProfiler._warmed = True
            tf.profiler.experimental.start(scratch, options=tf_options)
        except tf.errors.AlreadyExistsError:
            shutil.rmtree(scratch, ignore_errors=True)
            raise ProfilerBusy(
                "another profiler is running in this process (tf.profiler.experimental.start, the profiler "
                "server, Keras's TensorBoard(profile_batch=...)); only one may run at a time"
            ) from None
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        self._scratch = scratch

    def mark(self, step: int) -> None:
        # TraceMe's clock starts when the Trace is made; __exit__ stops it (TensorFlow's own
        # Trace, so the profile plugin's step-time graph finds the steps by their step_num).
        self._trace = self._tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def unmark(self) -> None:
        trace, self._trace = self._trace, None
        if trace is not None:
            trace.__exit__(None, None, None)

    def discard(self) -> None:
        scratch, self._scratch = self._scratch, None
        try:
            self._tf.profiler.experimental.stop(save=False)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def stop(self, logdir: str, run: str) -> str:
        scratch, self._scratch = self._scratch, None
        assert scratch is not None, "stop() without start()"
        try:
            self._tf.profiler.experimental.stop(save=True)
            written = os.path.join(scratch, PROFILE_DIR)
            sessions = [os.path.join(written, s) for s in sorted(os.listdir(written))] if os.path.isdir(written) else []
            files = [os.path.join(session, f) for session in sessions for f in sorted(os.listdir(session))]
            if not files:
                raise RuntimeError(f"the profiler saved no trace under {scratch}")
            target = claim_run_directory(os.path.join(logdir, PROFILE_DIR), run)
            for path in files:
                os.replace(path, os.path.join(target, os.path.basename(path)))
            return target
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


class RunMetadataTrace:
    """A session run's ``RunMetadata`` (traced with ``RunOptions.FULL_TRACE``), as a
    :class:`hookbus.sink_api.RunTrace`.

    Args:
        step: The global step the run reached.
        metadata: The run's ``tf.compat.v1.RunMetadata``.
    """

    def __init__(self, step: int, metadata: Any) -> None:
        self.step = step
        self._metadata = metadata

    def chrome_trace(self, *, show_dataflow: bool, show_memory: bool) -> str:
        timeline = require_timeline("RunMetadataTrace.chrome_trace")  # what ProfilerHook writes with
        trace: str = timeline.Timeline(self._metadata.step_stats).generate_chrome_trace_format(
            show_dataflow=show_dataflow, show_memory=show_memory
        )
        return trace

    def serialized(self) -> bytes:
        serialized: bytes = self._metadata.SerializeToString()
        return serialized
