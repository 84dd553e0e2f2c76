"""Read event files the way TensorBoard does: real servers (both data paths) and raw records.

Shared by the TensorBoard sink tests and the reliability suite::

    got, log = serve_and_read(logdir, ["--load_fast=false"], {("train", "loss"): {10: 1.5}})
    check_served(got, want, log)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.util import tensor_util

__all__ = [
    "EventRecords",
    "Run",
    "assert_same_runs",
    "check_served",
    "read_event_records",
    "rust_data_server_or_skip",
    "read_run",
    "runs",
    "serve_and_read",
    "tensorboard",
]

Want = dict[tuple[str, str], dict[int, float]]

#: A run as the next tool reads it: tag -> step -> value (a float, a histogram's [k, 3] rows, or the
#: model's configuration as a string).
Run = dict[str, dict[int, Any]]


def read_run(directory: Path) -> Run:
    """Every tensor summary of one run directory, by tag and step (the last write of a step wins,
    as TensorBoard's data server shows it)."""
    acc = event_accumulator.EventAccumulator(str(directory), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    run: Run = {}
    for tag in acc.Tags()["tensors"]:
        for e in acc.Tensors(tag):
            value = tensor_util.make_ndarray(e.tensor_proto)
            number = value.dtype.kind == "f"  # else the model's configuration (a string)
            run.setdefault(tag, {})[e.step] = (float(value) if value.ndim == 0 else value) if number else value.item()
    return run


def runs(logdir: Path) -> dict[str, Run]:
    """Each run directory under ``logdir`` that holds event files, by its path relative to it."""
    found = {p.parent for p in logdir.rglob("events.out.tfevents.*")}
    return {str(d.relative_to(logdir)): read_run(d) for d in sorted(found)}


def assert_same_runs(theirs: dict[str, Run], ours: dict[str, Run], *, rtol: float = 1e-6) -> None:
    """The same runs, tags, steps and values (within ``rtol``)."""
    assert sorted(ours) == sorted(theirs)
    for name, run in theirs.items():
        assert sorted(ours[name]) == sorted(run), name
        for tag, points in run.items():
            assert sorted(ours[name][tag]) == sorted(points), (name, tag)
            for step, value in points.items():
                np.testing.assert_allclose(ours[name][tag][step], value, rtol=rtol, err_msg=f"{name} {tag} {step}")


class Server(NamedTuple):
    """A running tensorboard: its port, its process and its log file."""

    port: int
    proc: subprocess.Popen[bytes]
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@contextlib.contextmanager
def tensorboard(logdir: Path, flags: list[str]) -> Iterator[Server]:
    """A tensorboard server on ``logdir`` (a free port, its own process group), stopped on exit
    (SIGTERM to its group, SIGKILL after 10 s)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
    cmd += ["--port", str(port), *flags]
    log = logdir.parent / f"tensorboard-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield Server(port, proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def serve_and_read(logdir: Path, flags: list[str], want: Want, *, timeout: float = 90.0) -> Any:
    """Start tensorboard on a free port, poll the scalars API until it shows ``want`` or ``timeout`` passes.

    Returns ``(got, log)``: what the server showed last per ``(run, tag)`` (``None`` if it exited)
    and its log.
    """
    got: dict[tuple[str, str], Any] = {}
    with tensorboard(logdir, ["--reload_interval", "1", *flags]) as server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                return None, server.log.read_text()
            try:
                for run, tag in want:
                    rows = _get(server.port, "/data/plugin/scalars/scalars", run=run, tag=tag)
                    got[run, tag] = [(step, value) for _, step, value in rows]
            except (urllib.error.URLError, ConnectionError, OSError):
                got = {}
            if got and all(got[k] == sorted(v.items()) for k, v in want.items()):
                break
            time.sleep(0.5)
        return got, server.log.read_text()


def check_served(got: Any, want: Want, log: str) -> None:
    """Assert that a server showed exactly ``want`` (each step once, in order)."""
    assert got is not None, f"tensorboard exited:\n{log[-3000:]}"
    for key, series in want.items():
        assert got.get(key) == sorted(series.items()), (key, log[-3000:])


def rust_data_server_or_skip() -> None:
    """Skip unless TensorBoard's default (Rust) data server can run on this machine."""
    try:
        import tensorboard_data_server

        binary = tensorboard_data_server.server_binary()
    except ImportError:
        binary = None
    if binary is None or not os.access(binary, os.X_OK):
        pytest.skip("tensorboard-data-server (the Rust data server) is not installed on this machine")
    probe = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"the Rust data server cannot run here: {probe.stderr.strip()[:300]}")


class EventRecords:
    """An event file's records, each CRC-checked, and what trails the last whole record.

    Attributes:
        records: The payloads of the complete records whose checksums match.
        corrupt: ``(offset, why)`` for the first record that is whole but fails a checksum.
        truncated: Bytes after the last complete record (a record torn by a kill), 0 if none.
    """

    def __init__(self, records: list[bytes], corrupt: tuple[int, str] | None, truncated: int) -> None:
        self.records = records
        self.corrupt = corrupt
        self.truncated = truncated


def read_event_records(path: Path) -> EventRecords:
    """Parse ``path`` as TFRecords (length, its masked CRC32C, data, its masked CRC32C)."""
    data = path.read_bytes()
    records: list[bytes] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < 12:
            return EventRecords(records, None, len(data) - offset)
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        if masked_crc32c(header) != length_crc:
            return EventRecords(records, (offset, "length checksum"), 0)
        end = offset + 12 + length + 4
        if end > len(data):
            return EventRecords(records, None, len(data) - offset)
        payload = data[offset + 12 : offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length : end])
        if masked_crc32c(payload) != payload_crc:
            return EventRecords(records, (offset, "data checksum"), 0)
        records.append(payload)
        offset = end
    return EventRecords(records, None, 0)
