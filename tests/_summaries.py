"""A run's row read from its whole event log by the tests' own rule, beside what a summary says
(:class:`hookbus.RunSummary`): the summary tests and the kill test compare the two."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import hookbus

__all__ = ["fold", "same", "shown"]

LOWER = ("loss",)


def fold(path: Path) -> dict[str, Any]:
    """What a row of runs shows, read from the whole log by the test's own rule."""
    records = hookbus.read_event_log(path)
    latest: dict[str, tuple[int, float]] = {}
    best: dict[str, tuple[int, float]] = {}
    nonfinite: dict[str, int] = {}
    for r in records:
        if r["record"] != "step":
            continue
        for key, value in r.get("values", {}).items():
            latest[key] = (r["step"], value)
            if not math.isfinite(value):
                nonfinite[key] = nonfinite.get(key, 0) + 1
                continue
            lower = any(word in key for word in LOWER)
            if key not in best or (value < best[key][1] if lower else value > best[key][1]):
                best[key] = (r["step"], value)
    begins = [i for i, r in enumerate(records) if r["record"] == "begin"]
    closes = [i for i, r in enumerate(records) if r["record"] == "close"]
    ended = records[closes[-1]].get("ended") if closes and closes[-1] > begins[-1] else None
    hparams = [r["hparams"] for r in records if r["record"] == "begin" and r.get("hparams") is not None]
    return {
        "step": max(r["step"] for r in records if isinstance(r.get("step"), int) and r["record"] != "close"),
        "ended": ended,
        "hparams": hparams[-1] if hparams else None,
        "latest": latest,
        "best": best,
        "nonfinite": nonfinite,
    }


def shown(summary: hookbus.RunSummary) -> dict[str, Any]:
    """The same facts, from a summary."""
    keys = summary.keys
    return {
        "step": summary.step,
        "ended": summary.ended,
        "hparams": summary.hparams,
        "latest": {k: (s.latest_step, s.latest) for k, s in keys.items()},
        "best": {k: (s.best_step, s.best) for k, s in keys.items() if s.best is not None},
        "nonfinite": {k: s.nonfinite for k, s in keys.items() if s.nonfinite},
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN == NaN as text
