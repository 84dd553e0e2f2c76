"""Tests of hookbus/_cli."""
