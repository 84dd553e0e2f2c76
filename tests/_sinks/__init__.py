"""Tests of sinks/ (installed as hookbus.sinks)."""
