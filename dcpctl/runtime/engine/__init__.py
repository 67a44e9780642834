"""Engine: request state, scheduler (KV policy), sampling adapter, continuous-batching loop."""
from dcpctl.runtime.engine.engine import Engine
from dcpctl.runtime.engine.request import SamplingParams, Sequence
from dcpctl.runtime.engine.scheduler import Scheduler, SchedulerError

__all__ = ["Engine", "SamplingParams", "Scheduler", "SchedulerError", "Sequence"]
