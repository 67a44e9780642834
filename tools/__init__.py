"""Profilers and one-question probes: `python -m tools.NAME` from the repository root (tools/README.md)."""
