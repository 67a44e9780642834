"""Benchmarks behind `dcpctl bench`: each module exposes a click command named `command`."""
