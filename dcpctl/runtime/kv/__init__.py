"""KV cache: allocator (virtual pages, plain ints), pool (per-rank tensors); policy is the engine's
scheduler."""
from dcpctl.runtime.kv.allocator import AllocatorError, VirtualAllocator, local_len, owner, physical
from dcpctl.runtime.kv.pool import KVPool

__all__ = ["AllocatorError", "KVPool", "VirtualAllocator", "local_len", "owner", "physical"]
