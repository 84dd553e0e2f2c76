"""Tests of hookbus/_publishing."""
