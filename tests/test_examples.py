"""The Keras and custom-loop examples run end to end (in-process, small settings)."""

from __future__ import annotations

import ast
import csv
import os
import re
import runpy
import shlex
import subprocess
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
    assert list((tmp_path / "tb" / "train").glob("events.out.tfevents.*"))  # the training run


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
    """docs/guides/writing-a-publisher.md "Writing a publisher": a NumPy loop drives CSV, NaN guard, early
    stopping, stop-at-step."""
    with pytest.raises(SystemExit, match="0"):
        run_example("custom_publisher.py", monkeypatch, "--steps", "3000", "--dir", str(tmp_path))
    out = capsys.readouterr().out
    stopped = int(out.split("stopped at step ")[1].split(":")[0])
    assert "early stopping: eval/loss did not improve" in out
    assert stopped % 200 == 0  # stopped right at the evaluation that decided
    assert stopped < 3000
    assert steps(tmp_path / "metrics.csv") == list(range(50, stopped + 1, 50))
    assert steps(tmp_path / "metrics.eval.csv") == list(range(200, stopped + 1, 200))


# -- every example runs exactly as its docstring says -----------------------------------------

ROOT = EXAMPLES.parent
VENV = Path(sys.executable).parent.parent  # the venv running the tests: the README's .venv
# What the first and the second run print, for each example whose docstring says to run it again.
AGAIN = {
    "custom_loop.py": ("trained to step 600;", "trained to step 1200;"),
    "custom_publisher.py": ("stopped at step 1800", "resumed from step 1800"),
    "keras_classifier.py": ("first fit ended", "resumed from step"),
    "linear_regression.py": ("model.ckpt-1000", "model.ckpt-2000"),
    "train_and_evaluate.py": ("4 evaluation(s)", "(before the restart)"),
}


def docstring_commands(name: str) -> list[str]:
    """The commands ``name``'s docstring gives, optional ``[...]`` arguments left out."""
    doc = ast.get_docstring(ast.parse((EXAMPLES / name).read_text())) or ""
    assert "python examples/" not in doc.replace(".venv/bin/python examples/", ""), (
        f"{name}: a bare `python examples/...` fails unless the venv is active; write .venv/bin/python"
    )
    found = re.findall(r"(?:^[ \t]+|``)(\.venv/bin/python examples/\S+\.py[^`\n]*)", doc, re.MULTILINE)
    return [re.sub(r"\s*\[[^\]]*\]", "", command).strip() for command in found]


def runs_here(command: str) -> bool:
    """Whether ``command`` runs on one machine (the multi-machine ones need a cluster's TF_CONFIG)."""
    return "examples/distributed.py" not in command or "--local" in command


@pytest.mark.subprocess
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_docstring_command_runs_as_written_from_a_fresh_clone(name: str, tmp_path: Path) -> None:
    commands = [c for c in docstring_commands(name) if runs_here(c)]
    assert commands, f"{name}'s docstring gives no command that runs on one machine"
    # A fresh clone after the README's demo command: the examples, and the venv in .venv.
    (tmp_path / ".venv").symlink_to(VENV)
    (tmp_path / "examples").symlink_to(EXAMPLES)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.defpath  # no activated venv: `python` alone would not find TensorFlow
    doc = ast.get_docstring(ast.parse((EXAMPLES / name).read_text())) or ""
    again = "again" in doc
    assert again == (name in AGAIN), f"{name}: say in AGAIN what its first and second runs print"
    for command in commands:
        runs = 2 if again else 1
        outputs = []
        for _ in range(runs):
            done = subprocess.run(
                shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
            )
            assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            outputs.append(done.stdout)
        if again:
            first, second = AGAIN[name]
            assert first in outputs[0], outputs[0][-2000:]
            assert second in outputs[1], outputs[1][-2000:]


#: The front page and the site's pages (docs/, the guides; the reference pages hold no prose).
GUIDES = ("README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")))


def test_every_example_command_the_guides_give_is_one_its_docstring_runs() -> None:
    """The README and the guides give only commands the docstring test runs; every example is in the
    examples' table (docs/guides/index.md), and a guide names it."""
    table = (ROOT / "docs" / "guides" / "index.md").read_text()
    guide = "\n".join((ROOT / name).read_text() for name in GUIDES)
    for name in GUIDES:
        for command in re.findall(r"(\.venv/bin/python examples/[^`\n]*)", (ROOT / name).read_text()):
            command = command.strip()
            if "<name>" in command:
                continue
            example = command.split()[1].removeprefix("examples/")
            assert command in docstring_commands(example), f"{name}: {command!r} is not a command {example} gives"
    for path in EXAMPLES.glob("*.py"):
        assert f"`{path.name}`" in table, f"docs/guides/index.md's table lacks {path.name}"
        assert f"examples/{path.name}" in guide, f"no guide in docs/ names examples/{path.name}"


def test_the_webhook_notifier_delivers_every_epoch_off_the_training_thread(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_example("webhook_notifier.py", monkeypatch, "--epochs", "3", "--delay", "0.2")
    out = capsys.readouterr().out
    assert "notify: 3 of 3 events delivered, 0 lost, 0 errors" in out
    assert "the webhook received epochs ['epoch 1', 'epoch 2', 'epoch 3']" in out
    assert "sinks: 2 ok |" in out
