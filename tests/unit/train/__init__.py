"""Tests of ``vlrl.train``."""
