"""Tracking URIs: which ones MLflow's client accepts, and how one is shown (its credentials never are).

A URI may carry credentials (``http://alice:TOKEN@host``, ``postgresql://user:secret@db/mlflow``).
The client uses the URI as given; everything the sink shows — its messages, its writer's target,
its stats, its status line (which the event log records), its tags — shows :func:`redact`'s form
(``http://***@host``), and error texts from MLflow, which quote the URI, pass through
:meth:`Redactor.scrub`. MLflow's own variables (``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD``, or ``MLFLOW_TRACKING_TOKEN``) keep credentials out of the URI.
"""

from __future__ import annotations

import importlib.metadata
from urllib.parse import quote, unquote, urlsplit, urlunsplit

__all__ = ["ACCEPTED_SCHEMES", "Redactor", "check_tracking_uri", "redact"]

#: The schemes MLflow's tracking client accepts (``mlflow.tracking``'s store registry): a server,
#: a database through SQLAlchemy (``postgresql+psycopg2://`` names a driver too), Databricks.
#: Plugins add theirs through the ``mlflow.tracking_store`` entry points.
ACCEPTED_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
_HIDDEN = "***"


def _plugin_schemes() -> list[str]:
    return sorted({entry.name for entry in importlib.metadata.entry_points(group="mlflow.tracking_store")})


def check_tracking_uri(uri: str) -> None:
    """Fail unless MLflow's client accepts ``uri``'s scheme (the message shows it redacted).

    Raises:
        ValueError: The file store (which MLflow refuses since 3.13), or a scheme MLflow does
            not know, naming the value and the accepted schemes.
    """
    if uri == "databricks":  # MLflow's name for the workspace of the default profile
        return
    scheme = urlsplit(uri).scheme.lower()
    if scheme in ("", "file"):
        raise ValueError(
            f"tracking_uri {redact(uri)!r} names MLflow's file store, which MLflow refuses since 3.13: use a "
            "database (sqlite:///path/mlflow.db), a server (http://host:5000), or None (SQLite under directory)"
        )
    base, _, driver = scheme.partition("+")
    plugins = _plugin_schemes()
    if (base in _DATABASES or not driver) and (base in ACCEPTED_SCHEMES or scheme in plugins):
        return
    accepted = ", ".join(ACCEPTED_SCHEMES) + (f", and the plugins' {', '.join(plugins)}" if plugins else "")
    raise ValueError(
        f"tracking_uri {redact(uri)!r} has the scheme {scheme!r}, which MLflow's client does not accept; "
        f"the accepted schemes are {accepted} (a database's may name a driver: postgresql+psycopg2://)"
    )


def redact(uri: str) -> str:
    """``uri`` with its user information (``user:token@``) replaced by ``***@``; else unchanged."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{_HIDDEN}@{host}", parts.path, parts.query, parts.fragment))


class Redactor:
    """Scrubs one URI's credentials out of any text (MLflow's error messages quote the URI).

    Args:
        uri: The tracking URI as the client uses it.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.shown = redact(uri)
        userinfo = urlsplit(uri).netloc.rpartition("@")[0] if "@" in urlsplit(uri).netloc else ""
        secrets = {userinfo, unquote(userinfo), quote(unquote(userinfo), safe="")}
        _, _, password = userinfo.partition(":")
        secrets |= {password, unquote(password)}
        # Longest first: the whole user information before its password alone.
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with the URI shown redacted and every credential of it replaced by ``***``."""
        if not self._secrets:
            return text
        text = text.replace(self.uri, self.shown)
        for secret in self._secrets:
            text = text.replace(secret, _HIDDEN)
        return text
