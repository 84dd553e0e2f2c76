"""Tests of hookbus/_tf/loop."""
