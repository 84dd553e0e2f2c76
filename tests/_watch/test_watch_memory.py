"""Issue 36 item 5, the watcher's memory: what it keeps of a long log is bounded.

``hookbus watch`` keeps the window its dashboard draws and the summaries it needs, not every
record: after 200,000 steps it holds a few hundred records, the dashboard still shows each key's
best of the whole run, and a resume to a checkpoint's step still cuts the history back, bests
included. No timing here: seconds and peak memory are ``bench/watch.py``'s.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from hookbus._contract._event_log import event_log_line
from hookbus._watch._command import RENDERING
from hookbus._watch._follow import LogFollower
from hookbus._watch._kept import WINDOW
from hookbus._watch._view import Gate, LogView, NotAnEventLogError

STEPS = 200_000
RESUMED = 190_000  # a checkpoint's step (the 11th newest): the rewind below goes back to it
KEPT = WINDOW + 32  # the window, and the run's few structural records and bests


def _loss(step: int) -> float:
    return 1.0 / step + (step % 7) * 1e-3


def _accuracy(step: int) -> float:
    return step / 1e6  # grows: its best (max) is the newest step's


def _log(path: Path) -> None:
    """A run of STEPS steps, a checkpoint every 1,000, as EventLogSink writes it (no close)."""
    lines = [
        event_log_line("begin", step=0, wall_time=0.0, mode="train", keys=["accuracy", "loss"], flush_secs=0.1),
        event_log_line("session_created", step=0, wall_time=0.0, mode="train", restored=False, rewound=False),
    ]
    for step in range(1, STEPS + 1):
        values = {"loss": _loss(step), "accuracy": _accuracy(step)}
        lines.append(event_log_line("step", step=step, wall_time=step * 0.001, mode="train", **values))
        if step % 1000 == 0:
            saved = {"path": f"ckpt-{step}", "value": None, "wall_time": step * 0.001}
            lines.append(event_log_line("checkpoint_saved", step=step, **saved))
    path.write_text("".join(lines))


def _row(view: LogView, key: str) -> Any:
    sink: Any = view.sink
    return next(row for row in sink.snapshot.train if row.key == key)


def test_a_long_log_is_watched_with_a_bounded_part_of_its_records(tmp_path: Path) -> None:
    """200,000 steps read at once: a few hundred records kept (before: all 400,000+, every
    record), and the dashboard shows what the whole log says: the newest step and values, each
    key's best of the run and where, the recent history."""
    log = tmp_path / "events.jsonl"
    _log(log)
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(io.StringIO(), False))
    view.poll()
    kept = view.run.records
    assert len(kept) <= KEPT
    assert len([r for r in kept if r["record"] == "step"]) <= WINDOW + 4  # the window, and the bests
    assert view.run.step == STEPS
    loss = _row(view, "loss")
    lowest = min(range(1, STEPS + 1), key=_loss)  # the first of equal ones, as the dashboard's best
    assert (loss.best, loss.best_step, loss.last) == (_loss(lowest), lowest, _loss(STEPS))
    assert loss.history == tuple(_loss(s) for s in range(STEPS - len(loss.history) + 1, STEPS + 1))
    accuracy = _row(view, "accuracy")
    assert (accuracy.best, accuracy.best_step) == (_accuracy(STEPS), STEPS)


def test_a_rewind_to_a_checkpoints_step_cuts_the_history_and_the_bests_with_bounded_memory(tmp_path: Path) -> None:
    """The session re-created at 190,000 (a rewind in the same log, after 200,000 steps): the
    steps after it are gone, also from the bests: the loss's best is the best up to 190,000 and
    the accuracy's (it grew) the value at 190,000, though the records that held them are long out
    of the window (the checkpoint at 190,000 kept the bests as they were); the new session's steps
    show once; what is kept stays bounded."""
    log = tmp_path / "events.jsonl"
    _log(log)
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(io.StringIO(), False))
    view.poll()
    resumed = [
        event_log_line("session_created", step=RESUMED, wall_time=201.0, mode="train", restored=True, rewound=True),
        *(
            event_log_line("step", step=s, wall_time=201.0 + s / 1e6, mode="train", loss=10.0 + s, accuracy=0.0)
            for s in range(RESUMED + 1, RESUMED + 101)
        ),
    ]
    with log.open("a") as out:
        out.write("".join(resumed))
    _, rebuilt = view.poll()
    assert rebuilt
    kept = view.run.records
    assert len(kept) <= KEPT
    steps = [r["step"] for r in kept if r["record"] == "step"]
    assert max(steps) == RESUMED + 100
    assert not any(STEPS >= s > RESUMED + 100 for s in steps)  # nothing of the first pass past the cut
    assert view.run.step == RESUMED + 100
    lowest = min(range(1, RESUMED + 1), key=_loss)
    loss = _row(view, "loss")
    assert (loss.best, loss.best_step) == (_loss(lowest), lowest)  # not the first pass's, after 190,000
    assert loss.last == 10.0 + RESUMED + 100
    assert loss.history == tuple(10.0 + s for s in range(RESUMED + 101 - len(loss.history), RESUMED + 101))
    accuracy = _row(view, "accuracy")
    assert (accuracy.best, accuracy.best_step) == (_accuracy(RESUMED), RESUMED)


def test_a_live_watch_keeps_no_more_as_the_log_grows(tmp_path: Path) -> None:
    """Polled as a trainer writes (100 steps a poll, 20,000 steps): what the watcher keeps is
    the same size at the end as after the first window (before: it grew by every record)."""
    log = tmp_path / "events.jsonl"
    log.write_text(
        event_log_line("begin", step=0, wall_time=0.0, mode="train", keys=["loss"], flush_secs=0.1)
        + event_log_line("session_created", step=0, wall_time=0.0, mode="train", restored=False, rewound=False)
    )
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(io.StringIO(), False))
    sizes = []
    for poll in range(200):
        with log.open("a") as out:
            for step in range(poll * 100 + 1, poll * 100 + 101):
                out.write(event_log_line("step", step=step, wall_time=step * 0.01, mode="train", loss=1.0 / step))
        view.poll()
        sizes.append(len(view.run.records))
    assert view.run.step == 20_000
    assert max(sizes) <= KEPT
    assert sizes[-1] == sizes[10]  # flat once the window is full
    assert _row(view, "loss").last == 1.0 / 20_000  # each new record reached the dashboard


def test_a_poll_reads_a_bounded_piece_of_a_long_log(tmp_path: Path) -> None:
    """A follower reads about ``max_bytes`` a poll (whole reads of 1 MiB) and says there is
    more; the pieces are the file's complete lines, each once, in order (before: the whole
    file in one poll, whatever its size)."""
    log = tmp_path / "events.jsonl"
    lines = [f'{{"v":1,"record":"status","step":{n},"pad":"{"x" * (n % 50)}"}}' for n in range(40_000)]
    log.write_text("\n".join(lines) + "\n")
    follower = LogFollower(log, max_bytes=4096)
    read: list[str] = []
    polls = 0
    while True:
        polled = follower.poll()
        polls += 1
        assert sum(len(line) + 1 for line in polled.lines) <= 4096 + 2 * (1 << 20)  # a read, and the line it cut
        read += polled.lines
        if not polled.more:
            break
    assert read == lines
    assert polls >= 2


def test_a_bad_line_deep_in_a_long_log_is_named(tmp_path: Path) -> None:
    """Lines are decoded many at a time; a line that is not a record is still named by its number."""
    log = tmp_path / "events.jsonl"
    good = event_log_line("step", step=1, wall_time=0.0, mode="train", loss=1.0)
    log.write_text(good * 5000 + "step,loss\n" + good)
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(io.StringIO(), False))
    with pytest.raises(NotAnEventLogError, match="line 5001 is not an event log record"):
        view.poll()


def test_many_new_steps_in_one_poll_reach_the_dashboard_as_it_would_show_all_of_them(tmp_path: Path) -> None:
    """A fast run recorded every step: one poll brings 5,000 steps, a dip in the loss in their
    middle, a checkpoint and an evaluation. The dashboard is given the last steps and each key's
    extremes, not all: it is not rebuilt, its best is the dip at its step, its history the last
    values, and the checkpoint's and the evaluation's plain lines are said (a guard: a rebuild
    from what is kept would be quiet)."""
    log = tmp_path / "events.jsonl"
    log.write_text(
        event_log_line("begin", step=0, wall_time=0.0, mode="train", keys=["loss", "eval/loss"], flush_secs=0.1)
        + event_log_line("session_created", step=0, wall_time=0.0, mode="train", restored=False, rewound=False)
        + event_log_line("step", step=1, wall_time=0.001, mode="train", loss=1.0)
    )
    out = io.StringIO()
    view = LogView(log, "events.jsonl", RENDERING.make_sink, Gate(out, True))
    view.poll()

    def loss(step: int) -> float:
        return 0.001 if step == 2500 else 1.0 + 1.0 / step

    with log.open("a") as writing:
        for step in range(2, 5002):
            writing.write(event_log_line("step", step=step, wall_time=step * 0.001, mode="train", loss=loss(step)))
            if step == 3000:
                saved = {"path": "ckpt-3000", "value": None, "wall_time": 3.0}
                writing.write(event_log_line("checkpoint_saved", step=step, **saved))
                writing.write(event_log_line("step", step=step, wall_time=3.0, mode="eval", **{"eval/loss": 0.5}))
    gained, rebuilt = view.poll()
    assert gained
    assert not rebuilt
    row = _row(view, "loss")
    assert (row.best, row.best_step, row.last) == (0.001, 2500, loss(5001))
    assert row.history == tuple(loss(s) for s in range(5002 - len(row.history), 5002))
    assert "checkpoint step 3000: ckpt-3000" in out.getvalue()
    assert "eval at step 3000 | eval/loss 0.5" in out.getvalue()
