"""Tests of sinks/mlflow."""
