"""``hookbus watch``: a run's live dashboard read from its event logs alone."""
