"""`hookbus demo` as a person sees it: under a real pseudo-terminal at 80x24, read with pyte."""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _pty import run_in_pty

import hookbus

pytestmark = pytest.mark.subprocess

# The console script is a thin entry point to hookbus._cli._cli:main; run it the same way.
_MAIN = [sys.executable, "-c", "import sys; from hookbus._cli._cli import main; sys.exit(main())"]
_BIN = Path(sys.executable).parent.absolute()  # where the venv's console scripts are


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # the demo sets it itself
    # TensorFlow prints its oneDNN notice at import on CPUs with AVX512-VNNI and newer, whatever
    # TF_CPP_MIN_LOG_LEVEL says; forcing oneDNN on makes it print on every x86 CPU, so this test
    # proves the demo's screen stays clean on both kinds of machine.
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    return env


def _steps(path: Path) -> list[int]:
    with open(path, newline="") as fh:
        return [int(row["step"]) for row in csv.DictReader(fh)]


def _header_step(lines: list[str]) -> int:
    header = next(line for line in lines if " step " in line and "steps/s" in line)
    return int(header.split(" step ")[1].split()[0].split("/")[0].replace(",", ""))


def test_the_default_demo_shows_learning_and_early_stopping_decides(tmp_path: Path) -> None:
    logdir = tmp_path / "demo"
    result = run_in_pty(
        [*_MAIN, "demo", "--logdir", str(logdir)],
        cols=80,
        rows=24,
        env=_env(),
        cwd=tmp_path,
        timeout=240,
        moments={
            "first evaluation": lambda t: "evaluation at step 200" in t and "sinks:" in t,
            "later": lambda t: "evaluation at step 1,000" in t and "sinks:" in t,
        },
    )
    everything = "\n".join(result.scrolled)
    assert result.returncode == 0, everything
    assert result.cursor_visible
    # While it runs: the loss has fallen a long way by the first evaluation and further by the
    # fifth; evaluation improves between them (learning shows past the first logged point).
    first, later = (result.moments[name] for name in ("first evaluation", "later"))

    def last(lines: list[str], key: str) -> float:
        return float(next(line for line in lines if line.strip("│ ").startswith(key + " ")).strip("│ ").split()[1])

    assert last(first, "eval/loss") > 2 * last(later, "eval/loss")
    assert last(later, "eval/accuracy") > last(first, "eval/accuracy")
    # The end: early stopping decided before the step budget, said once; one final frame whose
    # header and footer agree; nobody resumed anything, so no "resumed" anywhere.
    assert everything.count("╭─ demo") == 1
    stop = next((line for line in result.scrolled if "stop at step" in line), None)
    assert stop is not None, everything  # the screen, when the final frame lacks the stop line
    stopped_at = int(stop.split("stop at step ")[1].split(":")[0].replace(",", ""))
    assert 1000 < stopped_at < 4000
    assert _header_step(result.scrolled) == stopped_at
    assert everything.count("early stopping: eval/loss") == 2  # once in the footer, once in the closing line
    assert "resumed" not in everything
    assert "sinks: 8 ok" in everything  # every sink, the event log included
    # The closing hint works as printed: the venv's own tensorboard, by a path that exists.
    hint = "".join(result.scrolled).split("open in TensorBoard: ")[1].split(" --logdir ")[0]
    assert Path(tmp_path, hint).resolve() == (_BIN / "tensorboard").resolve()
    assert os.access(Path(tmp_path, hint), os.X_OK)
    # TensorFlow's start-up log records would sit above the dashboard: the demo holds them back.
    output = result.output.decode(errors="replace")
    for noise in ("oneDNN", "absl::InitializeLog", "I0000", "port.cc"):
        assert noise not in output, noise
    # What the sinks wrote: CSV every 10 steps, one eval row per evaluation, checkpoints.
    assert _steps(logdir / "metrics.csv") == list(range(10, stopped_at + 1, 10))
    assert _steps(logdir / "metrics.eval.csv") == list(range(200, stopped_at + 1, 200))
    assert (logdir / "ckpt" / f"model.ckpt-{stopped_at}.index").exists()
    assert any((logdir / "tb").iterdir())


def test_plain_output_says_what_happens_and_a_second_run_resumes(tmp_path: Path) -> None:
    logdir = tmp_path / "demo"
    argv = [*_MAIN, "demo", "--logdir", str(logdir), "--steps", "400", "--eval-every", "200", "--delay", "0"]
    first = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=240, check=False)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert "eval at step 200" in "\n".join(lines)
    assert not [line for line in lines if "resumed" in line]  # the evaluation rounds resume nothing
    assert any(line.startswith("  sinks: 8 ok | ") and "CSVSink 42 rows" in line for line in lines)  # 40 + 2 eval
    # Its options are the run's hyper-parameters: a sweep of demos differs by them (hookbus watch DIR).
    begin = next(r for r in hookbus.read_event_log(logdir / "events.jsonl") if r["record"] == "begin")
    assert begin["hparams"] == {"steps": 400, "eval_every": 200, "patience": 3, "reduce_lr": 0}
    # The demo records its event log, and `hookbus replay` rebuilds the CSV from it as written live.
    replayed = tmp_path / "replayed" / "metrics.csv"
    rebuilt = subprocess.run(
        [*_MAIN, "replay", str(logdir / "events.jsonl"), "--csv", str(replayed)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert replayed.read_text() == (logdir / "metrics.csv").read_text()
    assert replayed.with_name("metrics.eval.csv").read_text() == (logdir / "metrics.eval.csv").read_text()
    again = [*argv[: argv.index("--steps") + 1], "600", *argv[argv.index("--steps") + 2 :]]
    second = subprocess.run(again, capture_output=True, text=True, env=_env(), timeout=240, check=False)
    assert second.returncode == 0, second.stderr
    assert "resumed from step 400" in second.stdout.splitlines()
    assert _steps(logdir / "metrics.csv") == list(range(10, 601, 10))


def test_a_logdir_that_cannot_be_written_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory\n")
    logdir = tmp_path / "a-file" / "demo"
    result = subprocess.run(
        [*_MAIN, "demo", "--logdir", str(logdir)], capture_output=True, text=True, env=_env(), timeout=240, check=False
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"hookbus demo: cannot write in --logdir {logdir}: Not a directory"]


def test_version_and_a_bare_command() -> None:
    version = subprocess.run([*_MAIN, "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0
    assert version.stdout.startswith("hookbus 0.")
    bare = subprocess.run(_MAIN, capture_output=True, text=True, check=False)
    assert bare.returncode == 2  # argparse's status for a missing argument
    assert "usage: hookbus" in bare.stderr
    assert "demo" in bare.stderr
    assert "--version" in bare.stderr


def test_after_ctrl_c_the_printed_resume_command_resumes(tmp_path: Path) -> None:
    logdir = tmp_path / "demo"
    result = run_in_pty(
        [*_MAIN, "demo", "--logdir", str(logdir)],
        cols=80,
        rows=24,
        env=_env(),
        cwd=tmp_path,
        timeout=240,
        ctrl_c_when=lambda t: "evaluation at step 400" in t and "sinks:" in t,
    )
    everything = "\n".join(result.scrolled)
    assert result.returncode == 130, everything
    assert everything.count("╭─ demo") == 1  # the final frame drawn once, under no stale copy
    stop = next((line for line in result.scrolled if "stop at step" in line), None)
    assert stop is not None, everything  # the screen, when the final frame lacks the stop line
    stopped_at = int(stop.split("stop at step ")[1].split(":")[0].replace(",", ""))
    assert _header_step(result.scrolled) == stopped_at
    assert "received SIGINT" in stop
    # Printed after the dashboard stopped: plain text in the output, whatever the terminal wrapped.
    hint = result.output.decode().split("Resume with: ")[1].splitlines()[0]
    command = shlex.split(hint)
    assert Path(tmp_path, command[0]).resolve() == (_BIN / "hookbus").resolve()  # the venv's own script
    resumed = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=240, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {stopped_at:,}" in resumed.stdout.splitlines()
    steps = _steps(logdir / "metrics.csv")
    assert steps == list(range(10, steps[-1] + 1, 10))  # each step once across the interruption
