"""Tests of sinks/checkpoint."""
