"""The attention-backend interface and its registry: each kernel the runtime chooses between is one `Backend`.

Two kinds, by the form of MLA attention the kernel computes (attention/form.py picks the form per chunk):

| kind       | reads                                               | run                                             |
| ---------- | --------------------------------------------------- | ----------------------------------------------- |
| `absorbed` | one layer of the paged latent pool, by PagedLayout  | run(call: Call, state) -> MLAOut (triton_mla)   |
| `mha`      | one key block's up-projected K/V (attention/mha.py) | run(q, k, v, causal, scale) -> (o, lse base e)  |

Per backend: `blocker(q, pool, v_dim)` says why it cannot run here (a clause for a note) or None; `prepare(call)`
builds its per-batch state from the paged layout once, on the batch's first layer (`run`; kept in
`PagedLayout.backend_state[name]`); `graph` says why a CUDA graph cannot capture it (None: prepare and run are
captured whole, and a replay repeats prepare's device work with the step, except what the backend keeps in the
graphs' `PagedLayout.graph_state[name]` and remakes before a replay, when needed, in `refresh(state, host_lens,
lens)`: the rows' local lengths on the host and on the device); `one_token`: it takes chunks of one
token only (its mask is not causal by global position over a striped shard); `fallback`: the exact torch reference,
which runs where no kernel can and is never in the measured table.  Which absorbed backend runs a batch is
backend_choice's rule; the mha kind runs the first registered kernel with no blocker (`runnable`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from dcpctl.runtime.attention.triton_mla import MLAOut

ABSORBED, MHA = "absorbed", "mha"
KINDS = (ABSORBED, MHA)
# the mha kind's run: (q [t, H, qk], k [s, H, qk], v [s, H, v], causal, scale) -> (o [t, H, v], lse [t, H] natural log)
Kernel = Callable[[Tensor, Tensor, Tensor, bool, float], tuple[Tensor, Tensor]]


class Call(NamedTuple):
    """One layer's local attention of the absorbed kind (attention/paged.py builds it per layer)."""

    q: Tensor                           # [T, Hk, R]
    pool: Tensor                        # [pages, P, R]: one layer of the KV pool
    lay: Any                            # the batch's PagedLayout
    scale: float
    v_dim: int
    dcp_rank: int
    dcp_size: int
    out: tuple[Tensor, Tensor] | None   # a destination ([c, T, Hk/c, v_dim], [c, T, Hk/c]; triton_mla.mla_decode)
    out_dtype: torch.dtype | None       # o's dtype from our kernels (None: fp32); the field kernels return q's
    descriptors: dict | None            # the pool's cache of bulk-copy descriptors (ours)


@dataclass(frozen=True)
class Backend:
    """One kernel behind the interface (see the module table)."""

    name: str                                           # the measured table's and --attention-backend's name
    kind: str                                           # ABSORBED or MHA
    blocker: Callable[[Tensor, Tensor, int], str | None]
    run: Callable[..., Any]                             # the kind's contract (module table)
    prepare: Callable[[Call], Any] | None = None        # absorbed: per-batch state from the layout (None: none)
    graph: str | None = None                            # why a CUDA graph cannot capture it; None: it can
    refresh: Callable[[Any, list[int], Tensor], None] | None = None   # graphs: before a replay (module docstring)
    one_token: bool = False                             # absorbed: chunks of one token only
    fallback: bool = False                              # the exact reference: runs where nothing else can
    label: str = ""                                     # how a note names it (default: name)


REGISTRY: dict[tuple[str, str], Backend] = {}           # (kind, name) -> backend, in registration order


def register(b: Backend) -> Backend:
    if b.kind not in KINDS:
        raise ValueError(f"attention backend kind {b.kind!r} is not supported; valid: {list(KINDS)}")
    if (b.kind, b.name) in REGISTRY:
        raise ValueError(f"an {b.kind} attention backend {b.name!r} is already registered")
    REGISTRY[b.kind, b.name] = b
    return b


def unregister(kind: str, name: str) -> None:
    get(kind, name)
    del REGISTRY[kind, name]


def of_kind(kind: str) -> list[Backend]:
    return [b for (k, _), b in REGISTRY.items() if k == kind]


def get(kind: str, name: str) -> Backend:
    b = REGISTRY.get((kind, name))
    if b is None:
        raise ValueError(f"{kind} attention backend {name!r} is not registered; valid: "
                         f"{[x.name for x in of_kind(kind)]}")
    return b


def fallback(kind: str) -> Backend:
    return next(b for b in of_kind(kind) if b.fallback)


def runnable(kind: str, q: Tensor, pool: Tensor, v_dim: int) -> Backend:
    """The first registered kernel of `kind` with no blocker here, else the kind's fallback."""
    return next((b for b in of_kind(kind) if not b.fallback and b.blocker(q, pool, v_dim) is None), fallback(kind))


def run(b: Backend, call: Call) -> MLAOut:
    """One layer through an absorbed backend: its per-batch state (prepare runs on the batch's first layer and
    every later layer reads it), then its kernel."""
    state = call.lay.backend_state
    if b.name not in state:
        state[b.name] = b.prepare(call) if b.prepare is not None else None
    return b.run(call, state[b.name])
