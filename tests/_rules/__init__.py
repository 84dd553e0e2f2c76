"""Tests of hookbus/_rules."""
