"""Scripts a user runs to measure dcpctl, beside the `dcpctl bench` commands: `python -m benchmarks.NAME` from
the repository root (benchmarks/README.md lists them; benchmarks/gpu.sh runs them on a GPU machine)."""
