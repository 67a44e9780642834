"""Built-in presets: model shapes, hardware profiles, deployment recipes (YAML)."""
