"""ConsoleSink: the dashboard's text, plain mode, logging routing and terminal restoration."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyte
import pytest
from _pty import _CLEARED, run_in_pty
from rich.console import Console

import hookbus
from hookbus.sink_api import CheckpointSaved, Schedule
from hookbus.sinks import ConsoleSink
from hookbus.sinks.console import _render as render
from hookbus.sinks.console._render import best_direction
from hookbus.sinks.console._terminal import wants_live
from hookbus.testing import FakeClock, ScriptedPublisher


class StopAt(hookbus.sink_api.Sink):
    """A stand-in for a stop-at-step sink: knows the total, reports a status, stops."""

    def __init__(self, last: int, status: str | None = "patience 2/5") -> None:
        super().__init__(every_n_steps=1, name="StopAt")
        self.last = last
        self._status = status

    @property
    def total_steps(self) -> int | None:
        return self.last

    def status(self) -> str | None:
        return self._status

    def on_after_run(self, event: hookbus.Event) -> None:
        if event.step >= self.last:
            event.request_stop(f"reached step {self.last}")


class Broken(hookbus.sink_api.Sink):
    """An observability sink that always fails (isolated by the bus)."""

    def on_after_run(self, event: hookbus.Event) -> None:
        raise ValueError("disk full")


@pytest.fixture(autouse=True)
def _plain_terminal_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal variables run_in_pty sets for its children, here for in-process consoles too.

    Inherited ones change what rich and wants_live decide (TERM=dumb or TTY_INTERACTIVE=0: never
    live; TTY_COMPATIBLE=0: no terminal), so the results would depend on the shell running pytest.
    """
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


def text_of(sink: ConsoleSink, width: int = 120) -> str:
    """The dashboard as it would be drawn now, as plain text."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(sink.renderable())
    return console.export_text()


def terminal(output: str, cols: int = 120, rows: int = 60) -> pyte.Screen:
    """What a terminal shows after ``output``."""
    screen = pyte.Screen(cols, rows)
    screen.set_mode(pyte.modes.LNM)  # a StringIO gets bare "\n"; a pty would add the "\r"
    pyte.Stream(screen).feed(output)
    return screen


def make(
    clock: FakeClock, *, live: bool | None = False, terminal_console: bool = False, **kwargs: Any
) -> tuple[hookbus.EventBus, ConsoleSink, Console]:
    console = Console(file=io.StringIO(), force_terminal=terminal_console, width=120)
    bus = hookbus.EventBus(clock=clock)
    sink = ConsoleSink(console, run_name="exp-1", clock=clock, live=live, **kwargs)
    bus.attach(sink)
    return bus, sink, console


# -- the dashboard's content -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "error", "word"),
    [
        (None, None, "finished"),  # its last step
        ("StopAt", None, "finished"),  # a sink stopped it at the step it was asked to
        ("signal", None, "stopped"),  # preempted: resumable
        ("thread watchdog", None, "stopped"),  # a stop requested from outside
        (None, KeyboardInterrupt(), "stopped"),
        (None, RuntimeError("boom"), "crashed"),
    ],
)
def test_the_summary_says_how_the_run_ended_in_one_word_at_the_runs_average_rate(
    clock: FakeClock, stop: str | None, error: BaseException | None, word: str
) -> None:
    # Issue 36: the summary said "stopped" for a run a sink stopped at its last step, and its
    # rate was the last few seconds' (4,345.7 steps/s for a run that averaged 3,466).
    bus, sink, console = make(clock, live=None, every_n_steps=1, plain_every_n_secs=3600)
    pub = ScriptedPublisher(bus, ["loss"])
    with pytest.raises(type(error)) if error is not None else contextlib.nullcontext(), bus:
        pub.begin()
        clock.advance(10.0)  # start-up (a graph, a session) is part of the run
        pub.session(0)
        for step in range(1, 201):
            clock.advance(0.01 if step <= 100 else 0.1)  # 100 steps/s, then 10
            pub.advance({"loss": 1.0})
            if step == 200 and stop is not None:
                bus.request_stop("asked", source=stop)
        if error is not None:
            raise error
        pub.end()
    (summary,) = [line for line in console.file.getvalue().splitlines() if line.startswith("exp-1: ")]  # type: ignore[attr-defined]
    # 200 steps in 10 + 1 + 10 s: 9.5 steps/s on average (the recent rate is about 10).
    # The time outside the steps beside it: none on this clock (the publisher measures it; no examples counted).
    assert summary == f"exp-1: {word} at step 200 after 0:00:21 (9.5 steps/s, outside 0.0 ms/step)"


def test_header_shows_step_rate_total_progress_and_eta(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    bus.attach(StopAt(1000))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(100):
            clock.advance(0.1)
            pub.advance({"loss": 0.5})
        text = text_of(sink)
    assert "exp-1" in text
    assert "train" in text
    assert "step 100/1,000" in text
    assert "recent 10.0 steps/s" in text  # 1 step per 0.1 s
    assert "10%" in text
    assert "ETA 0:01:30" in text  # 900 steps at 10 steps/s
    assert "elapsed 0:00:10" in text


def _counting_32(clock: FakeClock) -> tuple[hookbus.EventBus, ConsoleSink, Console, ScriptedPublisher]:
    """A dashboard due every step, a publisher counting 32 examples a step from its session's start, and
    a subscriber that takes 50 ms of ``clock`` at each step: time outside the framework's steps."""
    bus, sink, console = make(clock, every_n_steps=1, plain_every_n_secs=0)
    bus.on("after_run", lambda event: clock.advance(0.05), keys="loss", every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss"])
    pub.core.throughput.counter = lambda step: (step - pub.core.throughput.origin) * 32
    return bus, sink, console, pub


def test_header_and_plain_line_show_examples_per_second_and_time_outside(clock: FakeClock) -> None:
    # 32 examples a step; a subscriber that takes 50 ms at each step (on this bus's clock), 100 ms a
    # step in the framework: 1 step per 0.15 s, 213 examples/s, 50 ms/step outside the steps.
    bus, sink, console, pub = _counting_32(clock)
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(40):
            clock.advance(0.1)
            pub.advance({"loss": 0.5})
        text = text_of(sink)
        narrow = text_of(sink, width=70)
        line = console.file.getvalue().splitlines()[-1]  # type: ignore[attr-defined]
    assert "recent 6.7 steps/s   213 examples/s   outside 50.0 ms/step" in text
    # A header that would wrap leaves the time outside out first (the plain lines keep it).
    assert "recent 6.7 steps/s 213 examples/s elapsed" in " ".join(narrow.split())
    assert "outside" not in narrow
    assert line == "step 40 | loss 0.5 | recent 6.7 steps/s | 213 examples/s | outside 50.0 ms/step"


def test_the_end_shows_the_runs_average_examples_per_second_and_time_outside(clock: FakeClock) -> None:
    # Two train sessions in one run (a train_and_evaluate round, say), each counting its examples from
    # its own start: 20 steps each of 0.1 s in the framework and 0.05 s in a subscriber, 32 examples a
    # step. The run: 40 steps, 1,280 examples over 6 s: 6.7 steps/s, 213 examples/s; outside, 50 ms after
    # each step but a session's last (whose subscriber runs after that session's last event): 47.5 ms/step.
    bus, sink, console, pub = _counting_32(clock)
    with bus:
        pub.begin()
        for start in (0, 20):
            pub.session(start)
            for _ in range(20):
                clock.advance(0.1)
                pub.advance({"loss": 0.5})
        pub.end()
    text = text_of(sink)
    assert "average 6.7 steps/s   213 examples/s   outside 47.5 ms/step" in text
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "exp-1: finished at step 40 after 0:00:05 (6.7 steps/s, 213 examples/s, outside 47.5 ms/step)" in printed


def test_without_examples_or_time_outside_the_rate_stands_alone(clock: FakeClock) -> None:
    # A publisher that counts no examples (no batch size) shows steps/s alone; a scripted publisher's
    # quick steps take no time on this clock, so the time outside is 0.
    bus, sink, console = make(clock, every_n_steps=1, plain_every_n_secs=0)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(10):
            clock.advance(0.1)
            pub.advance({"loss": 0.5})
        line = console.file.getvalue().splitlines()[-1]  # type: ignore[attr-defined]
    assert line == "step 10 | loss 0.5 | recent 10.0 steps/s | outside 0.0 ms/step"


def test_header_without_a_known_total_has_no_progress_bar(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(5):
            clock.advance(1.0)
            pub.advance({"loss": 0.5})
        text = text_of(sink)
    assert "step 5 " in text
    assert "ETA" not in text
    assert "%" not in text


def test_metrics_table_shows_last_best_and_step_of_best(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss", "accuracy", "lr"])
    losses = [0.9, 0.5, 0.25, 0.4, 0.3]
    accuracies = [0.1, 0.8, 0.6, 0.7, 0.75]
    with bus:
        pub.begin()
        pub.session(0)
        for loss, acc in zip(losses, accuracies, strict=True):
            clock.advance(0.5)
            pub.advance({"loss": loss, "accuracy": acc, "lr": 0.01})
        rows = {row.key: row for row in sink.snapshot.train}
        text = text_of(sink)
    row = rows["loss"]
    assert (row.last, row.best, row.best_step, row.direction) == (0.3, 0.25, 3, "min")
    assert (rows["accuracy"].best, rows["accuracy"].best_step, rows["accuracy"].direction) == (0.8, 2, "max")
    lines = {line.split()[1]: line for line in text.splitlines() if len(line.split()) > 2}
    assert lines["loss"].split()[2:6] == ["0.3", "0.25", "min", "3"]
    assert lines["accuracy"].split()[2:6] == ["0.75", "0.8", "max", "2"]
    assert lines["lr"].split()[2:6] == ["0.01", "0.01", "min", "1"]


def test_non_finite_values_are_shown_but_never_best(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 1.0}, {"loss": math.nan}, {"loss": -math.inf}])
    (row,) = sink.snapshot.train
    assert (row.best, row.best_step) == (1.0, 1)
    assert row.last is not None
    assert math.isinf(row.last)
    assert "-inf" in text_of(sink)


def test_non_scalar_values_are_left_out(clock: FakeClock) -> None:
    np = pytest.importorskip("numpy")
    bus, sink, _ = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss", "weights", "summary"])
    with bus:
        pub.run([{"loss": 1.0, "weights": np.zeros(3), "summary": b"\x00"}])
    assert [row.key for row in sink.snapshot.train] == ["loss"]


def test_goals_override_the_direction_of_best(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1, goals={"reward": "max"})
    pub = ScriptedPublisher(bus, ["reward"])
    with bus:
        pub.run([{"reward": 1.0}, {"reward": 5.0}, {"reward": 2.0}])
    assert sink.snapshot.train[0].best == 5.0


@pytest.mark.parametrize(
    ("key", "goal"),
    [
        ("loss", "min"),
        ("eval/loss", "min"),
        ("val_error", "min"),
        ("accuracy", "max"),
        ("eval/top5_acc", "max"),
        ("auc", "max"),
        ("lr", "min"),
        ("accuracy_loss", "min"),
    ],
)
def test_goal_for_key(key: str, goal: str) -> None:
    assert best_direction(key) == goal


def test_evaluation_section_appears_when_eval_values_arrive(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss"])
    evaluator = ScriptedPublisher(bus, ["loss", "accuracy"], mode="eval")
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(10):
            pub.advance({"loss": 1.0})
        before = text_of(sink)
        evaluator.evaluate({"loss": 0.7, "accuracy": 0.6}, step=10)
        after = text_of(sink)
    assert "evaluation" not in before
    assert "eval/loss" not in before
    assert "evaluation at step 10" in after
    eval_lines = [line for line in after.splitlines() if "eval/" in line]
    assert any("eval/loss" in line and "0.7" in line and "min" in line for line in eval_lines)
    assert any("eval/accuracy" in line and "0.6" in line and "max" in line for line in eval_lines)


def test_status_line_shows_checkpoint_stop_other_sinks_and_errors(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    bus.attach(StopAt(6, status="patience 1/3"))
    bus.attach(Broken(name="uploader"))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(4):
            pub.advance({"loss": 1.0})
        pub.publish("checkpoint_saved", CheckpointSaved("runs/exp/ckpt/model.ckpt-4", 4, 0.5))
        while not pub.advance({"loss": 1.0}):
            pass
        pub.end({"loss": 1.0})
        text = text_of(sink, width=200)
    assert "checkpoint step 4 (0.5)" in text  # the path is in the plain log, not on the dashboard
    assert text.count("stop at step 6: reached step 6 (StopAt)") == 1
    assert "StopAt: patience 1/3" not in text  # once stopping, the stop line says it all
    assert "errors: uploader ×6" in text
    assert "sinks: 2 ok, 1 failing" in text
    assert "(stopping)" in text
    assert "(finished)" in text_of(sink, width=200)


class Status(hookbus.sink_api.Sink):
    """Reports a status line and no last step."""

    def status(self) -> str | None:
        return "patience 1/3"


def test_other_sinks_status_shows_while_running_the_last_step_only_in_the_header(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    bus.attach(StopAt(6, status="stop at step 6"))
    bus.attach(Status())
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"loss": 1.0})
        text = text_of(sink)
    assert "Status: patience 1/3" in text
    assert "step 1/6" in text
    assert "stop at step 6" not in text


def test_a_rewind_resets_the_rate_and_is_noted(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(5):
            clock.advance(1.0)
            pub.advance({"loss": 1.0})
        assert sink.snapshot.rate == pytest.approx(1.0)
        pub.session(3, restored=True)
        assert sink.snapshot.rate is None
        assert sink.snapshot.step == 3
        text = text_of(sink)
    assert "rewound to step 3 (session re-created)" in text
    assert "recent - steps/s" in text


def test_a_run_resumed_from_an_earlier_checkpoint_says_so(clock: FakeClock) -> None:
    bus, sink, console = make(clock, every_n_steps=1, plain_every_n_secs=0)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(500, restored=True)
        pub.advance({"loss": 1.0})
        assert "resumed from step 500" in text_of(sink)
    assert "resumed from step 500" in console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_sessions_ending_between_rounds_do_not_end_the_run(clock: FakeClock) -> None:
    bus, sink, console = make(clock, every_n_steps=1, plain_every_n_secs=0)
    pub = ScriptedPublisher(bus, ["loss"])
    evaluator = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        pub.run([{"loss": 1.0}, {"loss": 0.5}])  # one round of train-and-evaluate
        evaluator.session(2, restored=True)  # its evaluation restores the round's checkpoint
        assert "evaluating checkpoint 2" in text_of(sink)
        evaluator.evaluate({"loss": 0.75}, step=2)
        assert "evaluating" not in text_of(sink)
        pub.session(2, restored=True)  # the next round continues where this run was: no resume
        clock.advance(1.0)
        pub.advance({"loss": 0.25})
        assert sink.snapshot.running
        assert "(" not in text_of(sink).splitlines()[1]  # no phase shown while running
    assert "(finished)" in text_of(sink)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "resumed" not in out
    assert "rewound" not in out
    assert "eval at step 2 | eval/loss 0.75" in out.splitlines()


def test_sparkline_history_is_bounded(clock: FakeClock) -> None:
    bus, sink, _ = make(clock, every_n_steps=1, history=5)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": float(s)} for s in range(1, 1001)])
    (row,) = sink.snapshot.train
    assert row.history == (996.0, 997.0, 998.0, 999.0, 1000.0)
    assert row.best_step == 1  # the best survives the history window


def test_sparkline_scales_between_min_and_max() -> None:
    assert render.sparkline((0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)) == "▁▂▃▄▅▆▇█"
    assert render.sparkline((3.0, 3.0)) == "▄▄"
    assert render.sparkline((1.0, math.nan, 2.0)) == "▁!█"
    assert render.sparkline((math.nan,)) == "!"
    assert render.sparkline((0.0, 7.0), ascii_only=True) == "_#"


def test_default_schedule_is_time_based_and_fetches_only_due_steps(clock: FakeClock) -> None:
    assert ConsoleSink().schedule == Schedule(every_n_secs=0.25, at_end=True)
    assert ConsoleSink(refresh_per_second=2).schedule == Schedule(every_n_secs=0.5, at_end=True)
    assert ConsoleSink(every_n_steps=10).schedule == Schedule(every_n_steps=10, at_end=True)
    bus, sink, _ = make(clock)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for _ in range(10):
            clock.advance(0.1)
            pub.advance({"loss": 1.0})
        pub.end({"loss": 2.0})
    assert [step for step, _ in pub.fetched] == [1, 4, 7, 10]
    assert sink.snapshot.train[0].last == 1.0  # step 10 was fetched, so no extra final event


def test_a_failing_drawing_is_shown_instead_of_raising(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("bad frame")

    monkeypatch.setattr(render, "build", explode)
    sink = ConsoleSink(Console(file=io.StringIO()), clock=clock)
    assert "dashboard could not be drawn: ZeroDivisionError: bad frame" in text_of(sink)


def test_renderable_survives_a_failing_clock() -> None:
    def broken_clock() -> float:
        raise OSError("no clock")

    sink = ConsoleSink(Console(file=io.StringIO()), clock=lambda: 0.0, run_name="r")
    sink.clock = broken_clock
    assert "r" in text_of(sink)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"refresh_per_second": 0}, "refresh_per_second must be a positive finite number (got 0)"),
        ({"history": 0}, "history must be a positive int (got 0)"),
        ({"plain_every_n_secs": -1}, "plain_every_n_secs must be a finite number of seconds >= 0 (got -1)"),
        ({"live": "yes"}, "live must be True, False or None (got 'yes')"),
        ({"console": "stdout"}, "console must be a rich.console.Console or None (got 'stdout')"),
        ({"goals": {"loss": "down"}}, "goals['loss'] must be 'min' or 'max' (got 'down')"),
        ({"every_n_secs": 0}, "every_n_secs must be a positive finite number of seconds (got 0)"),
    ],
)
def test_invalid_arguments_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ConsoleSink(**kwargs)


def test_exported_from_hookbus_sinks() -> None:
    import hookbus.sinks

    assert "ConsoleSink" in hookbus.sinks.__all__
    assert hookbus.sinks.ConsoleSink is ConsoleSink
    assert ConsoleSink().on_error == "isolate"


# -- plain mode ------------------------------------------------------------------------------


def test_plain_mode_prints_periodic_lines_without_cursor_codes(clock: FakeClock) -> None:
    bus, sink, console = make(clock, live=None, every_n_steps=1, plain_every_n_secs=10)
    bus.attach(StopAt(100, status=None))
    pub = ScriptedPublisher(bus, ["loss", "accuracy"])
    evaluator = ScriptedPublisher(bus, ["loss"], mode="eval")
    with bus:
        pub.begin()
        pub.session(0)
        while True:
            clock.advance(1.0)
            if pub.advance(lambda s: {"loss": 1.0 / s, "accuracy": s / 100}):
                break
            if pub.step == 50:
                evaluator.evaluate({"loss": 0.123}, step=50)
                pub.publish("checkpoint_saved", CheckpointSaved("ckpt/model-50", 50))
        assert not sink.is_live
        pub.end()
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[" not in output
    lines = output.splitlines()
    progress = [line for line in lines if line.startswith("step ")]
    # one line at the first step, then at most one per 10 s of (fake) time: 100 s -> 10 more
    assert progress[0] == "step 1/100 | loss 1 | accuracy 0.01 | recent - steps/s"
    assert len(progress) == 10
    expected = "step 11/100 | loss 0.09091 | accuracy 0.11 | recent 1.0 steps/s | outside 0.0 ms/step | ETA 0:01:29"
    assert expected in progress
    assert "eval at step 50 | eval/loss 0.123" in lines
    assert "checkpoint step 50: ckpt/model-50" in lines
    assert "stop at step 100: reached step 100 (StopAt)" in lines
    # StopAt (a sink) stopped it at the step it was asked to: finished, at the run's average rate.
    assert "exp-1: finished at step 100 after 0:01:40 (1.0 steps/s, outside 0.0 ms/step)" in lines
    assert "  loss: last 0.01, best seen (min) 0.01 at step 100" in lines  # over the steps it was sent
    assert "  eval/loss: last 0.123, best (min) 0.123 at step 50" in lines


def test_tty_interactive_0_forces_plain_mode(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_INTERACTIVE", "0")
    bus, sink, console = make(clock, live=None, terminal_console=True)
    assert console.is_terminal
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"loss": 0.5})
        assert not sink.is_live
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "step 1 | loss 0.5" in output
    assert "\x1b[" not in output


def test_a_pipe_is_plain_even_when_force_color_makes_it_look_like_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    with open(write_fd, "w") as pipe:
        console = Console(file=pipe)
        assert console.is_terminal  # rich believes FORCE_COLOR
        assert not wants_live(console)
    master, slave = os.openpty()
    try:
        with open(slave, "w") as tty:
            assert wants_live(Console(file=tty))
    finally:
        os.close(master)


def test_in_memory_files_follow_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert wants_live(Console(file=io.StringIO(), force_terminal=True))
    assert not wants_live(Console(file=io.StringIO(), force_terminal=False))
    assert not wants_live(Console(file=io.StringIO(), force_terminal=True, force_interactive=False))


# -- live mode: terminal and logging restored ------------------------------------------------


def test_live_dashboard_runs_and_leaves_the_final_frame_and_a_visible_cursor(clock: FakeClock) -> None:
    bus, sink, console = make(clock, live=None, terminal_console=True, every_n_steps=1)
    bus.attach(StopAt(20, status=None))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        # One tuple: after `assert sink.is_live` mypy holds it True and skips the rest as unreachable.
        assert (sink.is_live, console.is_terminal) == (True, True)
        while not pub.advance(lambda s: {"loss": 1.0 / s}):
            clock.advance(0.5)
        pub.end()
    assert not sink.is_live
    assert not console.is_alt_screen
    screen = terminal(console.file.getvalue())  # type: ignore[attr-defined]
    shown = "\n".join(screen.display)
    assert not screen.cursor.hidden
    assert "step 20/20" in shown
    assert "(finished)" in shown
    assert "0.05" in shown  # loss at step 20


def run_then_raise(bus: hookbus.EventBus, error: BaseException, seen_stdout: list[Any] | None = None) -> None:
    """One training step on ``bus``, then ``error`` from inside the run (noting ``sys.stdout`` there)."""
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"loss": 0.5})
        if seen_stdout is not None:
            seen_stdout.append(sys.stdout)
        raise error


def test_close_is_idempotent_and_restores_the_terminal_after_an_exception(clock: FakeClock) -> None:
    bus, sink, console = make(clock, live=True, terminal_console=True, every_n_steps=1)
    stdout, seen_stdout = sys.stdout, list[Any]()
    with pytest.raises(RuntimeError, match="boom"):
        run_then_raise(bus, RuntimeError("boom"), seen_stdout)
    assert seen_stdout[0] is not stdout  # rich's redirect of print was on
    assert sys.stdout is stdout
    assert not sink.is_live
    output = console.file.getvalue()  # type: ignore[attr-defined]
    sink.close()
    sink.close()
    assert console.file.getvalue() == output  # type: ignore[attr-defined]
    screen = terminal(output)
    assert not screen.cursor.hidden
    assert "crashed at step 1: RuntimeError: boom" in "\n".join(screen.display)


def test_keyboard_interrupt_is_shown_as_stopped(clock: FakeClock) -> None:
    bus, sink, console = make(clock, live=True, terminal_console=True, every_n_steps=1)
    with pytest.raises(KeyboardInterrupt):
        run_then_raise(bus, KeyboardInterrupt())
    screen = terminal(console.file.getvalue())  # type: ignore[attr-defined]
    assert not screen.cursor.hidden
    assert "(stopped)" in "\n".join(screen.display)


class _AbslLikeHandler(logging.Handler):
    """Like absl's handler: not a stream handler itself, it wraps one."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self.python_handler = logging.StreamHandler(stream)

    def emit(self, record: logging.LogRecord) -> None:
        self.python_handler.emit(record)


def test_logging_goes_through_the_console_and_is_restored(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    real_stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", real_stderr)
    tf_logger = logging.getLogger("tensorflow")
    absl_logger = logging.getLogger("absl-like")
    handler = logging.StreamHandler(sys.stderr)  # made before the dashboard: past rich's redirect
    absl_handler = _AbslLikeHandler(sys.stderr)
    file_like = io.StringIO()
    other = logging.StreamHandler(file_like)  # not the terminal: left alone
    tf_logger.addHandler(handler)
    tf_logger.addHandler(other)
    absl_logger.addHandler(absl_handler)
    before = {name: list(logging.getLogger(name).handlers) for name in ("", "tensorflow", "absl-like")}
    try:
        bus, sink, console = make(clock, live=True, terminal_console=True, every_n_steps=1)
        pub = ScriptedPublisher(bus, ["loss"])
        with bus:
            pub.begin()
            pub.session(0)
            pub.advance({"loss": 0.5})
            tf_logger.warning("tf says hello")
            absl_logger.warning("absl says hello")
            print("printed line")
            assert handler.stream is not real_stderr
            assert other.stream is file_like
        assert handler.stream is real_stderr
        assert absl_handler.python_handler.stream is real_stderr
        after = {name: list(logging.getLogger(name).handlers) for name in ("", "tensorflow", "absl-like")}
    finally:
        tf_logger.removeHandler(handler)
        tf_logger.removeHandler(other)
        absl_logger.removeHandler(absl_handler)
    assert after == before
    assert real_stderr.getvalue() == ""
    assert "tf says hello" in file_like.getvalue()
    shown = "\n".join(terminal(console.file.getvalue()).display)  # type: ignore[attr-defined]
    for line in ("tf says hello", "absl says hello", "printed line"):
        assert line in shown
    assert shown.count("╭─ exp-1") == 1  # the log lines sit above one dashboard, not inside frames


def test_a_second_run_starts_afresh(clock: FakeClock) -> None:
    bus, sink, console = make(clock, every_n_steps=1)
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.run([{"loss": 3.0}, {"loss": 2.0}])
    with bus:
        pub.begin()
        pub.session(2, restored=True)
        pub.advance({"loss": 5.0})
    assert sink.snapshot.train[0].best == 5.0
    assert sink.snapshot.step == 3


# -- a real terminal -------------------------------------------------------------------------

_SCRIPT = """
import logging, signal, sys, time
sys.modules["tensorflow"] = None  # the dashboard needs no TensorFlow; importing it costs seconds
import hookbus
from hookbus.sinks import ConsoleSink
from hookbus.testing import ScriptedPublisher

signal.signal(signal.SIGINT, signal.default_int_handler)
logging.basicConfig(level=logging.INFO)  # a handler on the real stderr, made before the dashboard


class StopAt(hookbus.sink_api.Sink):
    total_steps = {last}

    def on_after_run(self, event):
        if event.step >= self.total_steps:
            event.request_stop("enough")


bus = hookbus.EventBus()
bus.attach(ConsoleSink(run_name="pty-run", refresh_per_second=20))
bus.attach(StopAt(every_n_steps=1))
pub = ScriptedPublisher(bus, ["loss", "accuracy"])
values = lambda s: {{"loss": 1.0 / s, "accuracy": min(1.0, s / 150)}}
with bus:
    pub.begin()
    pub.session(0)
    while not pub.advance(values):
        if pub.step == 60:
            logging.getLogger("train").info("log marker")
            print("print marker")
        time.sleep(0.01)
    pub.end(values)
print("after the run")
"""


def _script(tmp_path: Path, last: int) -> list[str]:
    path = tmp_path / "dashboard.py"
    path.write_text(textwrap.dedent(_SCRIPT.format(last=last)))
    return [sys.executable, str(path)]


@pytest.mark.subprocess
def test_dashboard_in_a_real_terminal(tmp_path: Path) -> None:
    result = run_in_pty(_script(tmp_path, 150), cols=100, rows=40, timeout=60)
    text = result.text
    assert result.returncode == 0, text
    assert result.cursor_visible
    assert "pty-run" in text
    assert "step 150/150" in text
    assert "(finished)" in text
    assert "100%" in text
    rows = {line.split()[1]: line.split() for line in result.lines if line.startswith("│ ") and len(line.split()) > 5}
    assert rows["loss"][2:4] == ["0.006667", "0.006667"]
    assert rows["accuracy"][2:4] == ["1", "1"]
    assert "INFO:train:log marker" in result.lines
    assert "print marker" in result.lines
    assert text.count("╭─ pty-run") == 1  # earlier frames were overwritten in place
    assert result.lines.index("print marker") < next(i for i, line in enumerate(result.lines) if "╭─ pty-run" in line)
    assert "after the run" in result.lines


_CHATTY = """
import logging, sys, threading, time
sys.modules["tensorflow"] = None
import hookbus
from hookbus.sinks import ConsoleSink
from hookbus.testing import ScriptedPublisher

logging.basicConfig(level=logging.INFO, format="%(message)s")  # on the real stderr, before the dashboard
done = threading.Event()


def chatter():  # another thread that logs all along, as the machine sampler's notice at a run's start
    n = 0
    while not done.is_set():
        n += 1
        if n % 2:
            logging.getLogger("chatter").info("tick %d", n)
        else:
            print(f"said {{n}}")  # and prints, through the redirected stdout
        time.sleep(0.0005)


for attempt in range(8):  # each start and end of the dashboard is a chance for a record to slip past
    thread = threading.Thread(target=chatter)
    thread.start()
    bus = hookbus.EventBus(system_metrics=False)
    bus.attach(ConsoleSink(run_name=f"chatty-{{attempt}}", refresh_per_second=20))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run({{"loss": 1.0}} for _ in range(3))
    done.set()
    thread.join()
    done.clear()
print("after the runs")
"""


@pytest.mark.subprocess
def test_a_thread_logging_while_the_dashboard_starts_and_ends_never_splits_its_frame(tmp_path: Path) -> None:
    # test_dashboard_in_a_real_terminal once found its frame drawn twice. The dashboard drew its frame,
    # then routed logging through the console: a record another thread logged in between reached the
    # terminal past the frame (the same at the end, where logging was restored before the final frame);
    # and rich's proxy placed a line above the frame outside the lock its refresh holds. Each left the
    # next frame drawn under a stale copy of it. Swapping sys.stdout back under a printing thread also
    # crashed (CPython 3.11's print() holds the stream without a reference).
    path = tmp_path / "chatty.py"
    path.write_text(textwrap.dedent(_CHATTY.format()))
    result = run_in_pty([sys.executable, str(path)], cols=100, rows=40, timeout=120)
    assert result.returncode == 0, result.text
    rows = result.scrolled  # everything the terminal showed, the rows scrolled off the top included
    for attempt in range(8):
        tops = [row for row in rows if row.startswith(f"╭─ chatty-{attempt} ")]
        assert len(tops) == 1, "\n".join(rows)  # each run's frame drawn in place, once
    assert any(row.startswith("tick ") for row in rows)
    assert any(row.startswith("said ") for row in rows)
    assert "after the runs" in result.lines


@pytest.mark.subprocess
def test_ctrl_c_in_a_real_terminal_stops_the_run_and_restores_it(tmp_path: Path) -> None:
    # The first Ctrl-C is a graceful stop: the dashboard ends as stopped, with the reason, and the
    # program then ends interrupted (KeyboardInterrupt once everything is closed).
    result = run_in_pty(_script(tmp_path, 10**9), cols=100, rows=40, timeout=60, interrupt_on=b"print marker")
    assert result.interrupted
    assert result.returncode != 0
    assert result.cursor_visible
    assert "(stopped)" in result.text
    assert "received SIGINT" in result.text
    assert "KeyboardInterrupt: stopped gracefully after Ctrl-C" in result.text
    assert "after the run" not in result.text


@pytest.mark.parametrize("width", [120, 80, 50, 30])
def test_names_and_numbers_stay_whole_at_any_width_the_sparkline_gives_way(width: int) -> None:
    long_name = "a_very_long_metric_name/with/many/parts/that/does/not/fit/in/eighty/columns"
    rows = (
        render.MetricRow("loss", "min", 0.123456, 0.1, 1234567, tuple(float(i) for i in range(40))),
        render.MetricRow(long_name, "max", 1.5e-7, 2.5e-7, 12, tuple(float(i) for i in range(40))),
    )
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.print(render.Dashboard(render.Snapshot("run", step=1234567, total=2000000, train=rows), 0.0))
    text = console.export_text()
    assert "…" not in text
    inside = [line.strip("│ ").split() for line in text.splitlines()]
    first = next(i for i, cells in enumerate(inside) if cells and cells[0].startswith("a_very"))
    folded = [inside[first][0]]  # the name's first part, then the lines that hold only its rest
    for cells in inside[first + 1 :]:
        if len(cells) != 1 or cells[0].startswith("╰"):
            break
        folded.append(cells[0])
    assert "".join(folded) == long_name
    assert "0.1235" in text  # "last" always shows
    assert "1.500e-07" in text
    if width >= 80:
        assert "1,234,567" in text  # "at step" while it fits
    if width >= 120:
        assert len(folded) == 1  # the name whole on its line: it comes before the sparkline


def test_a_failing_writer_is_named_once_in_its_warning_line_and_in_the_health_lines(
    clock: FakeClock, tmp_path: Path
) -> None:
    # A CSV file replaced by a foreign one mid-run: the writer fails at the next flush, the bus
    # disables the sink; the error's own text begins with the sink's name.
    from hookbus.sinks import CSVSink

    bus, sink, console = make(clock, every_n_steps=1, plain_every_n_secs=0)
    path = tmp_path / "m.csv"
    csv_sink = bus.attach(CSVSink(path, every_n_steps=1))
    pub = ScriptedPublisher(bus, ["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 8):
            if step == 5:
                csv_sink.flush()
                path.unlink()
                path.write_text("a,b\n1,2\n")
            pub.advance({"loss": 1.0 / step})
        pub.end({"loss": 1.0})
        frame = text_of(sink, width=300)
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    (warning,) = [line for line in printed.splitlines() if line.startswith("error in ")]
    assert warning.startswith("error in CSVSink on flush at step 7: WriterError: background write failed")
    (health,) = [line for line in printed.splitlines() if line.startswith("  sinks: ")]
    assert health.count("CSVSink") == 1, health
    assert "errors: CSVSink ×1 (" in health
    assert "disabled" in health
    assert "4 rows" in health  # the 4 rows written before the file was replaced
    (line,) = [line for line in frame.splitlines() if "sinks: " in line]
    assert line.count("CSVSink") == 1, line
    assert "disabled" in line
