"""dcpctl: plan, launch and run decode context parallelism (DCP) for MLA models."""

__version__ = "0.1.0"
