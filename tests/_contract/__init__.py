"""Tests of hookbus/_contract."""
