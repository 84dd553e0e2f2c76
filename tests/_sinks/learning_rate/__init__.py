"""Tests of sinks/learning_rate."""
