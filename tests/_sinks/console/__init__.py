"""Tests of sinks/console."""
