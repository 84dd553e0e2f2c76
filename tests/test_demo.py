"""`hookbus demo` as a person sees it: under a real pseudo-terminal, read with pyte."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest

from tests._pty import run_in_pty

pytestmark = pytest.mark.subprocess


def test_demo_in_a_terminal_shows_the_run_and_leaves_every_output(tmp_path: Path) -> None:
    logdir = tmp_path / "demo"
    # The console script is a thin entry point to hookbus._cli:main; run it the same way.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # the demo sets it itself
    # TensorFlow prints its oneDNN notice at import on CPUs with AVX512-VNNI and newer, whatever
    # TF_CPP_MIN_LOG_LEVEL says; forcing oneDNN on makes it print on every x86 CPU, so this test
    # proves the demo's screen stays clean on both kinds of machine.
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    result = run_in_pty(
        [sys.executable, "-c", "import sys; from hookbus._cli import main; sys.exit(main())",
         "demo", "--logdir", str(logdir), "--steps", "1500", "--eval-every", "500", "--delay", "0.002"],
        cols=110,
        rows=60,
        env=env,
        timeout=240,
    )
    text = result.text
    assert result.returncode == 0, text
    assert result.cursor_visible
    # The final frame of the dashboard and the demo's closing lines, as text on the screen.
    assert "step 1,500/1,500" in text
    assert "loss" in text
    assert "accuracy" in text
    assert "eval/loss" in text
    assert "checkpoint step 1500" in text
    assert "reached step 1500" in text
    assert f"tensorboard --logdir {logdir / 'tb'}" in "".join(result.lines)  # long paths wrap
    # TensorFlow's start-up log records would sit above the dashboard: the demo holds them back.
    everything = result.output.decode(errors="replace")
    for noise in ("oneDNN", "absl::InitializeLog", "I0000", "port.cc"):
        assert noise not in everything, noise
    # What the sinks wrote: CSV every 10 steps, one eval row per evaluation, checkpoints.
    with open(logdir / "metrics.csv", newline="") as fh:
        steps = [int(row["step"]) for row in csv.DictReader(fh)]
    assert steps == list(range(10, 1501, 10))
    with open(logdir / "metrics.eval.csv", newline="") as fh:
        assert [int(row["step"]) for row in csv.DictReader(fh)] == [500, 1000, 1500]
    assert (logdir / "ckpt" / "model.ckpt-1500.index").exists()
    assert any((logdir / "tb").iterdir())
