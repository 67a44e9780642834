"""The attention-backend interface and its registry: each kernel the runtime chooses between is one object.

Two kinds, by the form of MLA attention the kernel computes (the selector picks the form per chunk):

| kind       | class      | reads                                              | run                         |
| ---------- | ---------- | -------------------------------------------------- | --------------------------- |
| `absorbed` | `Absorbed` | one layer of the paged latent pool, by PagedLayout | run(call, state) -> MLAOut  |
| `mha`      | `Mha`      | one key block's up-projected K/V                   | run(q, k, v, causal, scale) |
|            |            | (attention/mha.py)                                 | -> (o, lse base e)          |

An absorbed backend's hooks, each with one caller:

| hook                           | when                                                  | caller            |
| ------------------------------ | ----------------------------------------------------- | ----------------- |
| prepare(call) -> state         | an eager batch, on its first layer                    | `run` below       |
| capture(call, kept, recording) | a decode graph's batch, on its first layer: told it   | `run` below       |
| -> state                       | is captured; recording False for the capture's eager  |                   |
|                                | warm-up run, True while the graph records             |                   |
| refresh(kept, host_lens, lens) | before each replay of a graph that runs it (host      | the decode graphs |
|                                | work)                                                 |                   |
| run(call, state) -> MLAOut     | every layer, with the batch's state; a replay repeats | `run` below       |
|                                | what it launched while recording                      |                   |

`kept` is the decode graphs' dict that outlives their captures and replays (a backend keeps its entry under
its name: FlashMLA its tile metadata, remade by `refresh` only when a row's block count changed); the hooks a
backend does not need default to nothing (capture: prepare, so device work is recorded and replayed with the
step). `blocker(q, pool, v_dim)` says why it cannot run here (a clause for a note) or None; `graph` says why a
CUDA graph cannot capture it (None: it can); `one_token`: it takes chunks of one token only (its mask is not
causal by global position over a striped shard); `reference`: the exact torch reference, which runs where no
kernel can and is never in the measured table.  Which backend runs a batch is the selector's alone
(attention/selector.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from dcpctl.runtime.attention.triton_mla import MLAOut

ABSORBED, MHA = "absorbed", "mha"
KINDS = (ABSORBED, MHA)
# the mha kind's run: (q [t, H, qk], k [s, H, qk], v [s, H, v], causal, scale) -> (o [t, H, v], lse [t, H]
# natural log)
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
    out: tuple[Tensor, Tensor] | None   # a destination ([c, T, Hk/c, v_dim], [c, T, Hk/c];
                                        # triton_mla.mla_decode)
    out_dtype: torch.dtype | None       # o's dtype from our kernels (None: fp32); the field kernels return
                                        # q's
    descriptors: dict | None            # the pool's cache of bulk-copy descriptors (ours)


class Backend:
    """What every kernel behind the interface says about itself (module docstring)."""

    name: str = ""            # the measured table's, the notes' and the plan's name (plan/attention_names.py)
    kind: str = ""            # ABSORBED or MHA
    label: str = ""           # how a sentence names it (default: name)
    reference: bool = False   # the exact reference: runs where nothing else can

    def blocker(self, q: Tensor, pool: Tensor, v_dim: int) -> str | None:
        return None

    def says(self) -> str:
        return self.label or self.name


class Absorbed(Backend):
    """An absorbed-form kernel over the paged pool (module tables)."""

    kind = ABSORBED
    graph: str | None = None  # why a CUDA graph cannot capture it; None: it can
    one_token: bool = False   # chunks of one token only

    def prepare(self, call: Call) -> Any:
        return None

    def capture(self, call: Call, kept: dict, recording: bool) -> Any:
        return self.prepare(call)

    def refresh(self, kept: dict, host_lens: list[int], lens: Tensor) -> None:
        return None

    def run(self, call: Call, state: Any) -> MLAOut:
        raise NotImplementedError


class Mha(Backend):
    """An MHA-form kernel over one up-projected key block (module table)."""

    kind = MHA

    def run(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
        raise NotImplementedError


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


def of_kind(kind: str) -> list[Any]:
    return [b for (k, _), b in REGISTRY.items() if k == kind]


def get(kind: str, name: str) -> Any:
    b = REGISTRY.get((kind, name))
    if b is None:
        raise ValueError(f"{kind} attention backend {name!r} is not registered; valid: "
                         f"{[x.name for x in of_kind(kind)]}")
    return b


def reference(kind: str) -> Any:
    return next(b for b in of_kind(kind) if b.reference)


def run(b: Absorbed, call: Call) -> MLAOut:
    """One layer through an absorbed backend: the batch's state (prepare, or capture for a decode graph's
    batch, on the batch's first layer; every later layer reads it), then its kernel."""
    lay = call.lay
    state = lay.backend_state
    if b.name not in state:
        g = lay.graph
        state[b.name] = b.prepare(call) if g is None else b.capture(call, g.kept, g.recording)
    return b.run(call, state[b.name])
