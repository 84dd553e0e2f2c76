"""Tests of hookbus/_tf/hook."""
