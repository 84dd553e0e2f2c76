"""Argument checks for sinks and publishers written outside hookbus, with hookbus's own messages.

The same checks, one rule each, that hookbus's own sinks use: they raise ``ValueError`` naming the
argument, what was expected and the value given, e.g.
``flush_secs must be a positive finite number of seconds (got inf)``.
"""

from hookbus._rules._home import show_home
from hookbus._rules._validate import (
    finite_number,
    flag,
    key_name,
    non_empty_path,
    non_negative_int,
    non_negative_seconds,
    optional_positive_int,
    optional_seconds,
    positive_int,
    positive_number,
    seconds,
)

__all__ = [
    "finite_number",
    "flag",
    "key_name",
    "non_empty_path",
    "non_negative_int",
    "non_negative_seconds",
    "optional_positive_int",
    "optional_seconds",
    "positive_int",
    "positive_number",
    "seconds",
]

show_home(__name__, globals(), __all__)
