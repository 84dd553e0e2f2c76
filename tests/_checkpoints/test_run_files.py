"""Run files between training and an evaluator task (no TensorFlow): stale ones are ignored."""

from __future__ import annotations

from pathlib import Path

from hookbus._checkpoints._run_files import ENDED, STOP, EvaluatorLink, RunFiles


def test_run_files_of_an_earlier_run_are_ignored_and_cleared(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    files.request_stop("old decision", 40, wall_time=100.0)
    files.mark_ended(50, wall_time=101.0)
    assert files.stop_requested(since=200.0) is None  # written before this run began
    assert files.ended(since=200.0) is None
    assert files.stop_requested(since=50.0) == ("old decision", 40)
    EvaluatorLink(files, since=200.0)  # training's run begins: leftovers go
    assert not (tmp_path / STOP).exists()
    assert not (tmp_path / ENDED).exists()


def test_the_first_stop_request_is_kept_and_training_sees_it_once(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    link = EvaluatorLink(files, since=10.0, every_secs=1.0)
    assert link.poll(now=0.0) is None
    files.request_stop("early stopping: eval/loss did not improve", 300, wall_time=20.0)
    files.request_stop("a later reason", 400, wall_time=21.0)
    assert link.poll(now=0.5) is None  # read at most once a second
    assert link.poll(now=1.0) == ("early stopping: eval/loss did not improve", 300)
    assert link.poll(now=5.0) is None  # acted on once
    files.mark_ended(320, wall_time=30.0)
    assert files.ended(since=10.0) == 320


def test_a_torn_or_foreign_record_reads_as_none(tmp_path: Path) -> None:
    (tmp_path / STOP).write_text('{"reason": "half')
    (tmp_path / ENDED).write_text("[1, 2]")
    files = RunFiles(tmp_path)
    assert files.stop_requested(since=0.0) is None
    assert files.ended(since=0.0) is None
