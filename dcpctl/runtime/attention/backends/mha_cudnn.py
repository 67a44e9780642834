"""cuDNN's fused attention through torch's SDPA op as the mha-kind `cudnn` backend (the MHA form's CUDA
kernel).

One call attends q/k 192 and v 128 wide (DeepSeek-V3) and returns the natural-log LSE the MHA form merges by
(~600 TFLOP/s on an H200).  cuDNN builds an execution plan per shape (~0.1 s on an H200, paid by the step that
meets it), so the shapes it sees are kept few, exactly: query rows are padded to buckets, and an unmasked call
(a chunk against cached prefix rows) gives cuDNN its keys in multiples of KEY_QUANTUM, then the rest rounded
down to KEY_STEP, and the last few to torch's memory-efficient kernel, which builds nothing, the partials
merged by LSE.  Where cuDNN refuses a call, the memory-efficient kernel runs it (the same (o, lse) contract,
~4x slower).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from dcpctl.runtime.attention import fused_merge
from dcpctl.runtime.attention.backends.base import Kernel, Mha, register
from dcpctl.runtime.attention.merge import acc_dtype
from dcpctl.runtime.notes import note_once


def _sdpa_kernel(op: Callable, q: Tensor, k: Tensor, v: Tensor, causal: bool,
                 scale: float) -> tuple[Tensor, Tensor]:
    # q: [t, H, D]  k: [s, H, D]  v: [s, H, V] (CUDA, 16-bit) -> o [t, H, V] (q's dtype), lse [t, H] natural
    # log
    heads_first = lambda x: x.transpose(0, 1).unsqueeze(0)      # noqa: E731  [1, H, n, D] strided view
    o, lse = op(heads_first(q), heads_first(k), heads_first(v), causal, scale)[:2]
    lse = lse.reshape(q.shape[1], -1)[:, :q.shape[0]]            # [1, H, t(, 1)] (the op may pad t)
    return o[0].transpose(0, 1), lse.transpose(0, 1)


def _cudnn(q, k, v, causal, scale):
    return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False,
                                                              scale=scale)


def _efficient(q, k, v, causal, scale):
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal,
                                                                  scale=scale)


def bucket(n: int) -> int:
    """n rounded up to a multiple of max(128, the power of two at most n / 8): 8 sizes per octave past
    1024."""
    step = max(128, 1 << max(0, n.bit_length() - 4))
    return -(-n // step) * step


def bucketed(kernel: Kernel) -> Kernel:
    """`kernel` over row counts padded to bucket(), exactly: a causal square pads q, k and v alike (a real
    query never sees a key past itself, so the zero keys after the last real one are masked out); an unmasked
    call pads only q.  The extra query rows are dropped.  cuDNN builds an execution plan per shape (~0.1 s):
    buckets keep a server's prompts of every length to a few dozen plans."""
    def run(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        t = q.shape[0]
        extra = bucket(t) - t
        if extra == 0:
            return kernel(q, k, v, causal, scale)
        pad = lambda x: torch.nn.functional.pad(x, (0, 0, 0, 0, 0, extra))   # noqa: E731  more rows at the end
        o, lse = kernel(pad(q), pad(k) if causal else k, pad(v) if causal else v, causal, scale)
        return o[:t], lse[:t]
    return run


KEY_QUANTUM = 1024   # an unmasked call's keys through cuDNN come in multiples of it (few plans) ...
KEY_STEP = 128       # ... then the rest rounded down to a multiple of this (7 more key sizes); the last <
                     # 128, fewer


def keyed(kernel: Kernel, rest: Kernel, quantum: int = KEY_QUANTUM, step: int = KEY_STEP) -> Kernel:
    """An unmasked call's keys cut at s - s % quantum and s - s % step: the first two parts through `kernel`,
    the last (fewer than `step`) through `rest`, the partials merged by LSE into the accumulation dtype, which
    the split call returns (its caller, the MHA form's key-block loop, merges it into its accumulator of that
    dtype): every query sees every key either way, so the result is the one call's.  A causal square and a key
    count that is a multiple of `quantum` go to `kernel` whole.  A prefix of no round length (a chunk cut
    short by the budget, a cached prefix) so leaves at most step - 1 keys to the slower kernel."""
    def run(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        s = k.shape[0]
        if causal or s % quantum == 0:
            return kernel(q, k, v, causal, scale)
        main = s - s % quantum
        cuts = [0, main, max(main, s - s % step), s]
        (a, b, fn), *more = [(a, b, fn) for a, b, fn in zip(cuts, cuts[1:], (kernel, kernel, rest)) if b > a]
        o, lse = fn(q, k[a:b], v[a:b], False, scale)
        if not more:
            return o, lse
        dt = acc_dtype(q.dtype)
        acc, acc_lse = o.to(dt), lse.to(dt, copy=True)
        for a, b, fn in more:
            fused_merge.merge_into(acc, acc_lse, *fn(q, k[a:b], v[a:b], False, scale))
        return acc, acc_lse
    return run


def cudnn_kernel(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """cuDNN's fused attention through torch's SDPA op (q/k 192 and v 128 in one call, ~600 TFLOP/s on an
    H200), over bucketed query rows and quantized keys (module docstring); where cuDNN refuses a call, torch's
    memory-efficient kernel (the same (o, lse) contract, ~4x slower)."""
    return _cudnn_keyed(q, k, v, causal, scale)


def _cudnn_or_efficient(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    try:
        return _sdpa_kernel(_cudnn, q, k, v, causal, scale)
    except RuntimeError as e:
        if not v.is_contiguous():    # v is a strided view of the up-projection: some cuDNN builds want it
                                     # packed
            note_once(f"MHA-form attention: cuDNN refused a strided v ({str(e).splitlines()[0][:120]}); "
                      "v is copied to a packed tensor first")
            return _cudnn_or_efficient(q, k, v.contiguous(), causal, scale)
        note_once(f"MHA-form attention: cuDNN refused a call ({str(e).splitlines()[0][:120]}); "
                  f"torch's memory-efficient SDPA kernel runs it")
        return _efficient_kernel(q, k, v, causal, scale)


def _efficient_kernel(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    return _sdpa_kernel(_efficient, q, k, v.contiguous(), causal, scale)


_cudnn_bucketed = bucketed(_cudnn_or_efficient)
_cudnn_keyed = keyed(_cudnn_bucketed, _efficient_kernel)


def blocker(q: Tensor, pool: Tensor, v_dim: int) -> str | None:
    """Why cuDNN cannot run this MHA-form batch (a clause), or None."""
    if not q.is_cuda:
        return "the queries are not on a GPU"
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"the queries are {str(q.dtype).removeprefix('torch.')} (it takes 16-bit inputs)"
    return None


class Cudnn(Mha):
    name, label = "cudnn", "cudnn (torch _scaled_dot_product_cudnn_attention)"

    def blocker(self, q: Tensor, pool: Tensor, v_dim: int) -> str | None:
        return blocker(q, pool, v_dim)

    def run(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        return cudnn_kernel(q, k, v, causal, scale)


BACKEND = register(Cudnn())
