"""The command line's argument types shared by its commands (argparse ``type=`` functions)."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """``text`` as an int greater than 0, or argparse's refusal naming it."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive int (got {text})")
    return value
