"""Every code block of the getting-started page runs as written (issue 50): the README's quickstart
(the TF1 hook, which the page includes), a Keras ``fit`` and a loop of your own, each with real
TensorFlow in a fresh interpreter, in an empty directory, as a new user pastes it.

The TF1 block turns eager execution off for its process, so it cannot share one with the other
two; the blocks run side by side, one process each. What each block's ``CSVSink`` names is read
back: a block that ran but trained nothing fails too.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_package import ROOT, page_text

pytest.importorskip("tensorflow")

pytestmark = pytest.mark.subprocess

PAGE = ROOT / "docs" / "getting-started.md"


def python_blocks() -> list[str]:
    """The page's ``python`` blocks, as the site shows them (its snippets included)."""
    return re.findall(r"^```python\n(.*?)^```", page_text(PAGE), re.MULTILINE | re.DOTALL)


def test_the_page_shows_each_publisher() -> None:
    blocks = python_blocks()
    assert len(blocks) == 3, [b[:60] for b in blocks]
    for publisher in ("EventBusHook", "EventBusCallback", "LoopPublisher"):
        assert sum(publisher in b for b in blocks) == 1, publisher


def test_every_code_block_of_the_getting_started_page_runs(tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""}
    running = []
    for i, block in enumerate(python_blocks()):
        cwd = tmp_path / f"block{i}"
        cwd.mkdir()
        (cwd / "block.py").write_text(block)
        process = subprocess.Popen(
            [sys.executable, "block.py"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        running.append((block, cwd, process))
    for block, cwd, process in running:
        out, err = process.communicate(timeout=280)
        assert process.returncode == 0, f"{block[:300]}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-3000:]}"
        files = re.findall(r'CSVSink\("([^"]+)"', block)
        assert files, block[:200]
        for name in files:
            with open(cwd / name, newline="") as file:
                rows = list(csv.DictReader(file))
            assert rows, f"{name} holds no row"
            assert int(float(rows[-1]["step"])) > 0, rows[-1]
