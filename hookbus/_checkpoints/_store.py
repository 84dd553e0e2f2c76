"""Checkpoint stores: where a publisher's checkpoints live on disk (the storage half of checkpointing).

A store lists a directory's checkpoints, writes the pointer (which of them are kept, the latest
last), keeps the sinks' states beside each checkpoint (``<prefix>.hookbus.json``) and removes,
moves and copies a checkpoint's files. It never decides anything: *when* to save and *what* to
keep are :class:`~hookbus.sinks.CheckpointSink`'s (as ignite's ``DiskSaver`` stores what its
``Checkpoint`` decides). A publisher offers a store with its backend
(:meth:`hookbus.publisher_api.PublisherCore.offer_checkpoints`): the TensorFlow publishers give TensorFlow's
layout (:class:`hookbus._tf._checkpoint_tf1.TensorFlowStore`), and :class:`FileCheckpointStore` is
the layout of a framework without its own (NumPy, ``examples/custom_publisher.py``). Nothing
here imports TensorFlow, and the bus assumes no layout.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
from typing import Any, Protocol, runtime_checkable

from hookbus._rules._files import write_atomically

__all__ = ["STATE_SUFFIX", "CheckpointStore", "FileCheckpointStore", "recover", "step_of"]

#: Suffix of the file holding the sinks' states beside a checkpoint prefix.
STATE_SUFFIX = ".hookbus.json"
#: Where :meth:`FileCheckpointStore.set_aside` moves a checkpoint that cannot be restored, inside its directory.
SET_ASIDE = "unreadable"
_STEP = re.compile(r"-(\d+)$")


def step_of(path: str) -> int | None:
    """The step in a checkpoint prefix's ``-N`` suffix (``model.ckpt-500``: 500), or ``None``."""
    found = _STEP.search(path)
    return int(found.group(1)) if found else None


@runtime_checkable
class CheckpointStore(Protocol):
    """Where checkpoints live: what :class:`~hookbus.sinks.CheckpointSink` asks of storage.

    A checkpoint is named by its prefix (``<directory>/model.ckpt-<step>``, absolute); the model's
    files are whatever the publisher's backend wrote under it. Every write that a crash could cut
    in half (the pointer, a state file) must be atomic: a crash leaves the old whole or the new.
    """

    def checkpoints(self, directory: str) -> list[str]:
        """The checkpoints the pointer of ``directory`` names that exist, oldest first, the latest last.

        Empty without a pointer. This is how a new process finds what earlier ones kept.
        """
        ...

    def set_pointer(self, directory: str, prefixes: list[str]) -> None:
        """Atomically make ``prefixes`` (oldest first) the pointer's checkpoints, the last the latest
        (none: no latest checkpoint)."""
        ...

    def remove(self, prefix: str) -> None:
        """Delete every file of checkpoint ``prefix``, its state file last (missing files are fine)."""
        ...

    def write_state(self, prefix: str, data: dict[str, Any]) -> None:
        """Atomically write the sinks' states ``data`` (JSON-serializable) beside checkpoint ``prefix``."""
        ...

    def read_state(self, prefix: str) -> dict[str, Any] | None:
        """What :meth:`write_state` wrote beside ``prefix``, or ``None`` when nothing was."""
        ...

    def with_states(self, directory: str) -> list[str]:
        """Every checkpoint in ``directory`` with a state file beside it (named or not by the pointer)."""
        ...

    def problem(self, prefix: str) -> str | None:
        """What keeps checkpoint ``prefix`` from being restored, or ``None`` when it reads back whole."""
        ...

    def set_aside(self, prefix: str) -> str:
        """Move checkpoint ``prefix``'s files out of the way (``<directory>/unreadable``); the new prefix."""
        ...

    def copy(self, prefix: str, directory: str) -> str:
        """Copy checkpoint ``prefix`` (its files and state) into ``directory``; the new prefix."""
        ...


class FileCheckpointStore:
    """A :class:`CheckpointStore` of plain files: ``<prefix><suffix>`` in one local directory.

    The layout of a framework without its own: a checkpoint exists once its ``marker`` file does
    (write that one last, or atomically); the pointer is ``checkpoint.json`` in the directory
    (``{"latest": name, "all": [names]}``, names relative to it, so the directory can move). The
    sinks' states go beside each checkpoint as ``<prefix>.hookbus.json``.

    Args:
        marker: The suffix of the file whose presence says a checkpoint exists (e.g. ``".npz"``).
        pattern: A regular expression matching what follows the prefix in each of the model's
            file names (default: ``marker`` itself, one file per checkpoint).
        pointer: The pointer's file name in the directory (default ``"checkpoint.json"``).

    Raises:
        ValueError: ``marker`` is not a suffix starting with ``"."``, or ``pattern`` is not a
            regular expression that matches ``marker``.
    """

    def __init__(self, marker: str, pattern: str | None = None, *, pointer: str = "checkpoint.json") -> None:
        if not isinstance(marker, str) or not marker.startswith(".") or len(marker) < 2 or os.sep in marker:
            raise ValueError(f"marker must be a file suffix such as '.npz' (got {marker!r})")
        try:
            compiled = re.compile(re.escape(marker) if pattern is None else pattern)
        except (TypeError, re.error) as error:
            raise ValueError(f"pattern must be a regular expression (got {pattern!r}: {error})") from None
        if not compiled.fullmatch(marker):
            raise ValueError(f"pattern {pattern!r} must match the marker {marker!r}")
        if not isinstance(pointer, str) or not pointer or os.sep in pointer:
            raise ValueError(f"pointer must be a file name (got {pointer!r})")
        self.marker = marker
        self.pointer = pointer
        self._files = re.compile(f"(?:{compiled.pattern})|{re.escape(STATE_SUFFIX)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.marker!r})"

    def exists(self, prefix: str) -> bool:
        """Whether checkpoint ``prefix`` is there (its marker file exists)."""
        return os.path.exists(prefix + self.marker)

    def files(self, prefix: str) -> list[str]:
        """The files of checkpoint ``prefix``, its state file included (not a longer prefix's, ``prefix + "0"``)."""
        # A listing, not glob: each glob pattern (a new one per checkpoint name) stays in fnmatch's
        # cache of 32,768 compiled patterns, ~0.9 KB each (bench/README.md "Memory over a long run").
        directory, base = os.path.split(prefix)
        try:
            names = os.listdir(directory or ".")
        except (FileNotFoundError, NotADirectoryError):  # as glob: no such directory, no files
            return []
        return [
            os.path.join(directory, name)
            for name in names
            if name.startswith(base + ".") and self._files.fullmatch(name[len(base) :])
        ]

    # -- the pointer -------------------------------------------------------------------------
    def checkpoints(self, directory: str) -> list[str]:
        try:
            with open(os.path.join(directory, self.pointer), encoding="utf-8") as file:
                data = json.load(file)
        except FileNotFoundError:
            return []
        names = [*data.get("all", []), data["latest"]] if data.get("latest") else list(data.get("all", []))
        paths = list(dict.fromkeys(os.path.abspath(os.path.join(directory, n)) for n in names))
        return [p for p in paths if self.exists(p)]

    def set_pointer(self, directory: str, prefixes: list[str]) -> None:
        names = [os.path.relpath(p, directory) for p in prefixes]
        data = {"latest": names[-1] if names else None, "all": names}
        write_atomically(os.path.join(directory, self.pointer), json.dumps(data) + "\n")

    # -- a checkpoint's files ----------------------------------------------------------------
    def remove(self, prefix: str) -> None:
        # The state file goes last: a kill halfway leaves it, so the next start still recognizes
        # the rest as hookbus's and finishes the job (recover()).
        for name in sorted(self.files(prefix), key=lambda name: name.endswith(STATE_SUFFIX)):
            with contextlib.suppress(FileNotFoundError):  # a kill between two removals already took it
                os.remove(name)

    def write_state(self, prefix: str, data: dict[str, Any]) -> None:
        # Temp file in the same directory, then os.replace: a crash leaves no file or the whole new one.
        write_atomically(prefix + STATE_SUFFIX, json.dumps(data))

    def read_state(self, prefix: str) -> dict[str, Any] | None:
        try:
            with open(prefix + STATE_SUFFIX, encoding="utf-8") as file:
                data = json.load(file)
        except FileNotFoundError:
            return None
        return dict(data)

    def with_states(self, directory: str) -> list[str]:
        return sorted(
            state[: -len(STATE_SUFFIX)] for state in glob.glob(os.path.join(glob.escape(directory), "*" + STATE_SUFFIX))
        )

    def problem(self, prefix: str) -> str | None:
        if not self.exists(prefix):
            return f"its file {os.path.basename(prefix)}{self.marker} is missing"
        return None

    def set_aside(self, prefix: str) -> str:
        # Kept for a person to look at, out of the way of the pointer, retention and pruning
        # (which look only at the directory itself).
        target = os.path.join(os.path.dirname(prefix), SET_ASIDE, os.path.basename(prefix))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        for name in self.files(prefix):
            os.replace(name, target + name[len(prefix) :])
        return target

    def copy(self, prefix: str, directory: str) -> str:
        os.makedirs(directory, exist_ok=True)
        target = os.path.join(directory, os.path.basename(prefix))
        for name in self.files(prefix):
            shutil.copyfile(name, target + name[len(prefix) :])
        return target


def recover(store: CheckpointStore, directory: str, keep: int | None) -> tuple[list[str], list[str]]:
    """``(kept, dropped)`` as a run starts: the pointer's checkpoints to keep, and what to prune.

    ``kept`` are the last ``keep`` checkpoints the pointer names (all of them for ``None``),
    oldest first; ``dropped`` are those beyond ``keep`` and every checkpoint hookbus saved in
    ``directory`` that the pointer does not name: what a kill between the pointer and pruning
    leaves behind (or between a save and the pointer, which named it never). Only prefixes with
    a hookbus state file count as hookbus's: a framework's own unlisted checkpoints (a Saver's
    ``keep_checkpoint_every_n_hours``) are left alone. The latest checkpoint is never dropped,
    and nothing is while the pointer names no checkpoint on disk (none yet, or a directory moved
    under a pointer with absolute paths): without a latest, nothing is known to be stale.
    """
    listed = store.checkpoints(directory)
    if not listed:
        return [], []
    kept = listed if keep is None else listed[-keep:]
    unlisted = [p for p in store.with_states(directory) if p not in listed and step_of(p) is not None]
    dropped = listed[: len(listed) - len(kept)] + sorted(unlisted, key=lambda p: step_of(p) or 0)
    return kept, dropped
