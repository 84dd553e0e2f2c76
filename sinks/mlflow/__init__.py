"""The MLflow sink: the run its background writer drives, and the one rule for MLflow's names."""
