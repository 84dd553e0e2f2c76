"""MLflow's names: the one rule that maps a hookbus key to a name MLflow accepts, and its checks.

MLflow accepts metric, param and tag names of the characters ``[/\\w.\\- :]`` (``\\w`` as Python's
``re`` reads it: Unicode letters and digits and ``_``), at most 250 characters, that stay the same
under ``posixpath.normpath`` (no ``//``, no leading or trailing ``/``, no ``.`` or ``..`` part).
hookbus keys may hold any printable character, so :func:`mlflow_name` maps each key by one rule.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

__all__ = ["MAX_NAME_LENGTH", "check_names", "mlflow_name", "names_tags"]

#: MLflow's longest metric, param or tag name.
MAX_NAME_LENGTH = 250
_REFUSED = re.compile(r"[^/\w.\- :]")
_HASH_CHARS = 8
_TAG_VALUE_LIMIT = 8000  # MLflow's longest tag value
NAMES_TAG = "hookbus.names"


def mlflow_name(key: str) -> str:
    """The MLflow name of hookbus key ``key``, by one rule (names MLflow accepts are unchanged).

    1. Every character outside ``[/\\w.\\- :]`` becomes ``_``.
    2. The name is split at ``/``; empty parts are dropped (``a//b`` → ``a/b``, no leading or
       trailing ``/``), a ``.`` part becomes ``_`` and a ``..`` part ``__``; nothing left → ``_``;
       a name that starts with ``..`` starts with ``_.`` instead (MLflow reads it as a parent).
    3. A name over 250 characters keeps its first 241 and ends with ``_`` and the first 8 hex
       digits of the SHA-256 of ``key``.

    Two keys of one run that map to one name are refused before step 1 (:func:`check_names`);
    the run's tag ``hookbus.names`` records every changed name (``{mlflow name: key}``).

    Example: ``mlflow_name("loss (smoothed)%")`` is ``"loss _smoothed__"``,
    ``mlflow_name("eval//acc")`` is ``"eval/acc"``.
    """
    name = _REFUSED.sub("_", key)
    parts = [{".": "_", "..": "__"}.get(part, part) for part in name.split("/") if part]
    name = "/".join(parts) or "_"
    if name.startswith(".."):
        name = "_" + name[1:]
    if len(name) > MAX_NAME_LENGTH:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
        name = f"{name[: MAX_NAME_LENGTH - _HASH_CHARS - 1]}_{digest}"
    return name


def check_names(keys: Iterable[str], what: str = "keys") -> dict[str, str]:
    """Map every key with :func:`mlflow_name`; fail if two keys get one name.

    Args:
        keys: The run's keys (or hyperparameter names).
        what: What they are, for the message.

    Returns:
        ``{key: mlflow name}`` for every key.

    Raises:
        ValueError: Naming both keys and their shared MLflow name.
    """
    mapped: dict[str, str] = {}
    owners: dict[str, str] = {}
    for key in sorted(set(keys)):
        name = mlflow_name(key)
        other = owners.setdefault(name, key)
        if other != key:
            raise ValueError(
                f"{what} {other!r} and {key!r} both map to the MLflow name {name!r} (hookbus.sinks.mlflow_name); "
                "rename one of them, or leave one out with keys="
            )
        mapped[key] = name
    return mapped


def names_tags(mapping: Mapping[str, str]) -> dict[str, str]:
    """The run tags that record the changed names (``{mlflow name: key}`` as JSON).

    One tag ``hookbus.names`` while the JSON fits MLflow's 8000-character tag values, else
    ``hookbus.names``, ``hookbus.names.2``, ... each holding a part of the mapping.
    """
    changed = {name: key for key, name in sorted(mapping.items()) if name != key}
    tags: dict[str, str] = {}
    part: dict[str, str] = {}
    for name, key in changed.items():
        if part and len(json.dumps({**part, name: key})) > _TAG_VALUE_LIMIT:
            tags[_part_tag(len(tags))] = json.dumps(part)
            part = {}
        part[name] = key
    if part or not tags:
        tags[_part_tag(len(tags))] = json.dumps(part)
    return tags


def _part_tag(index: int) -> str:
    return NAMES_TAG if index == 0 else f"{NAMES_TAG}.{index + 1}"
