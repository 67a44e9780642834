"""The typed, torch-free plan -> runtime contract: the launch config (docs/launch-config.md)."""
