"""The profiling seam's run traces, without TensorFlow: a request is answered once, by the publisher
that offers them, and only while it offers them."""

from __future__ import annotations

from dataclasses import dataclass

from hookbus.publisher_api import Profiling


@dataclass
class Trace:
    step: int

    def chrome_trace(self, *, show_dataflow: bool, show_memory: bool) -> str:
        return "{}"

    def serialized(self) -> bytes:
        return b""


def test_a_request_is_answered_once_and_only_where_offered() -> None:
    profiling = Profiling()
    profiling.trace_run()
    assert not profiling.run_trace_wanted  # nobody traces runs: no request stands
    profiling.offer_run_traces(True)
    assert profiling.run_traces_offered
    profiling.trace_run()
    assert profiling.run_trace_wanted
    profiling.run_traced(Trace(4))
    assert not profiling.run_trace_wanted  # answered: the next run is traced only when asked again
    trace = profiling.run_trace()
    assert trace is not None
    assert trace.step == 4
    profiling.trace_run()
    assert profiling.run_trace() is None  # a new request forgets the last trace
    profiling.offer_run_traces(False)
    assert not profiling.run_trace_wanted
    assert not profiling.run_traces_offered
