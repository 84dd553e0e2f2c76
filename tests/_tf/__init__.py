"""Tests of hookbus/_tf."""
