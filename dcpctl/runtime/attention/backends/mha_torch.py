"""The mha kind's exact torch reference: one masked softmax per call in the accumulation dtype."""
from __future__ import annotations

import torch
from torch import Tensor

from dcpctl.plan.attention_names import REFERENCE
from dcpctl.runtime.attention.backends.base import Mha, register
from dcpctl.runtime.attention.merge import acc_dtype


def reference_kernel(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    # q: [t, H, D]  k: [s, H, D]  v: [s, H, V] -> o [t, H, V], lse [t, H] (acc dtype; causal: t == s)
    dt = acc_dtype(q.dtype)
    s = torch.einsum("thd,shd->hts", q.to(dt), k.to(dt)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -torch.inf)
    lse = torch.logsumexp(s, dim=-1)                                   # every row sees >= 1 key
    o = torch.einsum("hts,shv->thv", torch.exp(s - lse.unsqueeze(-1)), v.to(dt))
    return o, lse.transpose(0, 1)


class Reference(Mha):
    name, label, reference = REFERENCE, "torch reference", True

    def run(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        return reference_kernel(q, k, v, causal, scale)


BACKEND = register(Reference())
