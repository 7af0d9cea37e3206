"""The comparison harness behind scripts/compare/compare.py (see docs/compare.md)."""
