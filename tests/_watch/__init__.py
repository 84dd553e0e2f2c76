"""Tests of hookbus/_watch."""
