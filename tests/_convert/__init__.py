"""Tests of hookbus/_convert."""
