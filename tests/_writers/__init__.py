"""Tests of hookbus/_writers."""
