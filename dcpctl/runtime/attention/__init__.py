"""Attention: the model interface (api), local kernels, the LSE merge, DCP exchanges and context."""
from dcpctl.runtime.attention.dcp import DCPContext, SeqChunk, ShardLayout, build_context, build_layout
from dcpctl.runtime.attention.merge import Partial, merge, merge_stacked

__all__ = ["DCPContext", "Partial", "SeqChunk", "ShardLayout", "build_context", "build_layout",
           "merge", "merge_stacked"]
