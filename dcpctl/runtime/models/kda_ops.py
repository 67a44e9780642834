"""The gated delta rule of KDA in two exact forms: step by step (decode) and chunked (prefill).

Both take q, k: [n, L, H, dk] (l2-normalized; q already scaled), v: [n, L, H, dv], g: [n, L, H, dk]
(log decay per key channel), beta: [n, L, H], S: [n, H, dk, dv] and return (o [n, L, H, dv], S).
Steps with g = 0 and beta = 0 leave S unchanged, so padded spans are exact.

Chunked form (chunk of C steps, G = cumsum of g inside the chunk, k_b = beta * k, v_b = beta * v):

    A[i, j]   = -sum_d k_b[i, d] k[j, d] exp(G[i, d] - G[j, d])        j < i, else 0
    T         = (I - A')^-1 by forward substitution (A' = -A strictly lower), so that
    U = T v_b,  W = T (k_b * exp(G))                                     (WY form of the chunk)
    V_new     = U - W S
    o         = (q * exp(G)) S + tril_incl(q k^T with decay exp(G_i - G_j)) V_new
    S        <- S * exp(G[-1]) + (k * exp(G[-1] - G))^T V_new

transformers' torch fallback uses the same form (64-step chunks) for multi-token inputs and the step
form for single tokens; following its choice keeps fp32 results comparable (hf_numerics).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK = 64


def recurrent_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                  S: Tensor) -> tuple[Tensor, Tensor]:
    # q, k, g: [n, L, H, dk]  v: [n, L, H, dv]  beta: [n, L, H]  S: [n, H, dk, dv] -> (o [n, L, H, dv], S)
    out = torch.empty_like(v)
    for t in range(q.shape[1]):
        S = S * g[:, t, :, :, None].exp()
        delta = (v[:, t] - (S * k[:, t, :, :, None]).sum(-2)) * beta[:, t, :, None]  # [n, H, dv]
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (S * q[:, t, :, :, None]).sum(-2)
    return out, S


def _to_chunks(x: Tensor, pad: int) -> Tensor:
    # x: [n, L, H, ...] -> [n, H, L/C, C, ...] zero-padded at the end
    x = x.movedim(2, 1)
    x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
    return x.reshape(x.shape[0], x.shape[1], -1, CHUNK, *x.shape[3:])


def chunked_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, S: Tensor) -> tuple[Tensor, Tensor]:
    # same shapes as recurrent_kda; exact for any L (zero-padded to a multiple of CHUNK)
    n, L = q.shape[:2]
    pad = -L % CHUNK
    q, k, v, g = (_to_chunks(x, pad) for x in (q, k, v, g))  # [n, H, N, C, d]
    beta = _to_chunks(beta[..., None], pad)[..., 0]  # [n, H, N, C]
    k_b, v_b = k * beta[..., None], v * beta[..., None]
    G = g.cumsum(-2)
    ones = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device)
    upper_incl, upper = ones.triu(0), ones.triu(1)
    decay = (G[..., :, None, :] - G[..., None, :, :]).masked_fill(upper[..., None], float("-inf")).exp()
    A = -(k_b[..., :, None, :] * k[..., None, :, :] * decay).sum(-1).masked_fill(upper_incl, 0)
    for i in range(1, CHUNK):  # forward substitution, row by row
        row, above = A[..., i, :i].clone(), A[..., :i, :i].clone()
        A[..., i, :i] = row + (row[..., None] * above).sum(-2)
    T = A + torch.eye(CHUNK, dtype=A.dtype, device=A.device)
    U, W = T @ v_b, T @ (k_b * G.exp())
    out = torch.zeros_like(U)
    for c in range(q.shape[2]):
        qc, kc, Gc = q[:, :, c], k[:, :, c], G[:, :, c]
        intra = (qc[..., :, None, :] * kc[..., None, :, :] * decay[:, :, c]).sum(-1).masked_fill(upper, 0)
        v_new = U[:, :, c] - W[:, :, c] @ S
        out[:, :, c] = (qc * Gc.exp()) @ S + intra @ v_new
        last = Gc[..., -1:, :]  # [n, H, 1, dk]
        S = S * last.transpose(-1, -2).exp() + (kc * (last - Gc).exp()).transpose(-1, -2) @ v_new
    out = out.reshape(n, out.shape[1], -1, out.shape[-1])[:, :, :L]
    return out.movedim(1, 2), S
