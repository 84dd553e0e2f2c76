"""The checkpoint sink: its default schedule, the best-k ranking, and what a directory holds as a run starts."""
