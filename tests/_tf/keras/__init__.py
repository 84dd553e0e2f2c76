"""Tests of hookbus/_tf/keras."""
