"""Read a profiler trace back: the ``.xplane.pb`` files of a logdir and the step markers in them.

A trace is TensorFlow's ``XSpace`` proto (``tensorflow.tsl.profiler.protobuf.xplane_pb2``); a
step marker is an event named ``train`` on the host plane with a ``step_num`` stat.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["marked_steps", "traces"]


def traces(logdir: Path) -> list[Path]:
    """Every ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, sorted by run."""
    return sorted((logdir / "plugins" / "profile").glob("*/*.xplane.pb"))


def marked_steps(trace: Path, name: str = "train") -> list[int]:
    """The ``step_num`` of every step marker ``name`` in ``trace``, in time order."""
    xplane_pb2 = pytest.importorskip("tensorflow.tsl.profiler.protobuf.xplane_pb2")
    space = xplane_pb2.XSpace()
    space.ParseFromString(trace.read_bytes())
    found: list[tuple[int, int]] = []
    for plane in space.planes:
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name != name:
                    continue
                stats = {stat_names[s.metadata_id]: s for s in event.stats}
                step = stats["step_num"]
                value = step.int64_value or step.uint64_value or int(step.str_value or 0)
                found.append((line.timestamp_ns + event.offset_ps // 1000, value))
    return [step for _, step in sorted(found)]
