"""The Keras and custom-loop examples run end to end (in-process, small settings)."""

from __future__ import annotations

import csv
import runpy
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", [name, *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def steps(path: Path) -> list[int]:
    with open(path) as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def test_keras_classifier_trains_stops_early_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_example("keras_classifier.py", monkeypatch, "--epochs", "8", "--dir", str(tmp_path))
    out = capsys.readouterr().out
    assert "early stopping: eval/loss did not improve" in out
    assert "resumed from step" in out
    epoch_steps = steps(tmp_path / "epochs.csv")
    assert epoch_steps == sorted(set(epoch_steps))
    assert epoch_steps[0] == 16
    rows = steps(tmp_path / "metrics.csv")
    assert rows == list(range(4, rows[-1] + 1, 4))  # continued across the resume, each step once
    assert (tmp_path / "ckpt" / "checkpoint").exists()
    assert any((tmp_path / "tb").iterdir())


def test_custom_loop_trains_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_example("custom_loop.py", monkeypatch, "--steps", "200", "--dir", str(tmp_path))
    run_example("custom_loop.py", monkeypatch, "--steps", "100", "--dir", str(tmp_path))
    out = capsys.readouterr().out
    assert "trained to step 200" in out
    assert "trained to step 300" in out
    assert steps(tmp_path / "metrics.csv") == list(range(25, 301, 25))
    assert steps(tmp_path / "metrics.eval.csv") == [200]


def test_a_publisher_for_another_loop_is_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README "Writing a publisher": a NumPy loop drives CSV, NaN guard, early stopping, stop-at-step."""
    with pytest.raises(SystemExit, match="0"):
        run_example("custom_publisher.py", monkeypatch, "--steps", "3000", "--dir", str(tmp_path))
    out = capsys.readouterr().out
    stopped = int(out.split("stopped at step ")[1].split(":")[0])
    assert "early stopping: eval/loss did not improve" in out
    assert stopped % 200 == 0  # stopped right at the evaluation that decided
    assert stopped < 3000
    assert steps(tmp_path / "metrics.csv") == list(range(50, stopped + 1, 50))
    assert steps(tmp_path / "metrics.eval.csv") == list(range(200, stopped + 1, 200))
