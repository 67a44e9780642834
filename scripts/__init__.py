"""Scripts that make the repository's own artifacts: `python -m scripts.NAME` from the repository root."""
