"""The one error type of model loading (config.json, checkpoints, quantization, kernel switches), in a module
of its own so that every parser, and the kernels that refuse a setting, can raise it without importing
another."""


class ModelLoadError(Exception):
    """A checkpoint the runtime cannot load; the message is one sentence naming what and where."""
