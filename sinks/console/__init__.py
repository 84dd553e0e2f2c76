"""The console dashboard: the sink, its picture, its terminal or notebook, and the health and cluster lines."""
