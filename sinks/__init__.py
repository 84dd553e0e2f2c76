"""Sinks: independent subscribers that show, save and steer a run (import as ``hookbus.sinks``)."""

__all__: list[str] = []
