"""Tests of hookbus/_bus."""
