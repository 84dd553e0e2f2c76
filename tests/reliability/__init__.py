"""The reliability suite: kills, signals, misbehaving sinks, bad input, soak (``-m reliability``)."""
