"""Harness codebases: each sub-package is importable on its own and runs in its own env pool."""
