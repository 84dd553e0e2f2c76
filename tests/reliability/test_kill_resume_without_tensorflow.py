"""A publisher without TensorFlow checkpoints and resumes through its own store (issue 24, item 2).

``examples/custom_publisher.py`` (NumPy SGD, ``CheckpointSink`` + ``CSVSink`` + early stopping)
runs in an environment where TensorFlow is not installed: the child's ``sys.path`` holds the
standard library, this tree's hookbus, and every package of the test's environment except
TensorFlow and Keras (``python -I -S``: no site, no ``.pth``, nothing else). It is killed with
SIGKILL inside a checkpoint's barrier (the CSV flushed past the previous checkpoint, the model
not yet written), restarted, and must resume from the previous checkpoint and write each CSV row
exactly once: the files end identical to an uninterrupted run's, values included.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hookbus
import hookbus.sinks

pytestmark = [pytest.mark.subprocess, pytest.mark.reliability]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_publisher.py"
#: Top-level names (packages and their ``.dist-info``) that are TensorFlow or need it.
TENSORFLOW = re.compile(r"^(tensorflow|keras|tf_keras)", re.IGNORECASE)
KILL_AT = 1000  # the second checkpoint (every 500 steps): killed in its barrier, resumed from 500

BOOT = """
import importlib.util, os, re, runpy, signal, sys

sys.path[:0] = __PATH__
assert importlib.util.find_spec("tensorflow") is None, "TensorFlow is installed here"
assert importlib.util.find_spec("keras") is None, "Keras is installed here"
kill_at = int(os.environ.get("KILL_AT", "0"))
if kill_at:
    import hookbus

    offer = hookbus.publisher_api.PublisherCore.offer_checkpoints

    def offer_and_die(core, backend, store=None):
        save = backend.save

        def save_or_die(path):
            if int(re.search(r"-(\\d+)$", path).group(1)) >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # the CSV is flushed and the states taken; no model yet
            return save(path)

        backend.save = save_or_die
        offer(core, backend, store)

    hookbus.publisher_api.PublisherCore.offer_checkpoints = offer_and_die
sys.argv = [__EXAMPLE__, *sys.argv[1:]]
try:
    runpy.run_path(__EXAMPLE__, run_name="__main__")
finally:
    print("tensorflow imported:", "tensorflow" in sys.modules)
"""


def environment_without_tensorflow(root: Path) -> list[str]:
    """A ``sys.path`` of this test's packages without TensorFlow's: links in ``root``, one per package."""
    site = root / "site-packages"
    site.mkdir(parents=True)
    for directory in map(Path, sys.path):
        if directory.name not in ("site-packages", "dist-packages") or not directory.is_dir():
            continue
        for entry in directory.iterdir():
            skip = TENSORFLOW.match(entry.name) or entry.name.startswith(("hookbus", "__editable__"))
            if not skip and entry.suffix != ".pth" and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    # This tree's hookbus as installed (editable or not), with hookbus.sinks where it imports from.
    package = root / "hookbus"
    package.mkdir()
    for entry in Path(hookbus.__file__).parent.iterdir():
        (package / entry.name).symlink_to(entry)
    if not (package / "sinks").exists():
        (package / "sinks").symlink_to(Path(hookbus.sinks.__file__).parent)
    return [str(root), str(site)]


def run(boot: Path, directory: Path, kill_at: int = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["KILL_AT"] = str(kill_at)
    return subprocess.run(
        [sys.executable, "-I", "-S", str(boot), "--steps", "3000", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows without ``wall_time`` (the only column a clock decides)."""
    with open(path, newline="") as file:
        return [{k: v for k, v in row.items() if k != "wall_time"} for row in csv.DictReader(file)]


def test_a_numpy_publisher_resumes_after_sigkill_without_tensorflow(tmp_path: Path) -> None:
    boot = tmp_path / "boot.py"
    path = environment_without_tensorflow(tmp_path / "env")
    boot.write_text(textwrap.dedent(BOOT).replace("__PATH__", repr(path)).replace("__EXAMPLE__", repr(str(EXAMPLE))))

    reference = run(boot, tmp_path / "uninterrupted")
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert "tensorflow imported: False" in reference.stdout
    stopped = int(reference.stdout.split("stopped at step ")[1].split(":")[0])
    assert stopped > KILL_AT  # the kill below lands before the run would have ended

    killed = run(boot, tmp_path / "run", kill_at=KILL_AT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    on_disk = [int(row["step"]) for row in rows(tmp_path / "run" / "metrics.csv")]
    assert on_disk[-1] == KILL_AT  # flushed by the barrier it died in: rows past the checkpoint to drop
    pointer = (tmp_path / "run" / "ckpt" / "checkpoint.json").read_text()
    assert '"latest": "model.ckpt-500"' in pointer

    resumed = run(boot, tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 500" in resumed.stdout
    assert "tensorflow imported: False" in resumed.stdout
    assert f"stopped at step {stopped}:" in resumed.stdout
    got, expected = rows(tmp_path / "run" / "metrics.csv"), rows(tmp_path / "uninterrupted" / "metrics.csv")
    assert [int(row["step"]) for row in got] == list(range(50, stopped + 1, 50))  # each row exactly once
    assert got == expected  # and the same values: the model and its data stream came back
    assert rows(tmp_path / "run" / "metrics.eval.csv") == rows(tmp_path / "uninterrupted" / "metrics.eval.csv")
