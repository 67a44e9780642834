"""vLLM 0.34.0's dense MLA attention backends and its selector, as facts (torch-free).

Each row is what the backend class declares in v1/attention/backends/mla/<file>.py: compute
capability majors (`supports_compute_capability`), kernel block sizes
(`get_supported_kernel_block_sizes`; a fixed size also accepts its multiples, `AttentionBackend.
supports_block_size`), KV dtypes (`supported_kv_cache_dtypes`), and the head-dim rule of
`supports_combination`. All six return the LSE and declare `supports_dcp`. Head sizes: the MLA common backend's [320, 512, 576]
(model_executor/layers/attention/mla_attention.py), FlashAttention MLA's [576], Triton's any. The order per GPU
generation is `platforms/cuda.py` `_get_backend_priorities`; the first valid one wins
(`get_valid_backends` / `get_attn_backend_cls`), and the block size is the winner's
`get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE)` unless --block-size is set
(`platforms/interface.py` `update_block_size_for_backend`).
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.plan.vllm import DEFAULT_BLOCK_SIZE

DTYPES = ("float16", "bfloat16")  # every dense MLA backend's supported_dtypes (v1/attention/backend.py)
FULL_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")
NO_FP8_KV = ("auto", "float16", "bfloat16")


@dataclass(frozen=True)
class MlaBackend:
    name: str
    file: str                       # v1/attention/backends/mla/<file>.py
    majors: tuple[int, ...] | None  # compute capability majors; None: any
    blocks: tuple[int, ...]         # kernel block sizes (a block size must be a multiple of one)
    kv: tuple[str, ...]
    heads: tuple[int, ...] = (320, 512, 576)  # get_supported_head_sizes (kv_lora_rank + qk_rope_head_dim); (): any
    nope_dims: tuple[int, ...] | None = None  # supports_combination: qk_nope_head_dim must be one of these
    needs_r1_dims: bool = False     # tokenspeed_mla: DeepSeek-R1 MLA dims only (and its package installed)

    def block_ok(self, block: int) -> bool:
        return any(block % b == 0 for b in self.blocks)

    def preferred_block(self) -> int:
        return DEFAULT_BLOCK_SIZE if self.block_ok(DEFAULT_BLOCK_SIZE) else min(self.blocks)


BACKENDS = {b.name: b for b in (
    MlaBackend("FLASH_ATTN_MLA", "flashattn_mla", (9,), (16,), NO_FP8_KV, heads=(576,)),
    MlaBackend("FLASHMLA", "flashmla", (9, 10), (64,), FULL_KV),
    MlaBackend("FLASHINFER_MLA", "flashinfer_mla", (10,), (32, 64), FULL_KV, nope_dims=(64, 128, 192)),
    MlaBackend("TOKENSPEED_MLA", "tokenspeed_mla", (10,), (32, 64), ("fp8", "fp8_e4m3"), needs_r1_dims=True),
    MlaBackend("CUTLASS_MLA", "cutlass_mla", (10,), (128,), FULL_KV),
    MlaBackend("TRITON_MLA", "triton_mla", None, (16,), FULL_KV, heads=()),
)}
NAMES = tuple(BACKENDS)


def priorities(sm: int) -> tuple[str, ...]:
    """platforms/cuda.py _get_backend_priorities (use_mla, dense): the order per compute capability major."""
    major = sm // 10
    if major == 10:
        return ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
    if major == 12:
        return ("TRITON_MLA",)
    return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")


def reasons(b: MlaBackend, sm: int, kv: str, block: int | None, head: int, nope_dim: int, r1_dims: bool,
            dtype: str = "bfloat16") -> list[str]:
    """Why `b` is not valid here (empty: valid), in the words of `AttentionBackend.validate_configuration`."""
    out = [] if not b.heads or head in b.heads else ["head_size not supported"]
    if dtype not in DTYPES:
        out.append("dtype not supported")
    if b.majors is not None and sm // 10 not in b.majors:
        out.append("compute capability not supported")
    if kv not in b.kv:
        out.append("kv_cache_dtype not supported")
    if block is not None and not b.block_ok(block):
        out.append("block_size not supported")
    if b.nope_dims is not None and nope_dim not in b.nope_dims:
        out.append(f"FlashInfer MLA kernel requires qk_nope_head_dim in {list(b.nope_dims)}, but got {nope_dim}")
    if b.needs_r1_dims:
        out.append("tokenspeed_mla package is not installed (an optional extra of vLLM)" if r1_dims
                   else "tokenspeed_mla needs DeepSeek-R1 MLA dims")
    return out


@dataclass(frozen=True)
class Selection:
    backend: str | None   # None: no valid backend (vLLM raises in the worker)
    block_size: int       # without a backend: --block-size, else the default (the plan goes on to memory)
    reason: str
    block_reason: str


def select(sm: int, kv: str, user_backend: str | None, user_block: int | None, head: int, nope_dim: int,
           r1_dims: bool, dtype: str = "bfloat16") -> Selection:
    """The backend and block size vLLM's selector reaches (for a model run in `dtype`), with the reason and source."""
    if user_backend is not None:
        why = reasons(BACKENDS[user_backend], sm, kv, user_block, head, nope_dim, r1_dims, dtype)
        if why:
            return Selection(None, user_block or DEFAULT_BLOCK_SIZE, f"--attention-backend {user_backend} is not valid "
                             f"on SM{sm}: {'; '.join(why)}", _NO_BACKEND_BLOCK)
        block = user_block or BACKENDS[user_backend].preferred_block()
        return Selection(user_backend, block, "set by --attention-backend", _block_note(user_backend, user_block))
    order = priorities(sm)
    skipped = []
    for name in order:
        why = reasons(BACKENDS[name], sm, kv, user_block, head, nope_dim, r1_dims, dtype)
        if not why:
            head = f"SM{sm} order {list(order)} (platforms/cuda.py _get_backend_priorities)"
            passed = f"; skipped {'; '.join(skipped)}" if skipped else ""
            return Selection(name, user_block or BACKENDS[name].preferred_block(), f"first valid of {head}{passed}",
                             _block_note(name, user_block))
        skipped.append(f"{name} ({', '.join(why)})")
    return Selection(None, user_block or DEFAULT_BLOCK_SIZE, f"no valid MLA attention backend on SM{sm} with "
                     f"kv_cache_dtype {kv}{f', block_size {user_block}' if user_block else ''}: " + "; ".join(skipped),
                     _NO_BACKEND_BLOCK)


_NO_BACKEND_BLOCK = "no valid attention backend: --block-size, else vLLM's default (config/cache.py DEFAULT_BLOCK_SIZE)"


def _block_note(name: str, user_block: int | None) -> str:
    b = BACKENDS[name]
    if user_block:
        return f"set by --block-size ({name} kernel sizes {list(b.blocks)} and their multiples)"
    return (f"{name}'s preferred size from the default "
            f"{DEFAULT_BLOCK_SIZE} (kernel sizes {list(b.blocks)}, platforms/interface.py "
            "update_block_size_for_backend)")
