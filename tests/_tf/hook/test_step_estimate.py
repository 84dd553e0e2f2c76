"""StepEstimate keeps the coming run's step as an attribute its writes recompute (issue 30)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hookbus._tf.hook._steps import StepEstimate

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 10_000)),
        st.tuples(st.just("ran"), st.none()),
        st.tuples(st.just("ran"), st.integers(0, 50)),  # the step read after the run: an advance on the estimate
        st.tuples(st.just("correct"), st.integers(0, 50)),
        st.tuples(st.just("forget"), st.none()),
    ),
    max_size=40,
)


@given(declared=st.one_of(st.none(), st.integers(1, 8)), ops=_OPS)
def test_the_coming_step_is_the_step_plus_the_increment_after_every_write(
    declared: int | None, ops: list[tuple[str, int | None]]
) -> None:
    # A quiet run reads ``coming`` instead of calling a method: it must be what that method
    # computed, the step after the last run plus the increment (one while it is unknown), after
    # every write; a run not read lands on it.
    estimate = StepEstimate(declared)
    assert estimate.coming == estimate.step + (estimate.per_run or 1)
    for op, arg in ops:
        if op == "start":
            assert arg is not None
            estimate.start(arg)
        elif op == "ran" and arg is None:
            planned = estimate.coming
            assert estimate.ran(None) == planned == estimate.step
        elif op == "ran":
            assert arg is not None
            assert estimate.ran(estimate.step + arg) == estimate.step
        elif op == "correct":
            assert arg is not None
            estimate.correct(estimate.step + arg)
        else:
            estimate.forget()
            assert estimate.per_run == declared
        assert estimate.coming == estimate.step + (estimate.per_run or 1), (op, arg)


def test_a_read_below_the_last_read_is_a_rewind_and_teaches_no_increment() -> None:
    # A parameter-server chief restarted under a running worker restores an older checkpoint: the
    # worker's next read is below its last (issue 37); the increment learned before stays.
    estimate = StepEstimate()
    estimate.start(1000)
    for _ in range(4):
        estimate.ran(None)
    estimate.ran(1010)  # five runs, ten steps: two a run
    assert (estimate.per_run, estimate.went_back) == (2, False)
    estimate.ran(None)
    assert estimate.ran(305) == 305
    assert (estimate.per_run, estimate.went_back, estimate.coming) == (2, True, 307)
    estimate.ran(307)
    assert estimate.went_back is False
    estimate.start(10)  # a new session starts where it reads: no rewind of this one
    assert estimate.went_back is False
