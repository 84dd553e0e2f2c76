"""Tests of hookbus/_checkpoints."""
